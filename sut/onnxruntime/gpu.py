"""ONNX Runtime on an NVIDIA GPU: ``ort-cuda-fp32``, ``ort-cuda-fp16`` (CUDA execution provider),
``ort-trt-fp16`` and ``ort-trt-int8`` (TensorRT execution provider).

No silent CPU fallback. ONNX Runtime quietly drops a provider it cannot load (missing or
mismatched CUDA, cuDNN or TensorRT libraries are one log line, then the session runs on the CPU)
and hands every node a GPU provider does not take to ``CPUExecutionProvider``. So at load:

* ``session.get_providers()`` must hold the requested provider, else SutError naming it;
* one profiled run says which provider ran each node (the profiler's node events carry
  ``args.provider``). A compute node (the Conv / Gemm / MatMul family) on the CPU provider is a
  SutError; other CPU nodes (shape arithmetic ONNX Runtime keeps on the host on purpose) and the
  host/device copies it inserts are counted and reported by ``describe()``;
* the CUDA SUTs prove their precision from the kernels' input types as the CPU SUTs do, and
  ``ort-cuda-fp16`` without an FP16 compute kernel fails (the CUDA provider has them);
* inside the TensorRT provider a whole subgraph is one fused node (``TRTKernel_...``), so the
  precision TensorRT picked per layer is not in ONNX Runtime's profile: the SUT reports the
  precision flags the engine was built with, and the nodes left outside TensorRT (on the CUDA
  provider) with their own precision. ``trt-*`` (TensorRT's own API) reports per-layer precision.

Choices, all reported by ``describe()``:

* FP32 means FP32: the CUDA provider's TF32 convolutions/matmuls are off (``use_tf32=0``).
* ``ort-cuda-fp16`` runs the same FP16 model as ``ort-fp16`` (FP32 inputs and outputs, FP16
  inside); ``ort-trt-fp16`` gives TensorRT the FP32 model with ``trt_fp16_enable``.
* ``ort-trt-int8``, ``--sut-option trt_int8_route=``: ``calibrator`` (default): ONNX Runtime's
  MinMax calibrator (symmetric) writes the calibration table the TensorRT provider reads
  (``trt_int8_calibration_table_name``): implicit quantization; ``qdq``: the symmetric QDQ model
  ``trt-int8`` also uses: explicit quantization. Both also allow FP16 for the layers TensorRT
  keeps out of INT8, as MLPerf submissions do.
* TensorRT sessions get ONNX Runtime's graph optimizations off: TensorRT fuses by itself, and the
  calibration table's tensor names must be the model's own. The engine is built for a batch
  range 1..batch size (one optimisation profile), so dynamically sized Server batches never
  rebuild it, and cached on disk (``trt_engine_cache_path``) per model, table and profile.
* cuDNN's exhaustive convolution search runs once per input shape: the load warms up batch 1
  and the run's batch size; Server (batches of any size) uses the heuristic search instead so
  no search lands inside the measurement.

Streams: left to ONNX Runtime, which gives every session non-blocking CUDA streams of its own
(multi-stream execution since 1.14, PR #13495; ``cuda_stream_handle.cc``, PR #13404), so two
sessions (ensemble members) called from two threads never share one. Only the provider options
``user_compute_stream``, ``use_ep_level_unified_stream`` or ``enable_cuda_graph`` change that;
these SUTs set none, and ``cuda_stream_policy`` reads it back for ``describe()``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.onnxruntime.backend import (
    OnnxRuntimeBackend,
    check_fixed_batch,
    node_kernel_events,
)
from quantmark.sut.onnxruntime.providers import (
    CPU_EP,
    cuda_stream_policy,
    gpu_sut,
    provider_options,
    requested_provider,
)
from quantmark.sut.onnxruntime.suts import CUDA_EP, TRT_EP, TRT_INT8_ROUTE_OPTION
from quantmark.sut.registry import check_options

log = logging.getLogger(__name__)

#: the setup.py extra that installs each provider
EXTRAS = {CUDA_EP: "ort-gpu", TRT_EP: "ort-trt"}
#: the compute ops a GPU SUT must never run on the CPU: Conv, ConvInteger, QLinearConv,
#: FusedConv, NhwcConv, ConvTranspose, Gemm, QGemm, MatMul, MatMulInteger, FusedMatMul,
#: Einsum, Attention and the like
COMPUTE_OP = re.compile(r"Conv|Gemm|MatMul|Einsum|Attention")
MEMCPY_OPS = ("MemcpyFromHost", "MemcpyToHost")


# --------------------------------------------------------------------------- node placement

def node_placement(profile: str | Path | list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """``{provider: {op: count}}`` over the nodes of one profiled run; a node event without a
    provider counts under "unknown"."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for event in node_kernel_events(profile):
        args = event.get("args", {})
        counts[args.get("provider") or "unknown"][args.get("op_name") or "?"] += 1
    return {provider: dict(sorted(ops.items())) for provider, ops in sorted(counts.items())}


def is_compute(op: str) -> bool:
    """A Conv / Gemm / MatMul family node (not a TensorRT engine node)."""
    return bool(COMPUTE_OP.search(op)) and not op.startswith("TRTKernel")


def cpu_compute_nodes(placement: dict[str, dict[str, int]]) -> dict[str, int]:
    """The compute nodes the CPU provider ran: ``{op: count}``."""
    return {op: n for op, n in placement.get(CPU_EP, {}).items() if is_compute(op)}


def placement_summary(placement: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What ``describe()`` reports: node totals per provider, the CPU nodes, the copies, the
    TensorRT engine nodes and the compute nodes left outside TensorRT."""
    trt = placement.get(TRT_EP, {})
    return {
        "nodes_by_provider": {p: sum(ops.values()) for p, ops in placement.items()},
        "cpu_nodes": placement.get(CPU_EP, {}),
        "memcpy_nodes": {op: n for ops in placement.values() for op, n in ops.items()
                         if op in MEMCPY_OPS},
        "tensorrt_engine_nodes": sum(n for op, n in trt.items() if op.startswith("TRTKernel")),
        "compute_outside_tensorrt": {op: n for provider, ops in placement.items()
                                     if provider != TRT_EP for op, n in ops.items()
                                     if is_compute(op)} if trt else {},
        "nodes": placement,
    }


def check_placement(name: str, provider: str, session_providers: list[str],
                    placement: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Refuse a run that is not (only) on the GPU; return the placement summary.

    * the session must hold ``provider`` (ONNX Runtime drops one it cannot load);
    * at least one node must have run on it;
    * no compute node may have run on ``CPUExecutionProvider``.
    """
    if provider not in session_providers:
        libraries = "CUDA/cuDNN/TensorRT" if provider == TRT_EP else "CUDA/cuDNN"
        raise SutError(f"{name}: onnxruntime did not enable {provider} (session providers: "
                       f"{', '.join(session_providers) or 'none'}); the {libraries} libraries "
                       "it needs are missing or do not match this onnxruntime-gpu (its log "
                       "above says which); refusing to measure a CPU run as a GPU SUT")
    summary = placement_summary(placement)
    if not placement.get(provider):
        raise SutError(f"{name}: no node ran on {provider} (nodes by provider: "
                       f"{summary['nodes_by_provider'] or 'none'}); refusing to measure it")
    fallback = cpu_compute_nodes(placement)
    if fallback:
        listed = ", ".join(f"{op} x{n}" for op, n in fallback.items())
        raise SutError(f"{name}: {sum(fallback.values())} compute node(s) ran on {CPU_EP} "
                       f"({listed}): {provider} did not take them; refusing to measure a GPU "
                       "SUT with a silent CPU fallback")
    return summary


def tensorrt_precision(flags: str, outside: dict[str, int]) -> str:
    """The executed precision of a TensorRT-provider run: the engine's build flags, plus the
    precision of compute nodes left to the CUDA provider (from their input types)."""
    executed = f"{flags} (TensorRT)"
    if outside:
        executed += "+" + "+".join(f"{p} (CUDA EP)" for p in sorted(outside))
    return executed


# --------------------------------------------------------------------------- artifacts

def model_input(path: str | Path) -> tuple[str, tuple[int, ...], int | None]:
    """(input name, one sample's shape, the fixed batch size or None) of an ONNX model."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    first = next(i for i in graph.input if i.name not in initializers)
    dims = [d.dim_value if d.HasField("dim_value") else None
            for d in first.type.tensor_type.shape.dim]
    if len(dims) < 2 or any(d is None for d in dims[1:]):
        raise UserError(f"{path}: input {first.name} has shape {dims}; the GPU ONNX Runtime SUTs "
                        "need a fixed sample shape (only the batch dimension may be dynamic)")
    return first.name, tuple(int(d) for d in dims[1:]), dims[0] or None


def engine_cache_dir(name: str, artifact: Any, table: Any, batch_range: tuple[int, int]) -> Path:
    """Where the TensorRT provider keeps this SUT's engines: one folder per model, calibration
    table and batch range (ONNX Runtime's own engine names do not cover the table)."""
    from quantmark.ground.fingerprint import dist_version
    from quantmark.ground.hashing import hash_json
    from quantmark.ground.paths import cache_dir

    key = hash_json({"sut": name, "model": artifact.key, "table": getattr(table, "key", None),
                     "batch_range": list(batch_range),
                     "onnxruntime": dist_version("onnxruntime-gpu")})
    folder = cache_dir("ort-trt-engines") / key[:20]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# --------------------------------------------------------------------------- backend

def _preload_gpu_libraries(ort: Any, tensorrt: bool) -> None:
    """Help ONNX Runtime find pip-installed GPU libraries: importing the tensorrt wheel loads
    libnvinfer for the TensorRT provider; ``preload_dlls`` (onnxruntime >= 1.21) loads CUDA and
    cuDNN from the nvidia-* wheels. Neither is fatal: the provider check says what is missing."""
    if tensorrt:
        with contextlib.suppress(ImportError):
            import tensorrt as _tensorrt  # noqa: F401
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(Exception):
            preload()


def require_provider(name: str) -> None:
    """One-line SutError when the installed onnxruntime has no provider for ``name``: before
    any artifact is built."""
    import onnxruntime as ort

    provider = requested_provider(name)
    available = ort.get_available_providers()
    if provider not in available:
        raise SutError(f"{name}: onnxruntime {ort.__version__} here has no {provider} "
                       f"(available: {', '.join(available)}): pip uninstall -y onnxruntime && "
                       f"pip install 'quantmark[{EXTRAS[provider]}]'")


class OnnxRuntimeGpuBackend(OnnxRuntimeBackend):
    """One ORT session on the CUDA or TensorRT execution provider, checked for CPU fallback."""

    def __init__(self, name: str, artifact: Any, *, scenario: str, batch_size: int,
                 threads: int, table: Any = None, route: str | None = None) -> None:
        sut = gpu_sut(name)
        provider = requested_provider(name)
        super().__init__(str(artifact.path), sut.precision_key, threads, artifact,
                         spin=scenario != "Server", sut=sut)
        self.name = name
        self.provider = provider
        self.scenario = scenario
        self.table = table
        self.route = route
        self.input_name, self.sample_shape, fixed = model_input(artifact.path)
        self.max_batch = fixed or max(1, batch_size)
        self.batch_range = (fixed or 1, self.max_batch)
        self.cache_dir = (engine_cache_dir(name, artifact, table, self.batch_range)
                          if provider == TRT_EP else None)
        self._placement: dict[str, dict[str, int]] = {}
        self._warm_s: dict[str, float] = {}

    def _providers(self) -> list[Any]:
        return provider_options(self.name, scenario=self.scenario, input_name=self.input_name,
                                sample_shape=self.sample_shape, batch_range=self.batch_range,
                                cache_dir=self.cache_dir or ".",
                                calibration_table=self.table.path if self.table else None)

    def _optimization_level(self, ort: Any) -> Any:
        if self.provider == TRT_EP:  # TensorRT fuses itself; table names stay the model's
            return ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.GraphOptimizationLevel.ORT_ENABLE_ALL

    def _probe_input(self) -> np.ndarray:
        return np.zeros((self.batch_range[0], *self.sample_shape), np.float32)

    def load(self) -> None:
        import onnxruntime as ort

        _preload_gpu_libraries(ort, self.provider == TRT_EP)
        require_provider(self.name)
        started = time.perf_counter()
        super().load()  # profiled run -> _inspect_profile -> _check
        self._warm_s["first_run_s"] = round(time.perf_counter() - started, 3)
        for size in sorted({self.batch_range[0], self.max_batch}):  # cuDNN search per shape
            started = time.perf_counter()
            self._session.run(None, {self._input_name: np.zeros((size, *self.sample_shape),
                                                                np.float32)})
            self._warm_s[f"batch_{size}_s"] = round(time.perf_counter() - started, 3)

    def _inspect_profile(self, events: list[dict[str, Any]]) -> None:
        self._placement = node_placement(events)

    def _check(self, per_precision: dict[str, int]) -> None:
        summary = check_placement(self.name, self.provider, self._session.get_providers(),
                                  self._placement)
        self._executed["placement"] = summary
        self._executed["evidence"] = ("onnxruntime profiler: the provider and input types of "
                                      "every node of one run at load")
        if not self.sut.proof:  # TensorRT's engine: its build flags, not per-layer evidence
            flags = "int8+fp16" if self.precision == "int8" else "fp16"
            self._executed["executed_precision"] = tensorrt_precision(flags, per_precision)
            self._executed["tensorrt_note"] = (
                "TensorRT's per-layer precision is inside its fused engine node, not in "
                "ONNX Runtime's profile; trt-* reports it per layer")
            if summary["compute_outside_tensorrt"]:
                log.warning("%s: compute nodes outside TensorRT, on the CUDA provider: %s",
                            self.name, summary["compute_outside_tensorrt"])
            return
        if not self.sut.proven(per_precision):
            proof = "/".join(self.sut.proof).upper()
            raise SutError(f"{self.name}: no compute kernel ran in {proof} (compute nodes by "
                           f"precision: {per_precision}); refusing to measure "
                           f"{'+'.join(per_precision).upper() or 'nothing'} as {proof}")
        if self.precision == "fp32" and set(per_precision) - set(self.sut.proof):
            raise SutError(f"{self.name}: compute kernels ran in {per_precision}, not only "
                           "FP32; pass an FP32 model")

    def predict(self, batch: np.ndarray) -> np.ndarray:
        step = self.max_batch  # the TensorRT profile's largest batch; more comes in chunks
        if len(batch) <= step:
            return self._session.run(None, {self._input_name: batch})[0]
        return np.concatenate([self._session.run(None, {self._input_name: batch[i:i + step]})[0]
                               for i in range(0, len(batch), step)])

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        """The CPU SUT's settings plus the CUDA stream: a shared stream would serialise
        co-located SUTs."""
        return {**super().speed_settings(scenario, batch_size),
                "cuda_stream": cuda_stream_policy(self._providers())}

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info.update({
            "device": "gpu",
            "execution_provider": self.provider,
            "provider_options": dict(p for p in self._providers() if isinstance(p, tuple)),
            "cuda_stream": cuda_stream_policy(self._providers()),
            "batch_range": list(self.batch_range),
            "warmup": self._warm_s,
        })
        if self.provider == TRT_EP:
            info["int8_route"] = self.route
            info["engine_cache"] = str(self.cache_dir)
            if self.table is not None:
                info["calibration_table"] = {"path": str(self.table.path), "key": self.table.key,
                                             **{k: self.table.meta.get(k) for k in
                                                ("tensors", "calibration_samples",
                                                 "table_recipe")}}
        return info


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> OnnxRuntimeGpuBackend:
    """Check the provider is there, prepare the ONNX artifact (FP16 copy, calibration table or
    TensorRT QDQ model) and build the backend. ``calibration`` is only read by ``ort-trt-int8``.
    """
    from quantmark.models.source import fp32_onnx, is_torch_weights
    from quantmark.sut.onnxruntime import quantize

    sut = gpu_sut(name)  # unknown names: one line listing the valid ones
    precision = sut.precision_key
    check_options(sut, options.extra)
    route = str(options.extra.get(TRT_INT8_ROUTE_OPTION, "calibrator"))
    path = options.model_path
    if path and not (path.endswith(".onnx") or is_torch_weights(path)):
        raise UserError(f"--model-path {path}: the ONNX Runtime SUTs take an .onnx file or a "
                        f"torch state_dict (.pt/.pth) of model {options.model}")
    require_provider(name)
    fp32 = fp32_onnx(spec, path)
    check_fixed_batch(fp32, options.batch_size)
    artifact, table = fp32, None
    if fp32.precision == "int8":  # the user's own QDQ model runs as it is
        if name != "ort-trt-int8":
            raise UserError(f"--model-path {path} is already quantized: run it with "
                            f"ort-trt-int8 (or ort-int8 on the CPU), or give {name} an FP32 "
                            "model")
        route = "qdq"
    elif precision == "int8":
        data = calibration.arrays("NCHW")
        if route == "qdq":
            from quantmark.models.qdq import qdq_onnx_for_tensorrt

            artifact = qdq_onnx_for_tensorrt(fp32, data, calibration.hash())
        else:
            table = quantize.tensorrt_calibration_table(fp32, data, calibration.hash())
    elif name == "ort-cuda-fp16":
        artifact = quantize.convert_fp16(fp32)
    return OnnxRuntimeGpuBackend(name, artifact, scenario=options.scenario,
                                 batch_size=options.batch_size, threads=options.threads,
                                 table=table, route=route if precision == "int8" else None)
