"""ONNX Runtime (CPU execution provider): ``ort-fp32``, ``ort-fp16``, ``ort-int8``, ``ort-int8dyn``.

* ``ort-int8``: a statically quantized QDQ model (per-channel weights, calibrated on the
  shared calibration set); ORT fuses the QDQ pairs into QLinearConv / QGemm kernels.
* ``ort-int8dyn``: dynamic quantization (int8 weights, activations quantized per call);
  convolutions become DynamicQuantizeLinear + ConvInteger, slower than FP32 on CNNs here.
* ``ort-fp16``: FP16 weights and activations. The CPU provider has no FP16 convolution on
  x86: it runs such nodes in FP32 behind inserted casts. The SUT runs it and says so.

Proof of what executed comes from ORT's own profiler: one profiled run at load lists every
kernel that ran with its input types, so the executed precision of each compute node
(Conv, Gemm, MatMul and their fused / integer forms) is read, not assumed. An INT8 SUT with no
integer kernel fails at load instead of silently measuring FP32.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.models.detector_graph import detector_artifact, is_detector, sample_shape
from quantmark.models.text_graph import is_text, probe_tokens, text_artifact, token_feeds
from quantmark.sut.info import SutInfo
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.onnxruntime.kernels import FLOAT_COMPUTE, INTEGER_KERNELS, TYPE_PRECISION
from quantmark.sut.registry import find_sut, module_sut

log = logging.getLogger(__name__)

#: ORT's input type names -> numpy: what a probe input is made of
ONNX_INPUT_TYPES = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8}


def node_kernel_events(profile: str | Path | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node kernel events of one profiled run (a profile file, or its parsed events)."""
    events = (json.loads(Path(profile).read_text()) if isinstance(profile, (str, Path))
              else profile)
    return [event for event in events
            if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time")]


def executed_kernels(profile: str | Path | list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{op: {precision: count}}`` for the compute kernels of one profiled run."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for event in node_kernel_events(profile):
        args = event.get("args", {})
        op = args.get("op_name", "")
        if op in INTEGER_KERNELS:
            counts[op]["int8"] += 1
        elif op in FLOAT_COMPUTE:
            types = [next(iter(t)) for t in args.get("input_type_shape", [])[:1]]
            counts[op][TYPE_PRECISION.get(types[0], types[0]) if types else "?"] += 1
    return {op: dict(sorted(c.items())) for op, c in sorted(counts.items())}


def precision_summary(kernels: dict[str, dict[str, int]]) -> tuple[str, dict[str, int]]:
    """The executed precision ("int8", "fp32", "int8+fp32" ...) and compute nodes per precision."""
    totals: collections.Counter[str] = collections.Counter()
    for per_precision in kernels.values():
        totals.update(per_precision)
    order = sorted(totals, key=lambda p: -totals[p])
    return ("+".join(order) or "none"), dict(totals)


class OnnxRuntimeBackend(Backend):
    """One ORT InferenceSession on the CPU execution provider."""

    def __init__(self, model_path: str, precision: str, threads: int, artifact: Any,
                 spin: bool = True, sut: SutInfo | None = None,
                 input_shape: tuple[int, ...] | None = None, dynamic: bool = False) -> None:
        self.model_path = model_path
        self.precision = precision
        # the registry entry whose proof the load-time check demands
        self.sut = sut or find_sut("onnxruntime", precision)
        self.threads = threads
        self.spin = spin
        #: one sample as the run feeds it (the spec's): the probe's size where the model's
        #: height or width is dynamic
        self.input_shape = input_shape
        self.artifact = artifact
        self.layout = (artifact.meta or {}).get("layout", "NCHW")
        self.label_offset = int((artifact.meta or {}).get("label_offset", 0))
        #: a detector's head output by name (the file may have others); a classifier's: all,
        #: the first read
        meta = artifact.meta or {}
        self._outputs = ([meta["output_name"]] if is_detector(meta) or is_text(meta) else None)
        #: a text model's token inputs and whether each batch is cut to its longest sequence
        self._token_inputs: tuple[str, ...] = tuple(meta.get("inputs", ())) if is_text(meta) else ()
        self._dynamic = dynamic
        self._session: Any = None
        self._input_name = ""
        self._executed: dict[str, Any] = {}

    def load(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = self._optimization_level(ort)
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if not self.spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self.threads:
            options.intra_op_num_threads = self.threads
        with tempfile.TemporaryDirectory(prefix="quantmark-ort-") as tmp:
            options.enable_profiling = True  # for the one evidence run below, then ended
            options.profile_file_prefix = os.path.join(tmp, "profile")
            try:
                self._session = ort.InferenceSession(
                    self.model_path, sess_options=options, providers=self._providers(),
                    **session_extras(self.artifact))
                self._input_name = self._session.get_inputs()[0].name
                self._session.run(None, self._probe_feeds())
            except Exception as exc:  # ORT raises its own exception types
                raise SutError(f"onnxruntime could not run {self.model_path}: {exc}") from exc
            events = node_kernel_events(self._session.end_profiling())
            kernels = executed_kernels(events)
            self._inspect_profile(events)
            detector = self._detector_evidence(events)
        executed, per_precision = precision_summary(kernels)
        self._executed = {
            "providers": self._session.get_providers(),
            "executed_precision": executed,
            "compute_nodes_by_precision": per_precision,
            "executed_kernels": kernels,
            "source_qdq": _qdq_counts(self.model_path),
            "evidence": "onnxruntime profiler: kernels of one run at load, with input types",
        }
        if detector:
            self._executed["detector"] = detector
        self._check(per_precision)

    def _detector_evidence(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """A detector's head as the profile shows it ran (float); nothing for a classifier."""
        meta = self.artifact.meta or {}
        if not is_detector(meta):
            return {}
        from quantmark.sut.onnxruntime.detection import head_evidence

        return head_evidence(events, meta, self.sut.name)

    def _providers(self) -> list[Any]:
        """The execution providers the session is created with (the GPU SUTs override it)."""
        return ["CPUExecutionProvider"]

    def _optimization_level(self, ort: Any) -> Any:
        return ort.GraphOptimizationLevel.ORT_ENABLE_ALL

    def _inspect_profile(self, events: list[dict[str, Any]]) -> None:
        """Read more evidence from the load-time profile's node events (GPU SUTs: which
        execution provider ran each node)."""

    def _probe_feeds(self) -> dict[str, np.ndarray]:
        """The load-time evidence run's feeds: the token inputs of a text model (at the run's
        sequence length), else the one image input."""
        if self._token_inputs:
            tokens = probe_tokens(self.input_shape[-1] if self.input_shape else 8)
            return token_feeds(tokens, self._token_inputs, dynamic=False)
        return {self._input_name: self._probe_input()}

    def _probe_input(self) -> np.ndarray:
        """A batch-1 zero input of the model's shape (symbolic dims: the fed sample's, else 1)
        and type (float32, or a raw-pixel model's uint8)."""
        inp = self._session.get_inputs()[0]
        fed = (1, *self.input_shape) if self.input_shape else (1,) * len(inp.shape)
        shape = [d if isinstance(d, int) and d > 0 else fed[i] for i, d in enumerate(inp.shape)]
        return np.zeros(shape, ONNX_INPUT_TYPES.get(inp.type, np.float32))

    def _check(self, per_precision: dict[str, int]) -> None:
        name = self.sut.name
        if self.precision == "fp32" and per_precision.get("int8"):
            raise SutError(f"{name}: model runs integer kernels {per_precision}; pass an FP32 "
                           "model")
        if self.sut.proven(per_precision):
            return
        if self.precision != "fp16":
            ran = "+".join(per_precision).upper() or "a run with no compute kernel"
            raise SutError(f"{name}: onnxruntime ran no {'/'.join(self.sut.proof)} compute "
                           f"kernel (compute nodes by precision: {per_precision}); refusing to "
                           f"measure {ran} as {'/'.join(self.sut.proof).upper()}")
        # the CPU provider's known gap: ort-fp16 runs, and its record says so
        note = ("this CPU execution provider has no FP16 convolution/GEMM kernels: "
                "onnxruntime ran every compute node in FP32 behind casts, so ort-fp16 "
                "measures FP32 compute with FP16 storage")
        self._executed["precision_note"] = note
        log.warning("%s executed as %s: %s", name, self._executed["executed_precision"], note)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        if self._token_inputs:
            return self._session.run(self._outputs,
                                     token_feeds(batch, self._token_inputs, self._dynamic))[0]
        return self._session.run(self._outputs, {self._input_name: batch})[0]

    def describe(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {
            "framework": "onnxruntime",
            "framework_version": ort.__version__,
            "requested_precision": self.precision,
            "threads": self.threads or os.cpu_count(),
            "intra_op_spinning": self.spin,
            "model_file": self.model_path,
            **self._executed,
        }

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        """ONNX Runtime ships no benchmark tool in its wheel: the reference is a tight
        ``session.run`` loop with ORT's defaults (``quantmark.bench.vendor_loops``)."""
        return {
            "api": "InferenceSession.run with a numpy input",
            "providers": self._executed.get("providers", self._providers()),
            "threads": self.threads or os.cpu_count(), "inter_op_threads": 1,
            "execution_mode": "sequential", "intra_op_spinning": self.spin,
            "graph_optimization": str(self._optimization_level(__import__("onnxruntime"))),
        }

    def close(self) -> None:
        self._session = None


def check_fixed_batch(artifact: Any, batch_size: int) -> None:
    """A user's ONNX whose input has a fixed batch N is refused before any conversion unless
    it can run every batch it will get: queries come in batches of 1 to ``batch_size``
    (fewer at the end of one), so only N = 1 at batch 1 does. Otherwise ORT would fail the
    first predict with its own text (exit 3), after minutes of conversion."""
    fixed = (artifact.meta or {}).get("static_batch")
    if not fixed or fixed == batch_size == 1:
        return
    where = f"--model-path {(artifact.meta or {}).get('user_file', artifact.path)}"
    if fixed == 1:
        raise UserError(f"{where}: the model's input has a fixed batch of 1; pass --batch-size "
                        f"1 (not {batch_size}), or export the model with a dynamic batch "
                        "dimension")
    raise UserError(f"{where}: the model's input has a fixed batch of {fixed}, but queries "
                    "are split into batches of 1 to --batch-size samples; export the model "
                    "with a dynamic batch dimension (dynamic_axes in torch.onnx.export)")


def session_extras(artifact: Any) -> dict[str, Any]:
    """InferenceSession keywords the model file asks for: the graph optimizers a model with
    nodes kept in FP32 must run without (``quantize.KEEP_FP32_DISABLED_OPTIMIZERS``)."""
    disabled = (getattr(artifact, "meta", None) or {}).get("session_disabled_optimizers")
    return {"disabled_optimizers": list(disabled)} if disabled else {}


def _qdq_counts(path: str) -> dict[str, int]:
    import onnx

    ops = collections.Counter(node.op_type
                              for node in onnx.load(path, load_external_data=False).graph.node)
    return {"QuantizeLinear": ops.get("QuantizeLinear", 0),
            "DequantizeLinear": ops.get("DequantizeLinear", 0),
            "DynamicQuantizeLinear": ops.get("DynamicQuantizeLinear", 0)}


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> OnnxRuntimeBackend:
    """Prepare the ONNX artifact for ``name`` (export, quantize or convert), build the backend.

    ``calibration`` is only touched by ``ort-int8``: a provider with ``arrays(layout)`` and
    ``hash()``.
    """
    from quantmark.models.source import fp32_onnx, is_torch_weights
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.onnxruntime import quantize

    sut = module_sut(name, __name__)
    precision = sut.precision_key
    path = options.model_path
    if path and not (path.endswith(".onnx") or is_torch_weights(path)):
        raise UserError(f"--model-path {path}: the ONNX Runtime SUTs take an .onnx file or a "
                        f"torch state_dict (.pt/.pth) of model {options.model}")
    if is_text(spec):
        fp32 = text_artifact(path, spec, f"model {spec.name}: --model-path {path}")
    else:
        fp32 = fp32_onnx(spec, path)
    if is_detector(spec):
        fp32 = detector_artifact(fp32, spec)
    check_fixed_batch(fp32, options.batch_size)
    artifact = fp32
    if fp32.precision == "int8":  # the user's own quantized model runs as it is
        if precision != "int8":
            raise UserError(f"--model-path {path} is already quantized: run it with ort-int8, "
                            f"or give {name} an FP32 model")
    elif precision == "int8":
        layout = (fp32.meta or {}).get("layout", "NCHW")
        artifact = quantize.quantize_static_int8(fp32, calibration.arrays(layout),
                                                     calibration.hash())
    elif precision == "int8dyn":
        artifact = quantize.quantize_dynamic_int8(fp32)
    elif precision == "fp16":
        artifact = quantize.convert_fp16(fp32)
    # Server queries arrive on LoadGen's schedule and pass through a worker thread: ORT's
    # spinning intra-op threads would starve those threads of the CPU between predictions;
    # so would they the other members of an ensemble (co-located models).
    spin = options.scenario != "Server" and not options.co_located
    layout = artifact.meta.get("layout", "NCHW")
    if is_text(spec):
        shape: tuple[int, ...] = (3, spec.seq_len)
    else:
        shape = (sample_shape(spec, layout) if is_detector(spec)
                 else recipe_for(spec, layout).input_shape())
    return OnnxRuntimeBackend(str(artifact.path), precision, options.threads, artifact, spin,
                              sut, shape, dynamic=spec.padding == "dynamic")
