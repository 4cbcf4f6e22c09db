"""What a framework hands ``run.py profile``: the time each layer of the SUT's own model takes,
read with that framework's own profiler, on real samples after warm-up.

A framework that can profile has a ``profile`` module in its folder (``sut/onnxruntime/
profile.py`` ...) with:

* ``profile(backend, samples, iterations, warmup) -> Profile``: run ``samples`` (one batch, in
  ``backend.layout``, as ``predict`` takes it) through the model the SUT ``backend`` runs, with
  the framework's profiler on (ONNX Runtime's profiler, OpenVINO's performance counters, LiteRT's
  op profiling, torch.profiler), ``warmup`` times unmeasured, then ``iterations`` times: each
  layer's time per inference is its median over the iterations. The same loop times the whole
  inference (``end_to_end_ms``: the median wall time of one inference with the profiler on), so
  the per-layer sum is checked against a figure of the same run.
* ``PROFILER``: a line naming the mechanism, for the report.

A framework without the module, or whose profiler is missing here, is one line in the report
(``unsupported``), and the others go on. Nothing here knows another framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CATEGORIES", "OVERCOUNTED", "UNATTRIBUTED", "LayerTime", "Profile",
           "median_ms"]

#: what a row's time is spent on. ``compute``: a layer of the source graph (a convolution, a
#: matmul, a pool, an activation); ``overhead``: what the framework added that the source graph
#: lacks (reorders, layout transposes, quantize/dequantize, precision converts); ``other``: the
#: rest (inputs, outputs, memory copies the profiler names)
CATEGORIES = ("compute", "overhead", "other")
#: ``Profile.notes`` keys: what the end-to-end time holds beyond the per-layer sum, and what
#: makes the sum exceed it, where the framework's profiler knows better than the generic line
UNATTRIBUTED = "unattributed"
OVERCOUNTED = "overcounted"


@dataclass(frozen=True)
class LayerTime:
    """One node of the executed model and its time per inference."""

    #: the framework's own node or op name (what the profiler prints)
    name: str
    #: the framework's op type (Conv, QLinearConv, Reorder, CONV_2D, aten::conv2d ...)
    op_type: str
    #: the kernel or provider that ran it (CPUExecutionProvider, jit_avx512_I8,
    #: brgemm_avx512_amx, a quantized kernel's name), "" where the profiler does not say
    kernel: str
    #: the precision the node computed in ("int8", "fp32", "bf16", "fp16"), "" where unknown
    precision: str
    #: one of CATEGORIES
    category: str
    #: the median over the profiled iterations of this node's time in one inference, in ms
    #: (several calls of one node in one inference are summed first)
    median_ms: float
    #: how many times the node ran in one inference
    calls: int = 1


@dataclass
class Profile:
    """Every profiled node of one SUT's model, in execution order, and the whole inference."""

    sut: str
    framework: str
    batch_size: int
    iterations: int
    layers: list[LayerTime]
    #: the median wall time of one inference in the profiled loop (profiler on), in ms
    end_to_end_ms: float
    #: the mechanism in a line ("onnxruntime profiler: SessionOptions.enable_profiling")
    method: str
    #: anything the reader needs (a node the profiler could not attribute, a tool version);
    #: ``notes[UNATTRIBUTED]`` / ``notes[OVERCOUNTED]``, where a framework knows, name what the
    #: end-to-end time holds beyond the layer sum / what makes the sum exceed it
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def layer_sum_ms(self) -> float:
        return sum(layer.median_ms for layer in self.layers)


def median_ms(times_s: list[float]) -> float:
    """The median of per-iteration times in seconds, in ms (0 for none)."""
    if not times_s:
        return 0.0
    ordered = sorted(times_s)
    mid = len(ordered) // 2
    value = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return value * 1000.0
