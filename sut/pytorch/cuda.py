"""PyTorch on an NVIDIA GPU: ``torch-cuda-fp32``, ``torch-cuda-fp16``, ``torch-cuda-bf16``,
``torch-cuda-compile`` and ``torch-cuda-int8``.

Every SUT proves at load what it executes, as the CPU torch SUTs do (``sut.pytorch.backend``):

* fp32 / fp16 / bf16: forward hooks on every Conv/Linear record their output dtypes on the
  GPU; a reduced-precision SUT whose layers ran FP32 fails, so does an FP32 one that did not.
* FP16 and BF16 cast the model and its input once (``model.half()`` / ``.to(bfloat16)``), not
  ``torch.autocast``: autocast re-casts weights at every call and keeps a cast layer around
  each op, the training tool; a deployment casts once, as TensorRT and ONNX Runtime FP16 do.
  Every Conv/Linear then runs FP16 (BF16), which the evidence shows layer by layer. BF16 needs
  a GPU that has it (``torch.cuda.is_bf16_supported()``), else SutError.
* FP32 means FP32: TF32 is switched off for cuDNN convolutions and matmuls (process-wide:
  quantmark runs one SUT per process) and reported.
* compile: inductor with static shapes for batch 1 and the run's batch size, then a CUDA graph
  captured over each compiled shape (``--sut-option cuda_graphs=off`` runs the compiled code
  without graphs). CUDA graphs replay a whole forward pass as one launch: at small batches the
  launch overhead they remove is much of the latency. ``torch.compile(mode="reduce-overhead")``
  would capture them itself, but its CUDA graph trees are per thread and assert when called
  from several (pytorch/pytorch#123177), and LoadGen calls predict from its own and the worker
  threads; so the graphs are captured here (``torch.cuda.CUDAGraph``) over the compiled
  module, replayed under a lock with static input/output buffers. Other batch sizes are
  zero-padded up to a captured shape (counted). The graph's output is compared with eager FP32.
* int8: only through a maintained path, torchao (``quantize_`` with int8 dynamic activation and
  int8 weight): it covers ``nn.Linear`` only, so a CNN reports "int8+fp32" with the counts. The
  evidence is the quantized weight classes of the Linear layers; none quantized fails. Without
  torchao the registry lists the SUT as unavailable; nothing is emulated.

cuDNN's benchmark mode stays off: it autotunes each new input shape on first sight, and Server's
batches of any size would autotune inside the measurement.

Streams: each backend makes its own ``torch.cuda.Stream`` at load and does everything there
(load, compile, capture, every predict's copies and forward), then waits for that stream only.
Two backends in one process (ensemble members, one thread each) so overlap instead of queueing
on the legacy default stream. CUDA graphs are captured on that stream and replayed on it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.pytorch import quantize as tq
from quantmark.sut.pytorch.backend import (
    COMPUTE_LAYERS,
    _check_model_path,
    _count,
    _dtype_name,
    layer_output_dtypes,
    mode_of,
    probe_sample,
)
from quantmark.sut.pytorch.suts import CUDA_GRAPHS_OPTION
from quantmark.sut.registry import check_options, get_sut, module_sut

#: the dtype of model and input per mode_of (torchao's int8dyn quantizes an FP32 model)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
          "compile": torch.float32, "int8dyn": torch.float32}
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
COMPILE_TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}  # inductor's fused kernels reorder float sums
TORCHAO_NEEDED = "needs torchao (pip install torchao) and a CUDA GPU"
#: what describe() and speed_settings() say about the stream a backend runs on
CUDA_STREAM = "own (torch.cuda.Stream, one per backend)"

log = logging.getLogger(__name__)
#: torch allows one CUDA graph capture at a time per process (torch.cuda.graph's own note);
#: ensemble members may load side by side, so their captures take turns
_CAPTURE_LOCK = threading.Lock()
#: live torch-cuda-compile backends: Dynamo's cache is process-wide and one member's reset
#: would make another recompile inside its measurement
_COMPILED: weakref.WeakSet[Any] = weakref.WeakSet()
_COMPILED_LOCK = threading.Lock()


def cuda_blocker() -> str | None:
    """Why this torch cannot run on a CUDA GPU here, or None."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no NVIDIA GPU or driver visible)"
    return None


def require_cuda(name: str) -> None:
    """One-line SutError when ``name`` cannot run on CUDA here."""
    reason = cuda_blocker()
    if reason:
        raise SutError(f"{name}: {reason}; needs an NVIDIA GPU and a CUDA build of torch")


def tf32_off() -> dict[str, Any]:
    """Switch TF32 off for cuDNN convolutions and CUDA matmuls; return the settings in force."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    return gpu_settings()


def new_stream(device: torch.device) -> Any:
    """A CUDA stream for one backend: its work then neither waits for nor blocks another
    backend's, as it would on the shared legacy default stream."""
    return torch.cuda.Stream(device=device)


@contextlib.contextmanager
def on_stream(stream: Any) -> Iterator[None]:
    """Enqueue the block's CUDA work on ``stream`` (this thread only), then wait for that
    stream, not the whole device: other backends' work on their streams goes on."""
    with torch.cuda.stream(stream):
        yield
    stream.synchronize()


def reset_dynamo_unless_shared(owner: object) -> bool:
    """Clear Dynamo's process-wide cache before ``owner`` compiles, unless another live
    compiled backend (an ensemble member) still runs code from it; return whether it reset."""
    with _COMPILED_LOCK:
        shared = any(other is not owner for other in _COMPILED)
        if not shared:
            torch._dynamo.reset()
        else:
            log.info("torch-cuda-compile: another compiled backend is live in this process; "
                     "keeping Dynamo's cache")
        _COMPILED.add(owner)
    return not shared


def gpu_settings() -> dict[str, Any]:
    return {"cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def linear_weight_classes(model: nn.Module) -> dict[str, int]:
    """{weight class name: count} over the model's ``nn.Linear`` layers (``Parameter`` when
    float, a torchao tensor subclass such as ``Int8Tensor`` once quantized)."""
    return dict(collections.Counter(type(m.weight).__name__ for m in model.modules()
                                    if isinstance(m, nn.Linear)))


def torchao_int8(model: nn.Module) -> dict[str, int]:
    """Quantize ``model``'s Linear layers in place with torchao (int8 dynamic activations, int8
    weights); return the Linear weight classes afterwards."""
    try:
        from torchao.quantization import quantize_
    except ImportError:
        raise SutError(f"torch-cuda-int8: {TORCHAO_NEEDED}") from None
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig

        config = Int8DynamicActivationInt8WeightConfig()
    except ImportError:  # torchao before the Config classes
        from torchao.quantization import int8_dynamic_activation_int8_weight

        config = int8_dynamic_activation_int8_weight()
    quantize_(model, config)
    return linear_weight_classes(model)


def int8_evidence(name: str, model: nn.Module, classes: dict[str, int]) -> dict[str, Any]:
    """Executed precision of a torchao-quantized model: quantized Linear layers against the
    float Conv/Linear layers left; no quantized layer is a SutError."""
    quantized = sum(n for cls, n in classes.items() if cls not in ("Parameter", "Tensor"))
    float_layers = sum(1 for m in model.modules() if isinstance(m, COMPUTE_LAYERS)
                       and type(m.weight).__name__ in ("Parameter", "Tensor"))
    if not get_sut(name).proven({"int8": quantized, "fp32": float_layers}):
        raise SutError(f"{name}: torchao quantized no Linear layer (Linear weights: "
                       f"{classes or 'none'}); refusing to measure FP32 as INT8")
    return {"executed_precision": "int8" if float_layers == 0 else "int8+fp32",
            "evidence": {"torchao_int8_linear": quantized, "float_compute_layers": float_layers},
            "linear_weight_classes": classes,
            "note": "torchao int8 dynamic quantization covers nn.Linear only; convolutions stay "
                    "FP32. Eager execution: torchao's fastest int8 kernels need torch.compile"}


def dtype_evidence(name: str, dtypes: dict[str, dict[str, int]], want: str) -> dict[str, Any]:
    """Executed precision from Conv/Linear output dtypes; refuses a SUT whose layers did not run
    in ``want`` (torch dtype name)."""
    wanted = _count(dtypes, want)
    total = sum(sum(per.values()) for per in dtypes.values())
    others = {k: v for k, v in dtypes.items() if set(v) != {want}}
    short = SHORT.get(want, want)
    if not get_sut(name).proven({short: wanted}) or (want == "float32" and others):
        raise SutError(f"{name}: Conv/Linear layers output {dtypes}, not {want}; refusing to "
                       f"measure them as {short}")
    left = sorted({SHORT.get(d, d) for per in others.values() for d in per if d != want})
    return {"executed_precision": "+".join([short, *left]),
            "evidence": {f"{short}_layers": wanted, "other_layers": total - wanted},
            "layer_output_dtypes": dtypes}


class TorchCudaBackend(Backend):
    """One module on CUDA device 0 and a CUDA stream of its own, shared by every worker
    thread of this backend (their calls queue on that stream in order)."""

    layout = "NCHW"

    def __init__(self, name: str, spec: Any, artifact: Any, options: SutOptions,
                 sample: np.ndarray, model: nn.Module) -> None:
        self.name = name
        self.mode = mode_of(module_sut(name, __name__))
        self.dtype = DTYPES[self.mode]
        self.spec = spec
        self.artifact = artifact
        self.label_offset = int(spec.label_offset)
        self.batch_size = max(1, options.batch_size)
        self.use_graphs = (self.mode == "compile"
                           and str(options.extra.get(CUDA_GRAPHS_OPTION, "on")) == "on")
        self._sample = np.ascontiguousarray(sample[:1], dtype=np.float32)
        self._model: nn.Module | None = model
        self._run: Any = None
        self._device = torch.device("cuda", 0)
        self._stream: Any = None  # made at load: torch.cuda.Stream needs a CUDA build
        self._executed: dict[str, Any] = {}
        self._settings: dict[str, Any] = {}
        self._sizes: tuple[int, ...] = ()
        self._graphs: dict[int, tuple[Any, torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()
        self._padded = 0
        self._load_s: dict[str, float] = {}

    # ------------------------------------------------------------------ load

    def load(self) -> None:
        require_cuda(self.name)
        self._settings = tf32_off()
        if self.mode == "bf16" and not torch.cuda.is_bf16_supported():
            raise SutError(f"{self.name}: this GPU ({torch.cuda.get_device_name(0)}) has no "
                           "bfloat16 support")
        self._stream = new_stream(self._device)
        with on_stream(self._stream):  # weights, compile, graphs: all on this stream
            self._load_on_stream()

    def _load_on_stream(self) -> None:
        model = self._model.to(self._device)
        if self.dtype != torch.float32:
            model = model.to(self.dtype)
        x = torch.from_numpy(self._sample).to(self._device).to(self.dtype)
        if self.mode == "int8dyn":
            self._executed = int8_evidence(self.name, model, torchao_int8(model))
            self._run = model
        elif self.mode == "compile":
            self._load_compile(model, x)
        else:
            self._executed = dtype_evidence(self.name, layer_output_dtypes(model, x),
                                            _dtype_name(self.dtype))
            self._run = model
        for size in sorted({1, self.batch_size}):  # cuDNN picks its algorithms per shape
            started = time.perf_counter()
            self.predict(np.repeat(self._sample, size, axis=0))
            self._load_s[f"first_batch_{size}_s"] = round(time.perf_counter() - started, 3)

    def _load_compile(self, model: nn.Module, x: torch.Tensor) -> None:
        dtypes = layer_output_dtypes(model, x)
        evidence = dtype_evidence(self.name, dtypes, "float32")
        reset_dynamo_unless_shared(self)  # a clean Dynamo cache, unless a member still uses it
        self._sizes = tuple(sorted({1, self.batch_size}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            compiled = torch.compile(model, backend="inductor", dynamic=False)
            for size in self._sizes:
                batch = x.repeat(size, 1, 1, 1)
                started = time.perf_counter()
                with torch.no_grad():
                    compiled(batch)
                self._stream.synchronize()
                self._load_s[f"compile_{size}_s"] = round(time.perf_counter() - started, 3)
                if self.use_graphs:
                    self._graphs[size] = self._capture(compiled, batch)
        self._run = compiled
        with torch.no_grad():
            reference = model(x).float().cpu()
        got = torch.from_numpy(self.predict(self._sample))
        diff = float((got - reference).abs().max())
        if not torch.allclose(got, reference, **COMPILE_TOLERANCE):
            raise SutError(f"{self.name}: the compiled{' CUDA graph' if self.use_graphs else ''}"
                           f" output differs from eager FP32 (max abs diff {diff:.3g})")
        self._executed = {**evidence, "compile": {
            "backend": "inductor", "dynamic": False, "compiled_batch_sizes": list(self._sizes),
            "cuda_graphs": self.use_graphs, "max_abs_diff_vs_eager": diff,
            "tolerance": COMPILE_TOLERANCE}}

    def _capture(self, compiled: Any, batch: torch.Tensor) -> tuple[Any, torch.Tensor,
                                                                    torch.Tensor]:
        """A CUDA graph of one compiled forward pass with static input and output buffers.

        Warm-up and capture run on this backend's stream (a non-default stream, as capture
        requires), where ``predict`` replays it. ``thread_local`` capture mode: the other
        members' threads may allocate or synchronise meanwhile without breaking this capture
        (or erroring themselves, as ``global`` would make them); the captured stream is
        non-blocking, so no other thread's work is implicitly ordered into it."""
        static_in = batch.clone()
        with torch.no_grad():
            for _ in range(3):
                compiled(static_in)
        self._stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with _CAPTURE_LOCK, torch.no_grad(), torch.cuda.graph(
                graph, stream=self._stream, capture_error_mode="thread_local"):
            static_out = compiled(static_in)
        return graph, static_in, static_out

    # ------------------------------------------------------------------ predict

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Copy in, forward, copy out, all on this backend's stream; wait for that stream."""
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        with on_stream(self._stream):
            if self.mode == "compile":
                return self._predict_shapes(x)
            with torch.inference_mode():
                out = self._run(x.to(self._device).to(self.dtype))
                return out.float().cpu().numpy()

    def _predict_shapes(self, x: torch.Tensor) -> np.ndarray:
        """Run on compiled (captured) shapes: chunks of the largest, the last zero-padded."""
        largest = self._sizes[-1]
        outputs = []
        for start in range(0, len(x), largest):
            chunk = x[start:start + largest]
            size = next(s for s in self._sizes if s >= len(chunk))
            if size != len(chunk):
                with self._lock:
                    self._padded += 1
            outputs.append(self._replay(chunk, size) if self._graphs
                           else self._compiled(chunk, size))
        return np.concatenate(outputs)

    def _replay(self, chunk: torch.Tensor, size: int) -> np.ndarray:
        graph, static_in, static_out = self._graphs[size]
        n = len(chunk)
        with self._lock, torch.no_grad():  # one set of static buffers per shape
            static_in[:n].copy_(chunk)
            if n < size:
                static_in[n:].zero_()
            graph.replay()  # on the current stream: predict's, the one it was captured on
            return static_out[:n].float().cpu().numpy()

    def _compiled(self, chunk: torch.Tensor, size: int) -> np.ndarray:
        n = len(chunk)
        x = chunk.to(self._device)
        if n < size:
            x = torch.cat([x, x.new_zeros((size - n, *x.shape[1:]))])
        with torch.no_grad():
            return self._run(x)[:n].float().cpu().numpy()

    # ------------------------------------------------------------------ describe

    def describe(self) -> dict[str, Any]:
        major, minor = torch.cuda.get_device_capability(0)
        info: dict[str, Any] = {
            "framework": "torch",
            "framework_version": torch.__version__,
            "device": "gpu",
            "cuda_device": torch.cuda.get_device_name(0),
            "compute_capability": f"sm_{major}{minor}",
            "cuda_runtime": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "requested_precision": "fp32" if self.mode == "compile" else self.mode,
            **self._executed,
            "gpu_settings": self._settings,
            "cuda_stream": CUDA_STREAM,
            "load": self._load_s,
            "weights": self.artifact.weights,
            "model_file": str(self.artifact.path),
        }
        if self.mode == "compile" and "compile" in info:
            info["compile"] = {**info["compile"], "padded_calls": self._padded}
        return info

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        """The base settings plus the stream: a shared stream serialises co-located SUTs."""
        return {**super().speed_settings(scenario, batch_size), "cuda_stream": CUDA_STREAM}

    def close(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()  # nothing of ours still queued when buffers go
        self._graphs.clear()
        self._run = None
        self._model = None
        self._stream = None
        with _COMPILED_LOCK:
            _COMPILED.discard(self)


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> TorchCudaBackend:
    """Check CUDA (and torchao for int8) first, then load the FP32 state_dict and build the
    backend. ``calibration`` is unused: torchao's int8 quantizes activations per call."""
    sut = module_sut(name, __name__)
    mode = mode_of(sut)
    check_options(sut, options.extra)
    require_cuda(name)
    if mode == "int8dyn":
        import importlib.util

        if importlib.util.find_spec("torchao") is None:
            raise SutError(f"{name}: {TORCHAO_NEEDED}")
    _check_model_path(options.model_path)
    fp32 = tq.fp32_weights(spec, options.model_path)
    model = tq.load_fp32_model(spec, fp32)
    sample = probe_sample(name, spec)
    applied = {"fp16": "model.half() on CUDA at load", "bf16": "model.to(bfloat16) on CUDA at load",
               "int8dyn": "torchao quantize_(Int8DynamicActivationInt8Weight) at load",
               "compile": "torch.compile(inductor) + CUDA graphs at load"}.get(mode)
    artifact = tq.with_meta(fp32, applied_at_load=applied) if applied else fp32
    return TorchCudaBackend(name, spec, artifact, options, sample, model)
