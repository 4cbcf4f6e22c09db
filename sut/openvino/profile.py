"""Layer-by-layer time of an OpenVINO SUT (``sut.profiling`` contract), from the CPU plugin's
performance counters.

The SUT's own IR is compiled a second time as ``load`` compiles it (its spatial size, static or
dynamic batch, the backend's own ``_config``: performance hint, inference precision, threads)
with ``enable_profiling`` on; one infer request runs the samples ``warmup`` times, then
``iterations`` times, each inference timed. ``get_profiling_info`` lists the executed runtime
nodes (after fusion: a conv with its bias, ReLU and requantization is one node) in execution
order, with the primitive that ran (``exec_type``: ``brgconv_avx512_amx_I8``, ``jit_avx2_FP32``
...) whose suffix is the precision it computed in.

The plugin keeps its counters per stream's graph, and one request's inferences alternate between
the streams: a SUT compiled for several streams (the THROUGHPUT hint) is profiled as one stream
with one stream's share of the threads, what each of its requests runs on (``notes["streams"]``).
The plugin's counter of a node is the running average over every inference the compiled model
ran, in whole microseconds, not one inference's time. The time of a node here is therefore its
mean over the profiled iterations, recovered from the counters read before and after them
(``(avg_after * n_after - avg_before * n_before) / iterations``; about 1 us resolution), not a
per-iteration median: ``notes`` says so.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.profiling import LayerTime, Profile, median_ms

__all__ = ["PROFILER", "profile"]

log = logging.getLogger(__name__)

PROFILER = ("openvino CPU plugin performance counters (enable_profiling / PERF_COUNT, "
            "InferRequest.get_profiling_info)")
#: runtime node types that only convert or re-lay values (what the plugin adds to the graph)
OVERHEAD_TYPES = frozenset({"Reorder", "Convert", "FakeQuantize", "Transpose"})
#: runtime node types that move the inputs and outputs
OTHER_TYPES = frozenset({"Parameter", "Result", "Input", "Output"})
#: exec_type suffixes -> the precision quantmark reports
SUFFIX_PRECISION = {"I8": "int8", "U8": "int8", "BF16": "bf16", "FP16": "fp16", "F16": "fp16",
                    "FP32": "fp32", "F32": "fp32"}


def precision_of(exec_type: str) -> str:
    """``jit_avx512_I8`` -> "int8", ``ref_any_FP32`` -> "fp32"; "" when the suffix says none."""
    return SUFFIX_PRECISION.get(exec_type.rpartition("_")[2].upper(), "")


def _compile(backend: Any, batch: int) -> tuple[Any, dict[str, list[str]], str]:
    """(the SUT's model compiled with profiling on, runtime node -> its original op types,
    a line on the streams and threads profiled)."""
    import openvino as ov
    import openvino.properties as props

    from quantmark.sut.openvino.runtime_graph import rt_text as _text

    core = ov.Core()
    try:  # SingleStream's static shape, at the profiled batch
        model = backend.prepared_model(core, batch if backend.static_batch else None)
        types = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
        config = {**backend._config(), props.enable_profiling: True}
        compiled = core.compile_model(model, "CPU", config)
        streams = int(compiled.get_property(props.num_streams))
        threads = int(compiled.get_property(props.inference_num_threads))
        note = f"as the SUT compiles it: {streams} stream(s), {threads} thread(s)"
        if streams > 1:  # counters are per stream's graph: one stream, one stream's threads
            per_stream = max(1, threads // streams)
            config.update({props.num_streams: 1, props.inference_num_threads: per_stream})
            compiled = core.compile_model(model, "CPU", config)
            note = (f"the SUT compiles {streams} streams of {per_stream} thread(s), and a "
                    "sync request's inferences alternate between the streams' graphs, each "
                    f"with its own counters: profiled as 1 stream of {per_stream} thread(s), "
                    "what one of the SUT's requests runs on")
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses
        raise SutError(f"openvino could not compile {backend.model_path} for profiling: "
                       f"{exc}") from exc
    originals: dict[str, list[str]] = {}
    for node in compiled.get_runtime_model().get_ordered_ops():
        info = node.get_rt_info()
        names = _text(info["originalLayersNames"]).split(",") if (
            "originalLayersNames" in info) else []
        originals[node.get_friendly_name()] = [types.get(n, "?") for n in names if n]
    return compiled, originals, note


def category_of(node_type: str, original_types: list[str]) -> str:
    """compute / overhead / other for one runtime node; a Subgraph (snippets) made only of
    converts, FakeQuantizes or transposes is overhead, one with arithmetic is compute."""
    if node_type in OTHER_TYPES:
        return "other"
    if node_type in OVERHEAD_TYPES:
        return "overhead"
    if node_type == "Subgraph" and original_types and set(original_types) <= OVERHEAD_TYPES:
        return "overhead"
    return "compute"


def _executed(request: Any) -> list[Any]:
    import openvino as ov

    executed = ov.ProfilingInfo.Status.EXECUTED
    return [info for info in request.get_profiling_info() if info.status == executed]


def _means_us(before: list[Any], after: list[Any], n_before: int,
              iterations: int) -> dict[str, float]:
    """Each node's mean over the profiled iterations from the running averages around them."""
    old = {info.node_name: info.real_time.total_seconds() * 1e6 for info in before}
    n_after = n_before + iterations
    return {info.node_name: max(0.0, (info.real_time.total_seconds() * 1e6 * n_after
                                      - old.get(info.node_name, 0.0) * n_before) / iterations)
            for info in after}


def _check(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> None:
    name = getattr(getattr(backend, "sut", None), "name", type(backend).__name__)
    if not hasattr(backend, "_config") or not hasattr(backend, "model_path"):
        raise UserError(f"{name}: not an OpenVINO CPU backend; cannot profile it here")
    if iterations < 1 or warmup < 0:
        raise UserError(f"profile needs iterations >= 1 and warmup >= 0, got {iterations} "
                        f"and {warmup}")
    if len(samples) == 0:
        raise UserError("profile needs at least one sample")


def profile(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each executed runtime node's time per inference of ``samples`` in the SUT's IR."""
    import openvino as ov
    import openvino.properties.hint as hints

    from quantmark.sut.openvino.runtime_graph import rt_text as _text

    _check(backend, samples, iterations, warmup)
    compiled, originals, streams = _compile(backend, len(samples))
    request = compiled.create_infer_request()
    text = getattr(backend, "_text", None)  # a text model: its token inputs by name
    dtype = np.dtype(compiled.input(0).get_element_type().to_dtype())
    feeds = (text.feeds(samples) if text is not None
             else {0: np.ascontiguousarray(samples, dtype=dtype)})
    for _ in range(warmup):
        request.infer(feeds, share_inputs=True)
    before = _executed(request) if warmup else []
    wall: list[float] = []
    for _ in range(iterations):
        start = time.perf_counter()
        request.infer(feeds, share_inputs=True)
        wall.append(time.perf_counter() - start)
    after = _executed(request)
    means = _means_us(before, after, warmup, iterations)
    layers = [LayerTime(info.node_name, info.node_type, info.exec_type,
                        precision_of(info.exec_type),
                        category_of(info.node_type, originals.get(info.node_name, [])),
                        means[info.node_name] / 1000.0)
              for info in after]
    name = backend.sut.name
    log.info("%s: %d executed nodes profiled over %d iterations", name, len(layers), iterations)
    return Profile(
        sut=name, framework="openvino", batch_size=len(samples), iterations=iterations,
        layers=layers, end_to_end_ms=median_ms(wall), method=PROFILER,
        notes={"openvino_version": ov.__version__,
               "layer_time": "mean over the profiled iterations (the plugin keeps a running "
                             "average per node in whole microseconds, not per-inference "
                             "times), so not a median; a node that ran under the 1 us "
                             "resolution in every iteration reads 0; end_to_end_ms is the "
                             "median",
               "batch": "static" if backend.static_batch else "dynamic",
               "streams": streams,
               "inference_precision_hint": _text(compiled.get_property(
                   hints.inference_precision))})
