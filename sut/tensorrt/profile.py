"""Per-layer time of a TensorRT SUT's engine (``run.py profile``; contract: ``sut.profiling``).

TensorRT's own mechanism: an ``IProfiler`` attached to an execution context
(``context.profiler``) is called once per engine layer for each ``execute_async_v3``, with the
layer's name and its GPU time in milliseconds (``report_layer_time``). The SUT's engine runs
in an execution context of its own here (its own stream and buffers, as the SUT's contexts
have), so the SUT's contexts never carry a profiler; each inference copies in, enqueues, copies
out and waits, as ``predict`` does, and that wall time is the end-to-end time.

Each engine layer's kernel and precision come from the engine inspector's JSON (the engine is
built with ``ProfilingVerbosity.DETAILED``, which also makes the profiler report layer names,
not indices): its tactic, and the data type it consumes, as the SUT's load-time check reads
it. Reformat and copy layers (``Reformatting CopyNode ...``) and quantize/dequantize layers
are what TensorRT put into the engine that the source graph lacks: ``overhead``.

Nothing here imports TensorRT or CUDA at module level: the inspector parsing and the
categories are pure and tested on the CPU.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.profiling import LayerTime, Profile, median_ms
from quantmark.sut.tensorrt.backend import _layer_precision

__all__ = ["PROFILER", "EngineLayer", "category", "engine_layers", "profile", "to_layers"]

log = logging.getLogger(__name__)

PROFILER = ("tensorrt IProfiler (context.profiler, report_layer_time per engine layer per "
            "execute_async_v3); kernels and precisions from the engine inspector")
#: engine layers that only move or re-lay data between formats
REFORMAT_MARKERS = ("reformat", "copynode")
#: engine layers that (de)quantize: the INT8 route's conversions
QDQ_MARKERS = ("quantize", "dequantize", "qdq")
#: engine layer types that compute whatever they fused
COMPUTE_TYPES = ("conv", "gemm", "matrixmultiply", "fullyconnected")
#: engine layers that hold no arithmetic (shape plumbing, constants, no-ops)
OTHER_TYPES = ("shuffle", "noop", "constant", "identity", "shape", "slice")


@dataclass(frozen=True)
class EngineLayer:
    """What the engine inspector says of one engine layer."""

    name: str
    layer_type: str
    kernel: str
    precision: str
    category: str


def category(name: str, layer_type: str = "", origin: str = "") -> str:
    """``overhead`` for reformats, copies, (de)quantize layers and transposes; ``other`` for
    shape plumbing; ``compute`` for the rest. A convolution or GEMM stays compute whatever it
    fused (``/c/Conv + /r/Relu + /q/QuantizeLinear``); a layer the inspector does not list (a
    Myelin sub-kernel) is read by its name: overhead only when every fused part is a
    reformat or a (de)quantize."""
    kind = layer_type.lower()
    if any(marker in kind for marker in COMPUTE_TYPES):
        return "compute"
    if any(marker in f"{kind} {origin.lower()}" for marker in REFORMAT_MARKERS + QDQ_MARKERS):
        return "overhead"
    if kind in OTHER_TYPES:
        return "overhead" if "transpose" in name.lower() else "other"
    if any(marker in name.lower() for marker in REFORMAT_MARKERS):  # "Reformatting CopyNode
        return "overhead"  # for Input Tensor 0 to /a/Conv + /b/Relu" names what it feeds
    parts = [part.strip().lower() for part in name.split(" + ") if part.strip()]
    if parts and all(any(marker in part for marker in QDQ_MARKERS) for part in parts):
        return "overhead"
    return "compute"


def engine_layers(inspector_json: str | dict[str, Any]) -> dict[str, EngineLayer]:
    """{engine layer name: its type, tactic, precision and category} from the inspector's JSON
    (``LayerInformationFormat.JSON``, a DETAILED engine); an unreadable entry is skipped."""
    info = json.loads(inspector_json) if isinstance(inspector_json, str) else inspector_json
    layers = info.get("Layers") if isinstance(info, dict) else None
    found: dict[str, EngineLayer] = {}
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict) or not layer.get("Name"):
            continue
        name, kind = str(layer["Name"]), str(layer.get("LayerType", ""))
        kernel = str(layer.get("TacticName") or layer.get("TacticValue") or "")
        found[name] = EngineLayer(name, kind, kernel, _layer_precision(layer) or "",
                                  category(name, kind, str(layer.get("Origin", ""))))
    return found


def to_layers(runs: list[list[tuple[str, float]]],
              inspected: dict[str, EngineLayer]) -> list[LayerTime]:
    """Rows from the profiler's reports, one list of (layer name, ms) per inference: a layer
    reported twice in one inference is summed, its time the median over inferences; rows in
    the order of the first inference; a layer the inspector lacks keeps its name only."""
    order: list[str] = []
    times: dict[str, list[float]] = collections.defaultdict(list)
    calls: dict[str, int] = {}
    for reports in runs:
        spent: dict[str, float] = collections.defaultdict(float)
        counted: collections.Counter[str] = collections.Counter()
        for name, ms in reports:
            if name not in times:
                order.append(name)
                times[name] = []
            spent[name] += ms / 1000.0
            counted[name] += 1
        for name, seconds in spent.items():
            times[name].append(seconds)
            calls[name] = counted[name]
    rows = []
    for name in order:
        layer = inspected.get(name) or EngineLayer(name, "", "", "", category(name))
        rows.append(LayerTime(name, layer.layer_type, layer.kernel, layer.precision,
                              layer.category, median_ms(times[name]), calls[name]))
    return [row for row in rows if row.median_ms > 0]


def _recorder(trt: Any) -> Any:
    """An ``IProfiler`` that keeps each inference's (layer name, ms) reports."""

    class Recorder(trt.IProfiler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)  # TensorRT's rule for a Python profiler
            self.reports: list[tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.reports.append((str(layer_name), float(ms)))

    return Recorder()


def _check(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> Any:
    """TensorRT itself, or a one-line error for what cannot be profiled here."""
    from quantmark.sut.tensorrt.backend import TensorRTBackend

    name = getattr(backend, "name", type(backend).__name__)
    if not isinstance(backend, TensorRTBackend):
        raise UserError(f"{name}: TensorRT layer profiling takes a TensorRT SUT's backend")
    if iterations < 1 or warmup < 0:
        raise UserError(f"profile needs iterations >= 1 and warmup >= 0, got {iterations} "
                        f"and {warmup}")
    low, high = backend.profile.min, backend.profile.max
    if not low <= len(samples) <= high:
        raise UserError(f"profile needs a batch of {low} to {high} samples (the engine's "
                        f"batch profile), got {len(samples)}")
    if backend._engine is None or not backend._slots:
        raise SutError(f"{name}: not loaded (load() it before profiling)")
    try:
        import tensorrt as trt
    except ImportError:
        raise SutError(f"{name}: TensorRT is not installed here") from None
    return trt


def _run(backend: Any, trt: Any, samples: np.ndarray, iterations: int,
         warmup: int) -> tuple[list[list[tuple[str, float]]], list[float], str]:
    """(each inference's layer reports, its wall time, the inspector's JSON) from a context
    of its own, shaped as the SUT's first."""
    from quantmark.sut.tensorrt.backend import _Slot

    first = backend._slots[0]
    slot = _Slot(backend._engine, list(first.plans.values()), first.input_name,
                 first.output_name, first.runtime)
    try:
        slot.bind(len(samples))
        inspector = backend._engine.create_engine_inspector()
        for attribute in ("execution_context", "context"):  # TensorRT 10 / 8 names
            if hasattr(inspector, attribute):
                setattr(inspector, attribute, slot.context)
                break
        layers = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        for _ in range(warmup):
            slot.run(samples)
        recorder = _recorder(trt)
        slot.context.profiler = recorder
        runs, wall = [], []
        for _ in range(iterations):
            recorder.reports = []
            started = time.perf_counter()
            slot.run(samples)  # waits for its stream: the reports are in
            wall.append(time.perf_counter() - started)
            runs.append(recorder.reports)
    finally:
        slot.close()
    return runs, wall, layers


def profile(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each engine layer's median time per inference of ``samples`` in the SUT's engine."""
    trt = _check(backend, samples, iterations, warmup)
    name = getattr(backend, "name", "") or f"trt-{backend.precision}"
    runs, wall, inspector_json = _run(backend, trt, samples, iterations, warmup)
    layers = to_layers(runs, engine_layers(inspector_json))
    if not layers:
        raise SutError(f"{name}: TensorRT's profiler reported no layer time")
    meta = backend.artifact.meta or {}
    notes = {"tensorrt_version": str(getattr(trt, "__version__", meta.get("tensorrt"))),
             "gpu": str(meta.get("gpu")),
             "row_time": "IProfiler.report_layer_time per engine layer (fused layers are one "
                         "row), median over iterations",
             "end_to_end": "wall time of one inference (copy in, execute_async_v3, copy out, "
                           "stream synchronize) with the profiler attached"}
    log.info("%s: %d engine layers profiled over %d iterations", name, len(layers), iterations)
    return Profile(sut=name, framework="tensorrt", batch_size=len(samples),
                   iterations=iterations, layers=layers, end_to_end_ms=median_ms(wall),
                   method=PROFILER, notes=notes)
