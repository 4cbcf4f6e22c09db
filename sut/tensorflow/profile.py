"""Per-node time of a TensorFlow SUT's model (``run.py profile``; contract: ``sut.profiling``).

TensorFlow 2 gives per-node times in Python through the graph runtime's step stats: a
``tf.compat.v1.Session`` run with ``RunOptions(trace_level=FULL_TRACE)`` fills
``RunMetadata.step_stats`` with every executed node (its name, start and the end of its op
relative to that start). So the SUT's own serving function (the ``tf.function`` over the
SavedModel's ``serving_default`` that ``predict`` calls) is frozen into one graph (its variables
become constants, its function calls are inlined: ``convert_variables_to_constants_v2``) and that
graph runs in a Session configured as the SUT runs: the same intra/inter-op thread counts, and
for ``tf-amp`` grappler's mixed precision rewrite (bf16 through oneDNN on the CPU). Grappler
rewrites the Session's graph as it rewrites the function's (layout, fusions, oneDNN kernels,
the mixed precision casts), so the executed partition graph, requested with the trace, names the
kernel each node ran (``_MklNativeConv2D``, ``_FusedConv2D`` ...) and its dtype.

``tf-xla`` cannot be profiled this way: ``jit_compile=True`` hands the whole function to XLA,
whose compiled executable is one node to the graph runtime; there is no per-layer time to read,
so it is a one-line SutError and the report lists it as unsupported. A TensorFlow on a GPU is one
too: the host-side step stats time kernel launches, not the kernels.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.profiling import LayerTime, Profile, median_ms

__all__ = ["PROFILER", "category", "executed_op", "precision", "profile", "rows",
           "short_name"]

log = logging.getLogger(__name__)

PROFILER = ("tensorflow step stats: the frozen serving function in tf.compat.v1.Session with "
            "RunOptions(trace_level=FULL_TRACE), RunMetadata.step_stats node times")
#: what grappler, oneDNN or the ONNX conversion put into the graph that the source model lacks
OVERHEAD_OPS = frozenset({
    "Transpose", "ConjugateTranspose", "Cast", "QuantizeV2", "Dequantize",
    "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV4", "Requantize", "MklToTf", "ToTf",
    "DataFormatVecPermute",
})
#: the graph's plumbing (arguments, results, constants, control, views, device copies)
OTHER_OPS = frozenset({
    "_Arg", "_Retval", "Const", "NoOp", "Identity", "IdentityN", "Placeholder", "_SOURCE",
    "_SINK", "Reshape", "Squeeze", "ExpandDims", "Shape", "_Send", "_Recv", "_HostSend",
    "_HostRecv", "StopGradient",
})
#: oneDNN's kernel prefixes, stripped to name the op the source graph has
_ONEDNN_PREFIXES = ("_MklNative", "_Mkl", "_")
_DTYPE_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64",
                    "qint8": "int8", "quint8": "int8", "int8": "int8", "uint8": "int8"}
_DTYPE_ATTRS = ("T", "Ta", "DstT", "dtype")
_CALL_SCOPES = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


def executed_op(kernel: str) -> str:
    """``_MklNativeConv2D`` -> ``Conv2D``, ``_FusedConv2D`` -> ``FusedConv2D``: the op a
    oneDNN or grappler-fused kernel stands for (``_Arg``, ``_Retval`` stay as they are)."""
    if kernel in OTHER_OPS:
        return kernel
    for prefix in _ONEDNN_PREFIXES:
        if kernel.startswith(prefix) and len(kernel) > len(prefix):
            return kernel[len(prefix):]
    return kernel


def category(kernel: str) -> str:
    """``overhead`` for layout transposes, casts and (de)quantization, ``other`` for the
    graph's plumbing, ``compute`` for every other op."""
    op = executed_op(kernel)
    if kernel in OTHER_OPS or op in OTHER_OPS:
        return "other"
    return "overhead" if op in OVERHEAD_OPS else "compute"


def precision(node: Any) -> str:
    """The dtype a NodeDef computes in (its ``T`` attr, ``DstT`` for a Cast), short form."""
    from tensorflow.python.framework import dtypes

    if node is None:
        return ""
    for attr in _DTYPE_ATTRS:
        if attr in node.attr and node.attr[attr].type:
            name = dtypes.as_dtype(node.attr[attr].type).name
            return _DTYPE_PRECISION.get(name, name)
    return ""


@dataclass
class _Row:
    """One executed node and its time in each traced run."""

    name: str
    kernel: str
    times_s: list[float] = field(default_factory=list)
    calls: int = 1


def _check(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> None:
    """One line for what cannot be profiled here."""
    from quantmark.sut.tensorflow.saved_model_backend import TensorFlowBackend

    name = getattr(backend, "name", type(backend).__name__)
    if not isinstance(backend, TensorFlowBackend):
        raise UserError(f"{name}: TensorFlow layer profiling takes a TensorFlow SUT's backend")
    if iterations < 1 or warmup < 0:
        raise UserError(f"profile needs iterations >= 1 and warmup >= 0, got {iterations} "
                        f"and {warmup}")
    if len(samples) == 0:
        raise UserError("profile needs at least one sample")
    if backend._fn is None:
        raise SutError(f"{name}: not loaded (load() it before profiling)")
    if backend.jit:
        raise SutError(f"{name}: XLA compiles the whole function into one executable; "
                       "TensorFlow's step stats see a single XLA launch, no per-layer times")
    if backend._device != "CPU":
        raise SutError(f"{name}: TensorFlow layer profiling runs on the CPU only; on a GPU the "
                       "step stats time kernel launches, not kernels")


def _frozen(backend: Any) -> tuple[Any, str, str]:
    """(GraphDef of the serving function with constants for variables, input, output)."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    try:
        frozen = convert_variables_to_constants_v2(backend._fn.get_concrete_function())
    except (ValueError, TypeError) as exc:
        raise SutError(f"{backend.name}: cannot freeze the serving function into one graph: "
                       f"{exc}") from exc
    return frozen.graph.as_graph_def(), frozen.inputs[0].name, frozen.outputs[0].name


def _session_config(backend: Any) -> Any:
    """The SUT's thread counts and grappler's mixed precision rewrite (on for ``tf-amp``)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    config = tf.compat.v1.ConfigProto()
    config.intra_op_parallelism_threads = tf.config.threading.get_intra_op_parallelism_threads()
    config.inter_op_parallelism_threads = tf.config.threading.get_inter_op_parallelism_threads()
    rewrite = config.graph_options.rewrite_options
    on, off = rewriter_config_pb2.RewriterConfig.ON, rewriter_config_pb2.RewriterConfig.OFF
    rewrite.auto_mixed_precision = off
    rewrite.auto_mixed_precision_onednn_bfloat16 = on if backend.precision == "mixed" else off
    return config


def _trace(backend: Any, samples: np.ndarray, iterations: int,
           warmup: int) -> tuple[list[Any], list[float], dict[str, Any]]:
    """(step stats of each traced run, its wall time, {node name: executed NodeDef}); the
    executed partition graph is asked for once, with the first traced run."""
    import tensorflow as tf

    graph_def, input_name, output_name = _frozen(backend)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    feed = {input_name: np.ascontiguousarray(samples, dtype=backend.input_dtype)}
    full = tf.compat.v1.RunOptions.FULL_TRACE
    stats, wall, nodes = [], [], {}
    with tf.compat.v1.Session(graph=graph, config=_session_config(backend)) as session:
        for _ in range(warmup):
            session.run(output_name, feed)
        for _ in range(iterations):
            metadata = tf.compat.v1.RunMetadata()
            options = tf.compat.v1.RunOptions(trace_level=full,
                                              output_partition_graphs=not nodes)
            started = time.perf_counter()
            session.run(output_name, feed, options=options, run_metadata=metadata)
            wall.append(time.perf_counter() - started)
            stats.append(metadata.step_stats)
            if not nodes:
                nodes = {node.name: node for part in metadata.partition_graphs
                         for node in part.node}
    return stats, wall, nodes


def _kernel(stat: Any, nodes: dict[str, Any]) -> str:
    """The op that ran: the partition graph's, else the timeline label's ``name = Op(...)``."""
    node = nodes.get(stat.node_name)
    if node is not None:
        return str(node.op)
    label = stat.timeline_label.partition(" = ")[2]
    return label.partition("(")[0] or stat.node_name


def rows(step_stats: list[Any], nodes: dict[str, Any]) -> list[_Row]:
    """Every node's time in each run (several executions in one run summed), in the first
    run's start order; a node's time is the end of its op relative to its start."""
    found: dict[str, _Row] = {}
    for stats in step_stats:
        spent: dict[str, float] = collections.defaultdict(float)
        calls: collections.Counter[str] = collections.Counter()
        node_stats = sorted((stat for device in stats.dev_stats for stat in device.node_stats),
                            key=lambda stat: stat.all_start_micros)
        for stat in node_stats:
            if stat.node_name in ("_SOURCE", "_SINK"):
                continue
            if stat.node_name not in found:
                found[stat.node_name] = _Row(stat.node_name, _kernel(stat, nodes))
            spent[stat.node_name] += stat.op_end_rel_micros / 1e6
            calls[stat.node_name] += 1
        for name, seconds in spent.items():
            found[name].times_s.append(seconds)
            found[name].calls = calls[name]
    return list(found.values())


def short_name(node_name: str) -> str:
    """The node's name without the inlined function-call scopes freezing adds
    (``StatefulPartitionedCall/PartitionedCall/model/conv/Conv2D`` -> ``model/conv/Conv2D``)."""
    parts = node_name.split("/")
    while len(parts) > 1 and parts[0] in _CALL_SCOPES:
        parts.pop(0)
    return "/".join(parts)


def _layer(row: _Row, nodes: dict[str, Any]) -> LayerTime:
    kind = category(row.kernel)
    return LayerTime(short_name(row.name), executed_op(row.kernel), row.kernel,
                     precision(nodes.get(row.name)) if kind != "other" else "", kind,
                     median_ms(row.times_s), row.calls)


def profile(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each executed node's median time per inference of ``samples`` in the SUT's model."""
    import tensorflow as tf

    _check(backend, samples, iterations, warmup)
    stats, wall, nodes = _trace(backend, samples, iterations, warmup)
    layers = [_layer(row, nodes) for row in rows(stats, nodes)]
    layers = [layer for layer in layers if layer.median_ms > 0]
    if not any(layer.category == "compute" for layer in layers):
        raise SutError(f"{backend.name}: TensorFlow's step stats named no compute node")
    notes = {
        "tensorflow_version": tf.__version__,
        "graph": "the serving function frozen (variables as constants, calls inlined) and run "
                 "in a Session with the SUT's thread counts and grappler options",
        "row_time": "op_end_rel_micros of each executed node (its op's time on its thread), "
                    "median over iterations; inter-op parallel nodes may overlap",
        "end_to_end": "wall time of one traced Session.run (feed and fetch included)",
    }
    log.info("%s: %d nodes profiled over %d iterations", backend.name, len(layers), iterations)
    return Profile(sut=backend.name, framework="tensorflow", batch_size=len(samples),
                   iterations=iterations, layers=layers, end_to_end_ms=median_ms(wall),
                   method=PROFILER, notes=notes)
