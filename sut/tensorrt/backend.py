"""TensorRT (NVIDIA GPU): ``trt-fp32``, ``trt-fp16``, ``trt-int8``.

Engines are built from the canonical FP32 ONNX by TensorRT's ONNX parser and cached per
(model, precision, batch profile, TensorRT version, GPU) by ``sut.tensorrt.build``. INT8 is
calibrated by TensorRT's entropy calibrator on the shared calibration set (default), or taken
from an explicit-QDQ ONNX (``--sut-option trt_int8_route=qdq``).

Execution: each execution context has its own CUDA stream and its own pinned host and device
buffers, allocated once for the profile's largest batch. ``predict`` checks a free context
out, copies the batch host-to-device, enqueues the engine and copies the logits back, all
asynchronously on that context's stream, and waits for that stream only. With two contexts
(Offline) two worker threads keep two batches in flight, so one batch's copies overlap the
other's compute. The streams are created non-blocking (``cudaStreamCreateWithFlags(
cudaStreamNonBlocking)``), so they never wait for work another SUT in the process (an ensemble
member) queues on the legacy default stream; nothing is shared between two backends but the
device (no module-level stream or buffer).

Proof of what executed comes from TensorRT's engine inspector (the engine is built with
``ProfilingVerbosity.DETAILED``): the data type each compute layer consumes. An INT8 or FP16
SUT whose engine has no layer of that precision fails at load instead of measuring FP32.

Everything that needs no GPU (cache keys, batch profiles, calibration batching and its cache
file, buffer planning, inspector parsing) imports without TensorRT and is tested on CPU.
"""

from __future__ import annotations

import collections
import json
import queue
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.registry import check_options, find_sut, module_sut
from quantmark.sut.tensorrt.build import BatchProfile
from quantmark.sut.tensorrt.suts import TRT_INT8_ROUTE_OPTION

#: what describe() and speed_settings() say about the streams a backend runs on
CUDA_STREAM = "own (one non-blocking cudaStream per execution context)"
#: execution contexts (each with its own stream and buffers) per scenario
CONTEXTS = {"Offline": 2}
MODEL_SUFFIXES = (".onnx", ".pt", ".pth", ".bin")


# --------------------------------------------------------------------------- buffer planning

@dataclass(frozen=True)
class BufferPlan:
    """One I/O tensor's buffers at the profile's largest batch."""

    name: str
    is_input: bool
    dtype: np.dtype
    shape: tuple[int, ...]  # at the largest batch
    nbytes: int

    @property
    def row_nbytes(self) -> int:
        """Bytes of one sample (a batch of n copies n * row_nbytes)."""
        return self.nbytes // self.shape[0]


def plan_buffers(io_tensors: Iterable[tuple[str, str, Any, Sequence[int]]],
                 batch: int) -> list[BufferPlan]:
    """Per-tensor buffer sizes for batch ``batch``, from (name, "input"|"output", dtype, shape)
    with the batch dimension -1. Only the batch dimension may be dynamic."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    plans = []
    for name, mode, dtype, shape in io_tensors:
        if mode not in ("input", "output"):
            raise ValueError(f"{name}: mode must be 'input' or 'output', got {mode!r}")
        dims = list(shape)
        if not dims or any(d < 0 for d in dims[1:]) or dims[0] < -1 or dims[0] == 0:
            raise ValueError(f"{name}: cannot plan a buffer of shape {tuple(shape)} (only the "
                             "batch dimension may be dynamic)")
        dims[0] = batch if dims[0] == -1 else dims[0]
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(dims)) * dtype.itemsize
        plans.append(BufferPlan(name, mode == "input", dtype, tuple(dims), nbytes))
    return plans


# --------------------------------------------------------------------------- layer precisions

COMPUTE_MARKERS = ("conv", "gemm", "matrixmultiply", "matmul", "fullyconnected")
SKIPPED_LAYERS = ("reformat", "noop", "shuffle", "constant")
TYPE_FIELDS = ("Format/Datatype", "DataType", "Datatype", "Format")


def datatype_precision(text: Any) -> str | None:
    """'Row major linear FP32 format', 'Half', 'Int8', ... -> "fp32", "fp16", "int8" (None
    for integer index types and anything unknown)."""
    low = str(text or "").lower()
    for tokens, name in ((("int8",), "int8"), (("fp8", "e4m3", "e5m2"), "fp8"),
                         (("int4",), "int4"), (("bf16", "bfloat"), "bf16"),
                         (("fp16", "half"), "fp16"), (("fp32", "float"), "fp32")):
        if any(token in low for token in tokens):
            return name
    return None


def _tensor_precision(tensors: Any) -> str | None:
    for tensor in tensors if isinstance(tensors, list) else []:
        if isinstance(tensor, dict):
            for field in TYPE_FIELDS:
                found = datatype_precision(tensor.get(field))
                if found:
                    return found
    return None


def _layer_precision(layer: dict[str, Any]) -> str | None:
    """What the layer computes in: the type of the data it consumes, else its own Precision
    field, else what it produces."""
    return (_tensor_precision(layer.get("Inputs")) or datatype_precision(layer.get("Precision"))
            or _tensor_precision(layer.get("Outputs")))


def _is_compute(layer: dict[str, Any]) -> bool:
    kind = f"{layer.get('LayerType', '')} {layer.get('ParameterType', '')}".lower()
    return any(marker in kind for marker in COMPUTE_MARKERS)


def layer_precisions(inspector_json: str | dict[str, Any],
                     requested: str | None = None) -> dict[str, Any]:
    """Executed precision from the engine inspector's JSON.

    Counts compute layers (convolutions, GEMMs, matrix multiplies) per precision; where no
    layer is recognisable as compute (fused Myelin graphs) every typed layer but reformats
    counts. The label is one precision ("int8") or, when mixed, the requested (else the most
    common) precision first: "int8 (40 of 53 layers; rest fp16)". With ``requested`` set the
    result is checked (``check_executed``).
    """
    info = json.loads(inspector_json) if isinstance(inspector_json, str) else inspector_json
    layers = [layer for layer in info.get("Layers", []) if isinstance(layer, dict)]
    typed = [(layer, _layer_precision(layer)) for layer in layers]
    typed = [(layer, p) for layer, p in typed if p is not None]
    compute = [(layer, p) for layer, p in typed if _is_compute(layer)]
    basis = "compute layers"
    if not compute:
        basis = "typed layers"
        compute = [(layer, p) for layer, p in typed
                   if not any(s in str(layer.get("LayerType", "")).lower()
                              for s in SKIPPED_LAYERS)]
    counts = collections.Counter(p for _, p in compute)
    by_type: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for layer, precision in compute:
        by_type[str(layer.get("LayerType", "?"))][precision] += 1
    order = sorted(counts, key=lambda p: (-counts[p], p))
    if requested in counts:
        order.remove(requested)
        order.insert(0, requested)
    total = sum(counts.values())
    if not order:
        label = "unknown"
    elif len(order) == 1:
        label = order[0]
    else:
        main = order[0]
        label = f"{main} ({counts[main]} of {total} layers; rest {'+'.join(order[1:])})"
    summary = {
        "executed_precision": label, "layers_by_precision": dict(sorted(counts.items())),
        "layers_counted": total, "basis": basis, "layers_in_engine": len(layers),
        "layers_by_type": {k: dict(sorted(v.items())) for k, v in sorted(by_type.items())},
        "other_precision_layers": {
            p: [str(layer.get("Name", "?")) for layer, q in compute if q == p][:50]
            for p in order[1:]},
    }
    if requested is not None:
        check_executed(requested, summary)
    return summary


def check_executed(requested: str, summary: dict[str, Any]) -> None:
    """Refuse to measure one precision under another's name; never fall back silently."""
    sut = find_sut("tensorrt", requested, "gpu")
    name = sut.name
    counts = summary["layers_by_precision"]
    if not counts:
        raise SutError(f"{name}: the engine inspector names no layer precision (was the engine "
                       "built with ProfilingVerbosity.DETAILED?); cannot tell what executes")
    if requested == "fp32" and set(counts) - set(sut.proof):
        raise SutError(f"{name}: the engine runs reduced-precision layers {counts}; pass an "
                       "FP32 model (a QDQ model belongs to trt-int8)")
    if not sut.proven(counts):
        raise SutError(f"{name}: no layer of the engine runs {'/'.join(sut.proof)} (layers by "
                       f"precision: {counts}); refusing to measure {'+'.join(counts)} as "
                       f"{'/'.join(sut.proof).upper()}")


# --------------------------------------------------------------------------- the backend

class _Slot:
    """One execution context with its stream and its pinned host / device buffers."""

    def __init__(self, engine: Any, plans: list[BufferPlan], input_name: str,
                 output_name: str, runtime: Any) -> None:
        import ctypes

        from quantmark.sut.tensorrt.cuda_runtime import create_stream, cuda_call, native_handle

        self.runtime = runtime
        self.context = engine.create_execution_context()
        self.stream = create_stream(runtime)  # one context, one stream (TensorRT's rule)
        self.stream_handle = native_handle(self.stream)
        self.input_name, self.output_name = input_name, output_name
        self.plans = {plan.name: plan for plan in plans}
        self.host: dict[str, np.ndarray] = {}
        self.device: dict[str, int] = {}
        self._host_ptrs: list[int] = []
        for plan in plans:
            host_ptr = cuda_call(runtime.cudaMallocHost(plan.nbytes))
            self._host_ptrs.append(host_ptr)
            raw = (ctypes.c_byte * plan.nbytes).from_address(host_ptr)
            self.host[plan.name] = np.frombuffer(raw, dtype=plan.dtype).reshape(plan.shape)
            self.device[plan.name] = cuda_call(runtime.cudaMalloc(plan.nbytes))
            self.context.set_tensor_address(plan.name, self.device[plan.name])
        self.bound_batch = 0

    def bind(self, batch: int) -> None:
        if batch != self.bound_batch:
            shape = (batch, *self.plans[self.input_name].shape[1:])
            if not self.context.set_input_shape(self.input_name, shape):
                raise SutError(f"TensorRT refused input shape {shape} (outside the profile?)")
            self.bound_batch = batch

    def run(self, batch: np.ndarray) -> np.ndarray:
        from quantmark.sut.tensorrt.cuda_runtime import cuda_call

        runtime, n = self.runtime, len(batch)
        self.bind(n)
        host_in = self.host[self.input_name][:n]
        np.copyto(host_in, batch, casting="same_kind")
        kinds = runtime.cudaMemcpyKind
        cuda_call(runtime.cudaMemcpyAsync(self.device[self.input_name], host_in.ctypes.data,
                                          host_in.nbytes, kinds.cudaMemcpyHostToDevice,
                                          self.stream))
        if not self.context.execute_async_v3(self.stream_handle):
            raise SutError("TensorRT execute_async_v3 failed (its log says why)")
        host_out = self.host[self.output_name][:n]
        cuda_call(runtime.cudaMemcpyAsync(host_out.ctypes.data, self.device[self.output_name],
                                          host_out.nbytes, kinds.cudaMemcpyDeviceToHost,
                                          self.stream))
        cuda_call(runtime.cudaStreamSynchronize(self.stream))
        return host_out.astype(np.float32, copy=True)  # the pinned buffer is reused

    def close(self) -> None:
        runtime = self.runtime
        for pointer in self.device.values():
            runtime.cudaFree(pointer)
        for pointer in self._host_ptrs:
            runtime.cudaFreeHost(pointer)
        runtime.cudaStreamDestroy(self.stream)
        self.device.clear()
        self._host_ptrs.clear()
        self.host.clear()
        self.context = None


class TensorRTBackend(Backend):
    """A deserialized engine and a pool of execution contexts, one per in-flight batch."""

    layout = "NCHW"

    def __init__(self, artifact: Any, precision: str, route: str | None, contexts: int) -> None:
        self.artifact = artifact
        self.precision = precision
        self.route = route
        self.contexts = max(1, contexts)
        meta = artifact.meta or {}
        self.label_offset = int(meta.get("label_offset", 0))
        self.profile = BatchProfile(**meta["profile"])
        #: one worker thread per execution context keeps them all busy
        self.preferred_workers = self.contexts
        self._engine: Any = None
        self._slots: list[_Slot] = []
        self._free: queue.Queue[_Slot] = queue.Queue()
        self._executed: dict[str, Any] = {}

    def load(self) -> None:
        import tensorrt as trt

        from quantmark.sut.tensorrt.cuda_runtime import cuda_runtime

        runtime = cuda_runtime()
        logger = trt.Logger(trt.Logger.WARNING)
        self._engine = trt.Runtime(logger).deserialize_cuda_engine(
            self.artifact.path.read_bytes())
        if self._engine is None:
            raise SutError(f"TensorRT could not deserialize {self.artifact.path} (built by "
                           "another TensorRT version or for another GPU?)")
        engine = self._engine
        tensors = []
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            mode = ("input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
                    else "output")
            tensors.append((name, mode, trt.nptype(engine.get_tensor_dtype(name)),
                            tuple(engine.get_tensor_shape(name))))
        plans = plan_buffers(tensors, self.profile.max)
        inputs = [plan.name for plan in plans if plan.is_input]
        outputs = [plan.name for plan in plans if not plan.is_input]
        if len(inputs) != 1 or not outputs:
            raise SutError(f"{self.artifact.path}: expected one input and an output, got "
                           f"inputs {inputs}, outputs {outputs}")
        wanted = (self.artifact.meta or {}).get("output_name")
        output = wanted if wanted in outputs else outputs[0]
        for _ in range(self.contexts):
            slot = _Slot(engine, plans, inputs[0], output, runtime)
            self._slots.append(slot)
            self._free.put(slot)
        # the inspector shows tensor formats only for a context with its input shapes set
        first = self._slots[0]
        first.bind(self.profile.opt)
        inspector = engine.create_engine_inspector()
        for attribute in ("execution_context", "context"):  # TensorRT 10 / 8 names
            if hasattr(inspector, attribute):
                setattr(inspector, attribute, first.context)
                break
        layers = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        self._executed = layer_precisions(layers, requested=self.precision)
        self._executed["io_tensors"] = [
            {"name": plan.name, "input": plan.is_input, "dtype": plan.dtype.name,
             "max_shape": list(plan.shape), "bytes": plan.nbytes} for plan in plans]

    def predict(self, batch: np.ndarray) -> np.ndarray:
        limit = self.profile.max
        if len(batch) <= limit:
            return self._run(batch)
        return np.concatenate([self._run(batch[i:i + limit])
                               for i in range(0, len(batch), limit)])

    def _run(self, batch: np.ndarray) -> np.ndarray:
        slot = self._free.get()  # blocks while every context is busy
        try:
            return slot.run(batch)
        finally:
            self._free.put(slot)

    def describe(self) -> dict[str, Any]:
        meta = self.artifact.meta or {}
        return {
            "framework": "tensorrt",
            "framework_version": meta.get("tensorrt"),
            "device": "gpu",
            "gpu": meta.get("gpu"),
            "compute_capability": meta.get("compute_capability"),
            "requested_precision": self.precision,
            "int8_route": self.route,
            "calibration": meta.get("calibration"),
            "profile": meta.get("profile"),
            "execution_contexts": self.contexts,
            "cuda_stream": CUDA_STREAM,
            "engine_file": str(self.artifact.path),
            "engine_cached": bool(meta.get("cached")),
            "evidence": "TensorRT engine inspector (ProfilingVerbosity.DETAILED): the data type "
                        "each compute layer consumes",
            **self._executed,
        }

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        """Contexts in flight and their streams: a shared or blocking stream would serialise
        co-located SUTs."""
        return {**super().speed_settings(scenario, batch_size),
                "api": "execute_async_v3 per execution context",
                "execution_contexts": self.contexts, "cuda_stream": CUDA_STREAM}

    def close(self) -> None:
        for slot in self._slots:
            slot.close()
        self._slots.clear()
        self._free = queue.Queue()
        self._engine = None


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> TensorRTBackend:
    """Export / quantize the ONNX and build (or reuse) the engine, then the backend.

    ``calibration`` is only touched by ``trt-int8``: a provider with ``arrays(layout)`` and
    ``hash()``. ``options.extra["trt_int8_route"]``: "calibrator" (default) or "qdq".
    """
    from quantmark.models.qdq import qdq_onnx_for_tensorrt
    from quantmark.models.source import fp32_onnx
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.tensorrt.build import build_engine, int8_calibration

    sut = module_sut(name, __name__)
    precision = sut.precision_key
    check_options(sut, options.extra)
    route = options.extra.get(TRT_INT8_ROUTE_OPTION, "calibrator")
    path = options.model_path
    if path and not str(path).endswith(MODEL_SUFFIXES):
        raise UserError(f"--model-path {path}: the TensorRT SUTs take an .onnx file or a torch "
                        f"state_dict (.pt/.pth/.bin) of model {options.model}")
    source = fp32_onnx(spec, path)
    if source.precision == "int8":  # the user's own QDQ model: explicit quantization as it is
        if precision != "int8":
            raise UserError(f"--model-path {path} is already quantized: run it with trt-int8, "
                            f"or give {name} an FP32 model")
        route = "qdq"
    profile = BatchProfile.for_run(options.scenario, options.batch_size)
    data = calibration_hash = None
    layout = source.meta.get("layout", "NCHW")
    if precision == "int8" and source.precision != "int8":
        calibration_hash, data = calibration.hash(), int8_calibration(name, spec, calibration,
                                                                      layout)
        if route == "qdq":
            source = qdq_onnx_for_tensorrt(source, data, calibration_hash)
    artifact = build_engine(source, precision, profile,
                            route=route if precision == "int8" else None,
                            calibration=data, calibration_hash=calibration_hash,
                            sample_shape=recipe_for(spec, layout).input_shape())
    return TensorRTBackend(artifact, precision, route if precision == "int8" else None,
                           CONTEXTS.get(options.scenario, 1))
