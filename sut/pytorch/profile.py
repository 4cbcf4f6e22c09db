"""Layer-by-layer time of a torch SUT (``sut.profiling`` contract), read with torch.profiler.

The SUT's own ``predict`` runs under ``torch.profiler.profile`` (CPU activity), each call inside
a ``record_function`` range, so the profile covers exactly what the benchmark runs (inference
mode, bf16 autocast, the final ``.float()``). Rows are the direct children of that range in
execution order, each with its inclusive CPU time on the calling thread:

* eager modules (torch-fp32, torch-bf16, torch-int8dyn): every leaf module's forward is wrapped
  in a ``record_function`` named by its module path (forward pre/post hooks), so a row is a
  layer named as ``diagnose`` names it ("0", "features.3.conv.1" ...); functional ops between
  modules (residual adds, flatten) are rows of their own, ``aten::add#K`` for the K-th.
* torch-int8 runs a TorchScript trace, on which module hooks never fire: its rows are the
  script's top-level ops (``quantized::conv2d_relu#0``, ``aten::quantize_per_tensor#0`` ...).

Each row's time is its median over the profiled iterations (torch.profiler records every call;
the per-iteration split comes from the per-iteration range, not from ``key_averages`` totals).
A module called more than once in one inference is summed per iteration (``calls``).

On CUDA (torch-cuda-fp32/fp16/bf16, ``sut.pytorch.cuda``) the profiler also records the GPU
(``ProfilerActivity.CUDA``): a row's time is the device time of the kernels launched under its
range (the CPU time there is only the launch), its kernel the longest of them, its precision the
mode's (the model and input are cast once); a row whose kernels are only memory copies (the
input's host-to-device copy, the logits' copy back) is ``other``. ``predict`` waits for its
stream, so each iteration's wall time covers its kernels.
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.ao.nn.quantized import DeQuantize, Quantize

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.profiling import UNATTRIBUTED, LayerTime, Profile, median_ms

__all__ = ["CUDA_PROFILER", "PROFILER", "profile"]

log = logging.getLogger(__name__)

PROFILER = ("torch.profiler (ProfilerActivity.CPU) around the SUT's predict; leaf modules "
            "wrapped in record_function ranges by forward pre/post hooks")
#: the range around one inference, and the prefix of a module's range
ITERATION = "quantmark::inference"
MODULE = "quantmark::module::"
#: ops that only convert, copy or re-lay values: what the framework adds to the source graph
OVERHEAD_OPS = frozenset({
    "quantize_per_tensor", "quantize_per_tensor_dynamic", "quantize_per_channel", "dequantize",
    "to", "_to_copy", "copy_", "contiguous", "permute", "transpose", "clone",
    "_autocast_to_reduced_precision", "_autocast_to_full_precision",
})
#: ops that only view or reshape (no arithmetic, usually no copy), and predict's own glue
#: around the model (``torch.from_numpy`` -> lift_fresh, ``.numpy()`` -> detach, resolve_*)
OTHER_OPS = frozenset({"flatten", "view", "reshape", "squeeze", "unsqueeze", "detach", "alias",
                       "as_strided", "size", "numel", "empty", "t", "expand", "slice", "select",
                       "lift_fresh", "lift", "resolve_conj", "resolve_neg"})
#: ops that convert only when they copy (``aten::to`` to the dtype a tensor has is a no-op)
_COPIES = frozenset({"_to_copy", "copy_"})
_OVERHEAD_MODULES = (Quantize, DeQuantize)
_OTHER_MODULES = (nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout2d, nn.Identity)
_DTYPE_PRECISION = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                    torch.quint8: "int8", torch.qint8: "int8"}
PROFILED_MODES = ("fp32", "bf16", "int8", "int8dyn")
#: the CUDA SUTs whose eager modules can be profiled (compile runs CUDA graphs, int8 torchao)
CUDA_MODES = ("fp32", "fp16", "bf16")
CUDA_PROFILER = ("torch.profiler (ProfilerActivity.CPU + CUDA) around the SUT's predict; each "
                 "leaf module's time is the GPU time of the kernels launched in its range")
_KERNEL_CHARS = 80  # cuDNN/cutlass kernel names run to hundreds of characters


def _bare(op: str) -> str:
    """``aten::quantize_per_tensor`` -> ``quantize_per_tensor``."""
    return op.rpartition("::")[2]


def _is_layer(module: nn.Module) -> bool:
    """A leaf module, or a torch.ao quantized one (a dynamic Linear holds its packed weights
    in a child module that never runs a forward of its own)."""
    return (not any(True for _ in module.children())
            or type(module).__module__.startswith("torch.ao.nn."))


class _ModuleRanges:
    """Forward pre/post hooks that put each leaf module's forward in a ``record_function``
    range and remember the dtype it returns (bf16 under autocast, quint8 ...)."""

    def __init__(self, model: nn.Module) -> None:
        self.modules: dict[str, nn.Module] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self._open: dict[str, list[Any]] = collections.defaultdict(list)
        self._handles: list[Any] = []
        for name, module in model.named_modules():
            if name and _is_layer(module):
                self.modules[name] = module
                self._handles.append(module.register_forward_pre_hook(self._enter(name)))
                self._handles.append(module.register_forward_hook(self._exit(name)))

    def _enter(self, name: str) -> Any:
        def hook(_module: nn.Module, _args: Any) -> None:
            scope = torch.autograd.profiler.record_function(MODULE + name)
            scope.__enter__()
            self._open[name].append(scope)
        return hook

    def _exit(self, name: str) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                self.dtypes[name] = output.dtype
            if self._open[name]:
                self._open[name].pop().__exit__(None, None, None)
        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@dataclass
class _Row:
    """One row's identity and its time in each profiled iteration."""

    name: str
    op_type: str
    kernel: str
    precision: str
    category: str
    times_s: list[float] = field(default_factory=list)
    calls: int = 1


def _heaviest_op(event: Any) -> str:
    """The op below ``event`` (or itself) with the most self CPU time: the kernel that ran."""
    best, best_time = event.name, -1.0
    stack = [event]
    while stack:
        item = stack.pop()
        if not item.name.startswith(MODULE) and item.self_cpu_time_total > best_time:
            best, best_time = item.name, item.self_cpu_time_total
        stack.extend(item.cpu_children)
    return best


def _quantized_below(event: Any) -> bool:
    """A quantized kernel ran (``quantized::conv2d_relu``, ``aten::quantized_max_pool2d``)."""
    stack = [event]
    while stack:
        item = stack.pop()
        if item.name.startswith("quantized::") or _bare(item.name).startswith("quantized_"):
            return True
        stack.extend(item.cpu_children)
    return False


def _module_row(name: str, event: Any, ranges: _ModuleRanges) -> _Row:
    module = ranges.modules[name]
    dtype = ranges.dtypes.get(name)
    if _quantized_below(event):
        precision = "int8"
    else:
        precision = _DTYPE_PRECISION.get(dtype, "") if dtype is not None else ""
    category = ("overhead" if isinstance(module, _OVERHEAD_MODULES) else
                "other" if isinstance(module, _OTHER_MODULES) else "compute")
    return _Row(name, type(module).__name__, _heaviest_op(event), precision, category)


def _names_below(event: Any) -> set[str]:
    names, stack = set(), list(event.cpu_children)
    while stack:
        item = stack.pop()
        names.add(_bare(item.name))
        stack.extend(item.cpu_children)
    return names


def _op_category(event: Any) -> str:
    bare = _bare(event.name)
    if bare == "to" and not _names_below(event) & _COPIES:
        return "other"  # to() of the dtype the tensor already has: nothing converted
    return ("overhead" if bare in OVERHEAD_OPS else "other" if bare in OTHER_OPS
            else "compute")


def _op_row(name: str, event: Any, mode: str) -> _Row:
    category = _op_category(event)
    if _quantized_below(event):
        precision = "int8"
    elif category == "compute" and mode == "fp32":
        precision = "fp32"
    else:  # a conversion, or an op under autocast whose dtype the profiler does not give
        precision = ""
    return _Row(name, event.name, _heaviest_op(event), precision, category)


def _top_level(iteration: Any) -> list[Any]:
    """The ops and module ranges directly inside one inference range, in execution order; a
    wrapper that is neither (a script's ``forward``: no ``::`` in its name) gives its own."""
    found: list[Any] = []
    stack = sorted(iteration.cpu_children, key=lambda event: event.time_range.start)
    while stack:
        event = stack.pop(0)
        if "::" in event.name or not event.cpu_children:
            found.append(event)
        else:
            stack[:0] = sorted(event.cpu_children, key=lambda child: child.time_range.start)
    return found


def _kernels_below(event: Any) -> list[Any]:
    """The GPU kernels (and memcpys) launched by ``event`` or any op below it."""
    found, stack = [], [event]
    while stack:
        item = stack.pop()
        found.extend(item.kernels)
        stack.extend(item.cpu_children)
    return found


def _on_gpu(row: _Row, event: Any, mode: str) -> _Row:
    """A CUDA row: its longest kernel, the mode's precision, memory copies as ``other``."""
    kernels = _kernels_below(event)
    if kernels:
        row.kernel = max(kernels, key=lambda kernel: kernel.duration).name[:_KERNEL_CHARS]
    if kernels and all(kernel.name.startswith(("Memcpy", "Memset")) for kernel in kernels):
        row.category, row.precision = "other", ""
    elif row.category == "compute" and not row.precision:
        row.precision = mode
    return row


def _rows(iterations: list[Any], ranges: _ModuleRanges | None, mode: str,
          cuda: bool = False) -> list[_Row]:
    """Per-iteration times of every row (CPU time, on CUDA the kernels' device time); rows in
    the first iteration's execution order."""
    rows: dict[str, _Row] = {}
    for iteration in iterations:
        seen: collections.Counter[str] = collections.Counter()
        spent: dict[str, float] = collections.defaultdict(float)
        calls: collections.Counter[str] = collections.Counter()
        for event in _top_level(iteration):
            module = ranges is not None and event.name.startswith(MODULE)
            if module:
                name = event.name.removeprefix(MODULE)  # a module called twice: one row
            else:
                name = f"{event.name}#{seen[event.name]}"
                seen[event.name] += 1
            if name not in rows:
                rows[name] = (_module_row(name, event, ranges) if ranges is not None and module
                              else _op_row(name, event, mode))
                if cuda:
                    rows[name] = _on_gpu(rows[name], event, mode)
            used = event.device_time_total if cuda else event.cpu_time_total
            spent[name] += used / 1e6  # us -> s
            calls[name] += 1
        for name, seconds in spent.items():
            rows[name].times_s.append(seconds)
            rows[name].calls = calls[name]
    return list(rows.values())


def _run_profiled(backend: Any, samples: np.ndarray, iterations: int, warmup: int,
                  cuda: bool = False) -> tuple[list[Any], list[float]]:
    """(the per-inference profiler ranges, the wall time of each inference). On CUDA the
    device is idle when each timing starts; predict waits for its own stream before it ends."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(warmup):
        backend.predict(samples)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    wall: list[float] = []
    with torch_profile(activities=activities, record_shapes=False) as prof:
        for _ in range(iterations):
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.autograd.profiler.record_function(ITERATION):
                backend.predict(samples)
            wall.append(time.perf_counter() - start)
    # on CUDA a range is also recorded as a GPU-side annotation: the CPU one is the range
    ranges = [event for event in prof.events() if event.name == ITERATION
              and event.device_type == DeviceType.CPU]
    if len(ranges) != iterations:
        raise SutError(f"torch.profiler recorded {len(ranges)} inference ranges for "
                       f"{iterations} inferences")
    return sorted(ranges, key=lambda event: event.time_range.start), wall


def _supported() -> str:
    return (f"torch-{', torch-'.join(PROFILED_MODES)} and torch-cuda-"
            f"{', torch-cuda-'.join(CUDA_MODES)}")


def _check(backend: Any, samples: np.ndarray, iterations: int,
           warmup: int) -> tuple[str, bool]:
    """(the backend's mode, whether it runs on CUDA), or a one-line error for what cannot be
    profiled here."""
    from quantmark.sut.pytorch.backend import TorchBackend
    from quantmark.sut.pytorch.cuda import TorchCudaBackend

    name = getattr(backend, "name", type(backend).__name__)
    cuda = isinstance(backend, TorchCudaBackend)
    if not cuda and not isinstance(backend, TorchBackend):
        raise UserError(f"{name}: layer profiling supports the torch SUTs ({_supported()}), "
                        "not this backend")
    if backend.mode not in (CUDA_MODES if cuda else PROFILED_MODES):
        raise UserError(f"{name}: layer profiling supports {_supported()}; a torch.compile "
                        "graph runs fused kernels with no module boundaries to time, torchao's "
                        "INT8 runs tensor subclasses")
    if iterations < 1 or warmup < 0:
        raise UserError(f"profile needs iterations >= 1 and warmup >= 0, got {iterations} "
                        f"and {warmup}")
    if len(samples) == 0:
        raise UserError("profile needs at least one sample")
    if backend._run is None:
        raise SutError(f"{name}: not loaded (load() it before profiling)")
    return str(backend.mode), cuda


def profile(backend: Any, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each layer's median time per inference of ``samples`` in the model ``backend`` runs."""
    mode, cuda = _check(backend, samples, iterations, warmup)
    model = backend._run
    ranges = None if isinstance(model, torch.jit.ScriptModule) else _ModuleRanges(model)
    try:
        events, wall = _run_profiled(backend, samples, iterations, warmup, cuda)
        rows = _rows(events, ranges, mode, cuda)
    finally:
        if ranges is not None:
            ranges.remove()
    layers = [LayerTime(row.name, row.op_type, row.kernel, row.precision, row.category,
                        median_ms(row.times_s), row.calls)
              for row in rows if median_ms(row.times_s) > 0]
    notes = {
        "torch_version": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "row_time": ("GPU time of the kernels launched in the row's range (torch.profiler "
                     "device time), median over iterations" if cuda else
                     "inclusive CPU time of the row's ops on the calling thread (intra-op "
                     "worker threads run inside it), median over iterations"),
        "rows": ("TorchScript: module hooks do not fire on a script; rows are its top-level "
                 "ops, the K-th call of an op named op#K" if ranges is None else
                 "leaf modules by module path (forward hooks + record_function); functional "
                 "ops between them named op#K"),
    }
    if mode == "int8":
        notes["quantized_engine"] = torch.backends.quantized.engine
    if cuda:
        notes["cuda_device"] = torch.cuda.get_device_name(0)
        notes[UNATTRIBUTED] = ("the GPU idle between kernels, waiting on the host's launches "
                               "(eager Python, the dispatcher, the profiler's own work)")
    log.info("%s: %d rows profiled over %d iterations", backend.name, len(layers), iterations)
    return Profile(sut=backend.name, framework="torch", batch_size=len(samples),
                   iterations=iterations, layers=layers, end_to_end_ms=median_ms(wall),
                   method=CUDA_PROFILER if cuda else PROFILER, notes=notes)
