"""Per-layer time of an ONNX Runtime SUT's model, from ORT's own profiler (``run.py profile``;
contract: ``sut.profiling``).

The SUT's own model file is opened in a second session built as the backend builds its own
(providers, intra-op threads and spinning, graph optimization level, disabled optimizers),
with ``SessionOptions.enable_profiling``. The profiler is on from the session's creation, so
warm-up runs are profiled too: its Chrome-trace file is split into runs at the ``model_run``
events, the first ``warmup`` runs are dropped, and every node's ``*_kernel_time`` events of a
run are summed. A node's time is its median over the measured runs; the whole inference is the
median ``model_run`` duration, read from the same trace.

A text model is fed its token inputs by name, as its backend's ``predict`` feeds them
(``diagnose.feeds``); ``executed_graph`` hands the optimized graph ORT runs (fused nodes,
integer kernels, named as the profiler names them), from which ``run.py profile`` reads each
node's role in a transformer.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import Backend
from quantmark.sut.profiling import LayerTime, Profile, median_ms

__all__ = ["PROFILER", "TEXT_MODELS", "category", "executed_graph", "precision", "profile",
           "split_runs"]

log = logging.getLogger(__name__)

PROFILER = "onnxruntime profiler: SessionOptions.enable_profiling, node kernel times per run"
#: profiles a text model's SUT (its token feeds: ``diagnose.feeds``)
TEXT_MODELS = True

#: what ORT or the quantizer put into the graph that the source model lacks
OVERHEAD_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Cast", "Transpose",
    "ReorderInput", "ReorderOutput", "Reorder",
})
#: copies between devices, named by the profiler: not a layer, not a conversion
OTHER_OPS = frozenset({"MemcpyToHost", "MemcpyFromHost"})
_KERNEL = "_kernel_time"


def category(op: str) -> str:
    """``overhead`` for quantize/dequantize, casts, transposes and layout reorders; ``other``
    for device copies; ``compute`` for every op of the source graph."""
    if op in OVERHEAD_OPS or op.startswith("Reorder"):
        return "overhead"
    return "other" if op in OTHER_OPS else "compute"


def precision(op: str, args: dict[str, Any]) -> str:
    """The precision the kernel computed in: an integer kernel is int8 (its op says so), else
    the first input's element type (float -> fp32 ...); "" where the event names none."""
    from quantmark.sut.onnxruntime.kernels import INTEGER_KERNELS, TYPE_PRECISION

    if op in INTEGER_KERNELS:
        return "int8"
    shapes = args.get("input_type_shape") or []
    if not shapes or not isinstance(shapes[0], dict) or not shapes[0]:
        return ""
    kind = next(iter(shapes[0]))
    if kind in ("int8", "uint8"):
        return "int8"
    return TYPE_PRECISION.get(kind, kind)


def split_runs(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                       list[list[dict[str, Any]]]]:
    """The ``model_run`` events in time order and, for each, the node kernel events that
    started inside it (a kernel outside every run is dropped)."""
    runs = sorted((e for e in events if e.get("name") == "model_run" and "dur" in e),
                  key=lambda e: e["ts"])
    starts = [run["ts"] for run in runs]
    kernels: list[list[dict[str, Any]]] = [[] for _ in runs]
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith(_KERNEL):
            continue
        i = bisect.bisect_right(starts, event["ts"]) - 1
        if i >= 0 and event["ts"] <= runs[i]["ts"] + runs[i]["dur"]:
            kernels[i].append(event)
    return runs, kernels


def _layers(kernels: list[list[dict[str, Any]]]) -> list[LayerTime]:
    """One row per node, in the order of the first measured run; each node's per-run sum."""
    order: dict[str, dict[str, Any]] = {}
    per_run: list[dict[str, list[float]]] = []
    for run in kernels:
        times: dict[str, list[float]] = defaultdict(list)
        for event in run:
            node = event["name"][:-len(_KERNEL)]
            order.setdefault(node, event.get("args", {}))
            times[node].append(float(event["dur"]) / 1e6)
        per_run.append(times)
    rows = []
    for node, args in order.items():
        seen = [times[node] for times in per_run if node in times]
        op = str(args.get("op_name", ""))
        rows.append(LayerTime(
            name=node, op_type=op, kernel=str(args.get("provider", "")),
            precision=precision(op, args), category=category(op),
            median_ms=median_ms([sum(t) for t in seen]),
            calls=int(statistics.median(len(t) for t in seen))))
    return rows


def _options(backend: Backend) -> Any:
    """Session options as the backend builds its own session."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = getattr(backend, "_optimization_level", None)
    options.graph_optimization_level = (level(ort) if callable(level)
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not getattr(backend, "spin", True):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if getattr(backend, "threads", 0):
        options.intra_op_num_threads = backend.threads
    return options


def _open(backend: Backend, options: Any) -> Any:
    import onnxruntime as ort

    from quantmark.sut.onnxruntime.backend import session_extras
    from quantmark.sut.onnxruntime.diagnose import providers

    path = str(backend.artifact.path)
    try:
        return ort.InferenceSession(path, sess_options=options, providers=providers(backend),
                                    **session_extras(backend.artifact))
    except Exception as exc:  # ORT raises its own exception types
        raise SutError(f"onnxruntime could not open {path} for profiling: {exc}") from exc


def _session(backend: Backend, prefix: str) -> Any:
    """A profiling session on the SUT's own model file, with the backend's own settings."""
    options = _options(backend)
    options.enable_profiling = True
    options.profile_file_prefix = prefix
    return _open(backend, options)


def executed_graph(backend: Backend) -> Any:
    """The ONNX graph ONNX Runtime runs for the SUT (the optimized model a session built as
    the profiling one saves: fused nodes, integer kernels), whose node names its profiler
    reports: what a node's role is read from (``diagnosis.layer_roles``)."""
    import onnx

    with tempfile.TemporaryDirectory(prefix="quantmark-ort-graph-") as tmp:
        options = _options(backend)
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        _open(backend, options)
        return onnx.load(options.optimized_model_filepath, load_external_data=False).graph


def _trace(backend: Backend, samples: np.ndarray, runs: int) -> list[dict[str, Any]]:
    """The profiler's events of ``runs`` inferences of ``samples``; the trace file is read and
    deleted with its temporary folder."""
    from quantmark.sut.onnxruntime.diagnose import feeds

    with tempfile.TemporaryDirectory(prefix="quantmark-ort-profile-") as tmp:
        session = _session(backend, os.path.join(tmp, "profile"))
        feed = feeds(backend, session, samples)
        try:
            for _ in range(runs):
                session.run(None, feed)
        except Exception as exc:  # ORT raises its own exception types
            raise SutError(f"onnxruntime could not run {backend.artifact.path} on a batch of "
                           f"shape {tuple(samples.shape)}: {exc}") from exc
        finally:
            trace = Path(session.end_profiling())
        return json.loads(trace.read_text())


def profile(backend: Backend, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each node's kernel time per inference of ``samples`` in the model ``backend`` runs."""
    from quantmark.sut.onnxruntime.diagnose import providers

    if iterations < 1 or warmup < 0:
        raise UserError(f"profile: iterations must be >= 1 and warm-up >= 0 (got {iterations} "
                        f"and {warmup})")
    events = _trace(backend, np.asarray(samples), warmup + iterations)
    runs, kernels = split_runs(events)
    if len(runs) != warmup + iterations:
        raise SutError(f"onnxruntime's profile holds {len(runs)} model_run events for "
                       f"{warmup + iterations} runs")
    runs, kernels = runs[warmup:], kernels[warmup:]
    layers = _layers(kernels)
    if not layers:
        raise SutError(f"onnxruntime's profile of {backend.artifact.path} holds no node kernel "
                       "time")
    sut = getattr(getattr(backend, "sut", None), "name", "")
    notes = {"model_file": str(backend.artifact.path),
             "providers": ",".join(str(p if isinstance(p, str) else p[0])
                                   for p in providers(backend)),
             "end_to_end": "median duration of the profiler's model_run events (one "
                           "session.run each, profiler on)"}
    return Profile(sut=sut, framework="onnxruntime", batch_size=len(samples),
                   iterations=iterations, layers=layers,
                   end_to_end_ms=median_ms([float(run["dur"]) / 1e6 for run in runs]),
                   method=PROFILER, notes=notes)
