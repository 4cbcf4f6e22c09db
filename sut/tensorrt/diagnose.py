"""Layer-by-layer capture and exclusion for ``run.py diagnose`` on TensorRT (contract:
``sut.layers``).

Capture: TensorRT runs an engine, not a graph, so every layer's output is read from a second,
*diagnostic* engine built from the same ONNX as the SUT's engine, with the same precision
flags, INT8 route, calibration cache and recipe, in which each layer's output tensor is also
marked as a network output (``INetworkDefinition.mark_output``). Layers are chosen on the
ONNX graph as ``models.onnx_layers.graph_layers`` chooses them (a compute node with the
activation that alone follows it; in a QDQ model the value after its Quantize/Dequantize pair,
what the next layer sees) and named by their ONNX node names, which TensorRT's ONNX parser
keeps on its tensors and in each layer's metadata ("[ONNX Layer: /conv/Conv]").

Marking a tensor as an output forces TensorRT to write it to memory, which breaks the fusions
across it (conv + add, Myelin regions): the diagnostic engine's kernels and even its tactic
choices can differ from the SUT engine's. So each layer's precision is read from the SUT's own
engine (its engine inspector, built with ``ProfilingVerbosity.DETAILED``: the data type the
engine layer that holds the ONNX node consumes), and only where that engine names no layer
for the node, from the diagnostic engine's.

Rebuild: the engine built again with the excluded ONNX nodes' network layers set to FP32
(``ILayer.precision``, ``ILayer.set_output_type``) under
``BuilderFlag.OBEY_PRECISION_CONSTRAINTS`` (``sut.tensorrt.build.keep_fp32``), reusing the
calibration cache, so every other layer keeps its scales. TensorRT injects no faults.

Nothing here imports TensorRT or CUDA at module level; the inspector parsing is pure.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe
from quantmark.sut.tensorrt.backend import _layer_precision
from quantmark.sut.tensorrt.build import PLAN_SUFFIX, onnx_nodes

log = logging.getLogger(__name__)

EXCLUSION = "layer.precision = FP32 with OBEY_PRECISION_CONSTRAINTS"
DAMAGE = ""

#: the diagnostic engine's largest batch (the orchestration captures a few samples at a time)
DIAGNOSTIC_BATCH = 8
DIAGNOSTIC_VERSION = 1
#: engine layers that only move data between formats: their nodes' precision only as a last
#: resort (a reformat before a conv is named after the conv)
REFORMAT_MARKERS = ("reformat", "copynode")
#: diagnostic sessions kept loaded (the orchestration alternates the INT8 and the FP32 SUT)
KEEP_SESSIONS = 2
_SESSIONS: dict[str, _DiagnosticSession] = {}


# --------------------------------------------------------------------------- inspector parsing

def engine_layer_nodes(layer: dict[str, Any]) -> list[str]:
    """The ONNX nodes one engine layer computes: its Metadata ("[ONNX Layer: a]\\x1f[ONNX
    Layer: b]"), else the node names in its Name ("a + b", "PWN(a, b)"); a Myelin
    "{ForeignNode[a...b]}" names only its ends, which say nothing of what lies between."""
    nodes = onnx_nodes(layer.get("Metadata"))
    if nodes:
        return nodes
    name = str(layer.get("Name", ""))
    if not name or name.startswith("{ForeignNode[") or "Reformatting" in name:
        return []
    flat = name.replace("PWN(", "").replace(")", "")
    return [token.strip() for token in re.split(r" \+ |, ", flat) if token.strip()]


def node_precisions(inspector_json: str | dict[str, Any]) -> dict[str, str]:
    """{ONNX node: precision} from the engine inspector's JSON (``LayerInformationFormat.JSON``
    of a ``ProfilingVerbosity.DETAILED`` engine): every node an engine layer holds gets the
    precision that layer computes in (the data type it consumes, as the SUT's load-time check
    reads it). A compute layer wins over a reformat naming the same node, the first over later."""
    info = json.loads(inspector_json) if isinstance(inspector_json, str) else inspector_json
    found: dict[str, str] = {}
    fallback: dict[str, str] = {}
    layers = info.get("Layers") if isinstance(info, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict):
            continue
        precision = _layer_precision(layer)
        if precision is None:
            continue
        kind = f"{layer.get('LayerType', '')} {layer.get('Name', '')}".lower()
        target = fallback if any(marker in kind for marker in REFORMAT_MARKERS) else found
        for node in engine_layer_nodes(layer):
            target.setdefault(node, precision)
    return {**fallback, **found}


def layer_precision(node: str, sut: dict[str, str], diagnostic: dict[str, str]) -> str:
    """The node's precision in the SUT's engine, else in the diagnostic engine."""
    return sut.get(node) or diagnostic.get(node) or "unknown"


def capture_layers(onnx_path: str | Path) -> list[Any]:
    """The layers to capture in the ONNX an engine was parsed from (name, op_type, tensor,
    inputs), in graph order: the same choice the ONNX Runtime capture makes."""
    import onnx

    from quantmark.models.onnx_layers import graph_layers

    layers = graph_layers(onnx.load(str(onnx_path), load_external_data=False))
    if not layers:
        raise UserError(f"{onnx_path} has no compute node to diagnose")
    return layers


# --------------------------------------------------------------------------- diagnostic engine

def _mark_outputs(trt: Any, network: Any, tensors: Sequence[str]) -> tuple[list[str], list[str]]:
    """Mark each named float tensor of ``network`` as a network output; (marked, missing):
    missing tensors are ones the parser folded away or made non-float."""
    by_name: dict[str, Any] = {}
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        for out in range(layer.num_outputs):
            tensor = layer.get_output(out)
            by_name.setdefault(tensor.name, tensor)
    marked, missing = [], []
    for name in tensors:
        tensor = by_name.get(name)
        if tensor is None or tensor.dtype not in (trt.float32, trt.float16):
            missing.append(name)
            continue
        if not tensor.is_network_output:
            network.mark_output(tensor)
        marked.append(name)
    return marked, missing


def _calibration_cache(meta: dict[str, Any]) -> Path:
    """The SUT engine's calibration cache: the diagnostic engine must reuse its scales."""
    path = Path(str((meta.get("calibration") or {}).get("cache_file") or ""))
    if not path.name or not path.is_file():
        raise SutError(f"the calibration cache of the engine ({path}) is gone: rebuild the "
                       "trt-int8 engine first, so that the diagnosis reuses its scales")
    return path


def _build_diagnostic(trt: Any, engine: Artifact, tensors: Sequence[str],
                      out: Path) -> dict[str, Any]:
    """Build and write the diagnostic plan to ``out``; what it marked and missed."""
    from quantmark.sut.tensorrt import build as trt_build

    meta = engine.meta or {}
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network, _parser = trt_build._parse(trt, builder, logger, Path(meta["onnx_file"]))
    marked, missing = _mark_outputs(trt, network, tensors)
    tensor = network.get_input(0)
    profile = trt_build.BatchProfile(1, DIAGNOSTIC_BATCH, DIAGNOSTIC_BATCH)
    config, built = trt_build._configure(trt, builder, tensor, engine.precision, profile)
    exclude = (meta.get("layer_recipe") or {}).get("exclude") or ()
    if exclude:
        trt_build.keep_fp32(trt, network, config, exclude)
    calibrator = batcher = cache = None
    if engine.precision == "int8" and meta.get("route") == "calibrator":
        placeholder = np.zeros((1, *meta["sample_shape"]), np.float32)  # the cache is read
        calibrator, batcher, cache = trt_build._attach_calibrator(
            builder, config, tensor, placeholder, _calibration_cache(meta))
    out.write_bytes(trt_build._serialize(builder, network, config, calibrator,
                                         "diagnostic engine"))
    if cache is not None and (not cache.hit or batcher.served):
        raise SutError("TensorRT calibrated the diagnostic engine anew instead of reusing the "
                       "SUT's calibration cache: its scales would differ from the SUT's")
    return {"marked": len(marked), "missing_tensors": missing, "profile": built.to_json()}


def diagnostic_engine(engine: Artifact, tensors: Sequence[str]) -> Artifact:
    """The cached diagnostic engine of the SUT engine ``engine``: the same build with
    ``tensors`` also marked as outputs."""
    import tensorrt as trt

    meta = engine.meta or {}
    if not meta.get("onnx_file") or not Path(meta["onnx_file"]).is_file():
        raise SutError(f"the ONNX the engine {engine.path} was built from "
                       f"({meta.get('onnx_file')}) is gone: rebuild the SUT's engine")
    model = str(meta.get("model", engine.path.stem))
    key = hash_json({"what": "tensorrt-diagnostic-engine", "engine": engine.key,
                     "tensors": list(tensors), "batch": DIAGNOSTIC_BATCH,
                     "version": DIAGNOSTIC_VERSION})

    def build(folder: Path) -> Artifact:
        progress(f"building the diagnostic TensorRT engine of {model} ({len(tensors)} layer "
                 "outputs marked; one-off, then cached) ...")
        out = folder / f"{model}-{engine.precision}-diagnostic{PLAN_SUFFIX}"
        built = _build_diagnostic(trt, engine, tensors, out)
        return Artifact(path=out, format="tensorrt", precision=engine.precision, key=key,
                        weights=engine.weights, source_hash=engine.key,
                        meta={**built, "model": model, "engine_key": engine.key,
                              "input_name": meta.get("input_name")})

    return cached_build(model, key, build)


# --------------------------------------------------------------------------- running it

def _inspect(trt: Any, engine: Any, input_name: str, shape: tuple[int, ...]) -> dict[str, str]:
    """Node precisions of a deserialized engine; the inspector shows tensor formats only
    through an execution context whose input shape is set."""
    context = engine.create_execution_context()
    context.set_input_shape(input_name, shape)
    inspector = engine.create_engine_inspector()
    for attribute in ("execution_context", "context"):  # TensorRT 10 / 8 names
        if hasattr(inspector, attribute):
            setattr(inspector, attribute, context)
            break
    return node_precisions(inspector.get_engine_information(trt.LayerInformationFormat.JSON))


def _deserialize(trt: Any, path: Path) -> Any:
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(
        path.read_bytes())
    if engine is None:
        raise SutError(f"TensorRT could not deserialize {path}")
    return engine


class _DiagnosticSession:
    """The loaded diagnostic engine of one SUT engine, its context and both engines' node
    precisions; device buffers are allocated per run (a capture reads a few samples)."""

    def __init__(self, sut_engine: Artifact, diagnostic: Artifact) -> None:
        import tensorrt as trt

        self.trt = trt
        self.artifact = diagnostic
        self.engine = _deserialize(trt, diagnostic.path)
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.input_name = inputs[0]
        self.outputs = [n for n in names if n not in inputs]
        self.profile = diagnostic.meta["profile"]
        sample = tuple(self.engine.get_tensor_shape(self.input_name))[1:]
        self.diagnostic_precisions = _inspect(trt, self.engine, self.input_name,
                                              (self.profile["opt"], *sample))
        sut_meta = sut_engine.meta or {}
        self.sut_precisions = _inspect(trt, _deserialize(trt, sut_engine.path),
                                       str(sut_meta.get("input_name", self.input_name)),
                                       (int(sut_meta["profile"]["opt"]), *sample))

    def run(self, samples: np.ndarray) -> dict[str, np.ndarray]:
        """Every output for ``samples``, in slices the profile takes (a static batch is
        padded with the last sample and the padding dropped)."""
        if not len(samples):
            raise ValueError("capture needs at least one sample")
        low, high = self.profile["min"], self.profile["max"]
        parts: list[dict[str, np.ndarray]] = []
        for start in range(0, len(samples), high):
            chunk = samples[start:start + high]
            size = len(chunk)
            if size < low:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], low - size, axis=0)])
            parts.append({k: v[:size] for k, v in self._run(chunk).items()})
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def _run(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        from quantmark.sut.tensorrt.cuda_runtime import (
            create_stream,
            cuda_call,
            cuda_runtime,
            native_handle,
        )

        runtime, trt = cuda_runtime(), self.trt
        kinds = runtime.cudaMemcpyKind
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        if not self.context.set_input_shape(self.input_name, batch.shape):
            raise SutError(f"TensorRT refused input shape {batch.shape} (outside the profile?)")
        stream = create_stream(runtime)
        pointers: list[Any] = []
        hosts: dict[str, np.ndarray] = {}
        try:
            for name, host in [(self.input_name, batch)] + [
                    (n, np.empty(tuple(self.context.get_tensor_shape(n)),
                                 trt.nptype(self.engine.get_tensor_dtype(n))))
                    for n in self.outputs]:
                pointers.append(cuda_call(runtime.cudaMalloc(max(host.nbytes, 1))))
                self.context.set_tensor_address(name, pointers[-1])
                hosts[name] = host
            cuda_call(runtime.cudaMemcpy(pointers[0], batch.ctypes.data, batch.nbytes,
                                         kinds.cudaMemcpyHostToDevice))
            if not self.context.execute_async_v3(native_handle(stream)):
                raise SutError("TensorRT execute_async_v3 failed on the diagnostic engine")
            cuda_call(runtime.cudaStreamSynchronize(stream))
            for pointer, name in zip(pointers[1:], self.outputs, strict=True):
                host = hosts[name]
                cuda_call(runtime.cudaMemcpy(host.ctypes.data, pointer, host.nbytes,
                                             kinds.cudaMemcpyDeviceToHost))
        finally:
            for pointer in pointers:
                runtime.cudaFree(pointer)
            runtime.cudaStreamDestroy(stream)
        return {name: hosts[name].astype(np.float32) for name in self.outputs}


def _session(engine: Artifact, tensors: Sequence[str]) -> _DiagnosticSession:
    """The diagnostic session of ``engine``, loaded once per process (the orchestration
    captures chunk after chunk)."""
    key = hash_json({"engine": engine.key, "tensors": list(tensors)})
    if key not in _SESSIONS:
        while len(_SESSIONS) >= KEEP_SESSIONS:
            _SESSIONS.pop(next(iter(_SESSIONS)))
        _SESSIONS[key] = _DiagnosticSession(engine, diagnostic_engine(engine, tensors))
    return _SESSIONS[key]


# --------------------------------------------------------------------------- the contract

def capture(backend: Backend, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` (float32 NCHW batch) in the engine ``backend``
    runs, read from its diagnostic engine (module docstring)."""
    engine: Artifact = backend.artifact
    onnx_file = (engine.meta or {}).get("onnx_file")
    if not onnx_file:
        raise UserError(f"{engine.path}: the engine's manifest names no ONNX to diagnose")
    layers = capture_layers(onnx_file)
    session = _session(engine, [layer.tensor for layer in layers])
    values = session.run(np.asarray(samples, dtype=np.float32))
    kept = [layer for layer in layers if layer.tensor in values]
    names = {layer.name for layer in kept}
    outputs = [LayerOutput(layer.name, layer.op_type,
                           layer_precision(layer.name, session.sut_precisions,
                                           session.diagnostic_precisions),
                           values[layer.tensor],
                           tuple(name for name in layer.inputs if name in names))
               for layer in kept]
    return LayerCapture(
        outputs,
        method="tensorrt: a diagnostic engine built like the SUT's (same ONNX, flags, "
               "calibration cache) with each layer's output marked as a network output",
        precision_source="tensorrt engine inspector (ProfilingVerbosity.DETAILED) of the SUT's "
                         "own engine: the data type the engine layer holding the ONNX node "
                         "consumes; the diagnostic engine's where the SUT's names none",
        notes=_notes(engine, session, layers, kept))


def _notes(engine: Artifact, session: _DiagnosticSession, layers: list[Any],
           kept: list[Any]) -> dict[str, object]:
    sut, diagnostic = session.sut_precisions, session.diagnostic_precisions
    return {
        "engine_file": str(engine.path), "onnx_file": engine.meta.get("onnx_file"),
        "diagnostic_engine": str(session.artifact.path),
        "fusion": "marking a layer's output as a network output breaks the fusions across it, "
                  "so the diagnostic engine's kernels can differ from the SUT engine's; "
                  "layers are named by the ONNX node names TensorRT keeps",
        "layers_not_in_network": [layer.name for layer in layers if layer not in kept],
        "precision_from_diagnostic_engine": [layer.name for layer in kept
                                             if layer.name not in sut and layer.name in
                                             diagnostic],
        "precision_differs_in_diagnostic_engine": {
            layer.name: {"sut": sut[layer.name], "diagnostic": diagnostic[layer.name]}
            for layer in kept if layer.name in sut and layer.name in diagnostic
            and sut[layer.name] != diagnostic[layer.name]},
    }


def rebuild(name: str, options: SutOptions, spec: Any, calibration: Any,
            recipe: Recipe) -> Backend:
    """``name``'s SUT as ``create`` makes it, its engine built with ``recipe``'s ONNX nodes
    kept in FP32; ``Recipe()`` gives the SUT's own engine (same cache key)."""
    from quantmark.models.source import fp32_onnx
    from quantmark.sut.registry import check_options, get_sut
    from quantmark.sut.tensorrt.backend import CONTEXTS, TensorRTBackend, create
    from quantmark.sut.tensorrt.build import BatchProfile, build_engine, check_recipe
    from quantmark.sut.tensorrt.suts import TRT_INT8_ROUTE_OPTION

    if not recipe.key():
        return create(name, options, spec, calibration)
    check_options(get_sut(name), options.extra)
    precision = get_sut(name).precision_key
    route = options.extra.get(TRT_INT8_ROUTE_OPTION, "calibrator") if precision == "int8" \
        else None
    check_recipe(precision, route, recipe)
    source = fp32_onnx(spec, options.model_path)
    if source.precision == "int8":
        check_recipe(precision, "qdq", recipe)  # a user's QDQ model runs as the qdq route
    profile = BatchProfile.for_run(options.scenario, options.batch_size)
    data = calibration.arrays("NCHW") if precision == "int8" else None
    artifact = build_engine(source, precision, profile, route=route, calibration=data,
                            calibration_hash=calibration.hash() if precision == "int8" else None,
                            recipe=recipe)
    log.info("rebuilt %s with %s kept in FP32", name, ", ".join(recipe.exclude))
    return TensorRTBackend(artifact, precision, route, CONTEXTS.get(options.scenario, 1))
