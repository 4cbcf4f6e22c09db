"""PyTorch on the CPU: ``torch-fp32``, ``torch-bf16``, ``torch-int8``, ``torch-int8dyn``,
``torch-compile``.

Every SUT proves at load what it executes, from one forward pass or from the graph it runs:

* fp32 / bf16: forward hooks on every Conv/Linear record their output dtypes (bf16 under
  ``torch.autocast``); a bf16 SUT with no bf16 layer fails instead of measuring FP32.
* int8: the op kinds of the TorchScript graph that runs (``quantized::conv2d_relu`` ...) against
  float ``aten::conv2d``/``aten::linear`` left over; none quantized fails at load.
* int8dyn: dynamic quantized Linear modules against float Conv/Linear modules (on a CNN only
  the classifier is quantized, so it reports "int8+fp32").
* compile: inductor graphs with static shapes for batch 1 and the run's batch size, compiled in
  ``load()`` and compared with eager FP32. Other batch sizes are zero-padded up to a compiled
  shape (counted), so no compile ever happens during a measurement and no lock guards predict.

A detector (``spec.task == "detection"``) returns its raw head ``[N, 4 + C, anchors]``; the
built-in one is rebuilt in torch rather than read from the ONNX file the run names, torch-int8
keeps its box decode float, and torch-int8dyn refuses it (``detection``). A text encoder
(``spec.task == "text"``) runs in ``text``'s backend, proven by torch.profiler's kernels.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError, UserError
from quantmark.models.detector_graph import is_detector
from quantmark.models.text_graph import is_text
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.pytorch import detection as td
from quantmark.sut.pytorch import quantize as tq
from quantmark.sut.pytorch import text as tt
from quantmark.sut.pytorch.shared import COMPILE_TOLERANCE, fp32_settings, mode_of, unique_graphs
from quantmark.sut.registry import module_sut

COMPUTE_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
_FORMAT_SUTS = {".onnx": "ort-", ".xml": "ov-", ".tflite": "tflite-"}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def layer_output_dtypes(model: nn.Module, x: torch.Tensor,
                        autocast: bool = False) -> dict[str, dict[str, int]]:
    """{layer class: {output dtype: count}} of float Conv/Linear modules over one forward."""
    seen: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor):
            seen[type(module).__name__][_dtype_name(output.dtype)] += 1

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, COMPUTE_LAYERS)]
    try:
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {name: dict(counts) for name, counts in sorted(seen.items())}


def _count(dtypes: dict[str, dict[str, int]], dtype: str) -> int:
    return sum(per.get(dtype, 0) for per in dtypes.values())


def _mixed(low: str, float_count: int) -> str:
    """``low`` when every compute layer ran at it, else ``low+fp32`` (counts go in evidence)."""
    return low if float_count == 0 else f"{low}+fp32"


class TorchBackend(Backend):
    """One eager, quantized, scripted or compiled module shared by every worker thread."""

    layout = "NCHW"

    def __init__(self, name: str, spec: Any, artifact: Any, options: SutOptions,
                 sample: np.ndarray, model: nn.Module | None = None) -> None:
        self.name = name
        self.sut = module_sut(name, __name__)
        self.mode = mode_of(self.sut)
        self.spec = spec
        self.artifact = artifact
        self.label_offset = 0 if is_detector(spec) else int(spec.label_offset)
        self.threads = options.threads
        self.batch_size = max(1, options.batch_size)
        self._sample = np.ascontiguousarray(sample[:1], dtype=np.float32)
        self._model = model  # eager FP32 module built by create(); int8 loads its script
        self._run: Any = None
        self._executed: dict[str, Any] = {}
        self._compiled_sizes: tuple[int, ...] = ()
        self._padded = 0
        self._pad_lock = threading.Lock()
        self._graphs_after_load = 0

    # ------------------------------------------------------------------ load

    def load(self) -> None:
        if self.threads:
            torch.set_num_threads(self.threads)
        x = torch.from_numpy(self._sample)
        loader = {"fp32": self._load_fp32, "bf16": self._load_bf16, "int8": self._load_int8,
                  "int8dyn": self._load_int8dyn, "compile": self._load_compile}[self.mode]
        loader(x)

    def _load_fp32(self, x: torch.Tensor) -> None:
        dtypes = layer_output_dtypes(self._model, x)
        others = {k: v for k, v in dtypes.items() if set(v) != {"float32"}}
        if others or not self.sut.proven({"fp32": _count(dtypes, "float32")}):
            raise SutError(f"{self.name}: Conv/Linear layers output {others}, not float32")
        self._run = self._model
        self._executed = {"executed_precision": "fp32",
                          "evidence": {"fp32_layers": _count(dtypes, "float32")},
                          "layer_output_dtypes": dtypes, **fp32_settings()}

    def _load_bf16(self, x: torch.Tensor) -> None:
        dtypes = layer_output_dtypes(self._model, x, autocast=True)
        bf16, fp32 = _count(dtypes, "bfloat16"), _count(dtypes, "float32")
        if not self.sut.proven({"bf16": bf16, "fp32": fp32}):
            raise SutError(f"{self.name}: no Conv/Linear layer ran in bfloat16 under autocast "
                           f"({dtypes}); refusing to measure FP32 as BF16")
        self._run = self._model
        self._executed = {
            "executed_precision": _mixed("bf16", fp32),
            "evidence": {"bf16_layers": bf16, "fp32_layers": fp32},
            "layer_output_dtypes": dtypes, "autocast": "cpu bfloat16",
            # without native bf16 dot products oneDNN emulates them: bf16 numerics, slowly
            "cpu_avx512_bf16": getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: None)(),
        }

    def _load_int8(self, x: torch.Tensor) -> None:
        script = tq.load_script(self.artifact.path)
        ops = tq.script_op_counts(script)
        integer, floating = tq.compute_op_split(ops)
        n_int, n_float = sum(integer.values()), sum(floating.values())
        if not self.sut.proven({"int8": n_int, "fp32": n_float}):
            raise SutError(f"{self.name}: the INT8 TorchScript runs no quantized conv/linear "
                           f"kernel (float compute: {floating or 'none'}); refusing to measure "
                           "FP32 as INT8")
        with torch.inference_mode(), tq.quiet():  # quantized dtypes warn once: deprecated
            out = script(x)
        if out.dtype != torch.float32 or not bool(torch.isfinite(out).all()):
            raise SutError(f"{self.name}: INT8 output is {out.dtype} with non-finite values")
        self._run = script
        self._executed = {
            "executed_precision": _mixed("int8", n_float),
            "evidence": {"quantized_compute_ops": n_int, "float_compute_ops": n_float},
            "executed_quantized_ops": {k: n for k, n in ops.items()
                                       if k.startswith("quantized::")},
            "executed_float_compute_ops": floating,
            "fx_modules": self.artifact.meta.get("fx_modules", {}),
            **({"float_head": self.artifact.meta["float_head"]}
               if "float_head" in self.artifact.meta else {}),
        }

    def _load_int8dyn(self, x: torch.Tensor) -> None:
        model, seconds = tq.quantize_dynamic_int8(self._model)
        self.artifact.times["quantize_s"] = round(seconds, 4)
        dynamic = sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear)
                      for m in model.modules())
        dtypes = layer_output_dtypes(model, x)  # only float Conv/Linear left are hooked
        left = sum(sum(per.values()) for per in dtypes.values())
        if not self.sut.proven({"int8": dynamic, "fp32": left}):
            raise SutError(f"{self.name}: quantize_dynamic quantized no Linear layer (float "
                           f"layers: {dtypes}); refusing to measure FP32 as INT8")
        self._run = model
        self._executed = {
            "executed_precision": _mixed("int8", left),
            "evidence": {"dynamic_int8_linear": dynamic, "float_compute_layers": left},
            "float_layers_left": dtypes,
            "note": "dynamic quantization covers nn.Linear only; convolutions stay FP32. "
                    "Activation scales are computed per call, so a sample's scores depend "
                    "slightly on the rest of its batch",
        }

    def _load_compile(self, x: torch.Tensor) -> None:
        from torch._dynamo.utils import counters

        eager = self._model
        dtypes = layer_output_dtypes(eager, x)
        # Dynamo's caches are per code object and process-wide: graphs of earlier compiles of
        # the same class (another SUT built in this process) count against its cache limit
        # and would make this model recompile or fall back to eager mid-run. quantmark runs
        # one SUT per process; start it from a clean slate.
        torch._dynamo.reset()
        breaks_before = sum(counters["graph_break"].values())
        cache_before = dict(counters["inductor"])
        sizes = tuple(sorted({1, self.batch_size}))
        compile_s: dict[str, float] = {}
        with warnings.catch_warnings():
            # inductor's imports trip torch.jit's own deprecation warnings: not ours
            warnings.simplefilter("ignore", DeprecationWarning)
            compiled = torch.compile(eager, backend="inductor", dynamic=False)
            for size in sizes:
                batch = torch.from_numpy(np.repeat(self._sample, size, axis=0))
                t0 = time.perf_counter()
                with torch.inference_mode():
                    compiled(batch)
                compile_s[str(size)] = round(time.perf_counter() - t0, 3)
        with torch.inference_mode():
            reference = eager(x)
            got = compiled(x)
        diff = float((got - reference).abs().max())
        if got.dtype != torch.float32 or not torch.allclose(got, reference, **COMPILE_TOLERANCE):
            raise SutError(f"{self.name}: compiled output differs from eager FP32 "
                           f"(max abs diff {diff:.3g}, dtype {got.dtype})")
        self._run = compiled
        self._compiled_sizes = sizes
        self._graphs_after_load = unique_graphs()
        self._executed = {
            "executed_precision": "fp32",
            "evidence": {"fp32_layers_eager": _count(dtypes, "float32"),
                         "compiled_output_dtype": _dtype_name(got.dtype)},
            "layer_output_dtypes": dtypes,
            "compile": {"backend": "inductor", "dynamic": False, "compiled_batch_sizes":
                        list(sizes), "compile_s": compile_s,
                        "graph_breaks": sum(counters["graph_break"].values()) - breaks_before,
                        "max_abs_diff_vs_eager": diff, "tolerance": COMPILE_TOLERANCE,
                        # compile_s is far shorter when inductor's on-disk cache already holds
                        # these graphs (hits) than on a first compile (misses)
                        "inductor_fxgraph_cache": {
                            kind: counters["inductor"][f"fxgraph_cache_{kind}"]
                            - cache_before.get(f"fxgraph_cache_{kind}", 0)
                            for kind in ("hit", "miss")}},
            **fp32_settings(),
        }

    # ------------------------------------------------------------------ predict

    def predict(self, batch: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        if self.mode == "compile":
            return self._predict_compiled(x)
        with torch.inference_mode():
            if self.mode == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return self._run(x).float().numpy()
            return self._run(x).numpy()

    def _predict_compiled(self, x: torch.Tensor) -> np.ndarray:
        """Run on a compiled shape: chunks of the largest, the last zero-padded if needed."""
        n, largest = len(x), self._compiled_sizes[-1]
        if n in self._compiled_sizes:
            with torch.inference_mode():
                return self._run(x).numpy()
        outputs = []
        for start in range(0, n, largest):
            chunk = x[start:start + largest]
            size = next(s for s in self._compiled_sizes if s >= len(chunk))
            if size != len(chunk):
                padded = torch.zeros((size, *chunk.shape[1:]), dtype=chunk.dtype)
                padded[:len(chunk)] = chunk
                with self._pad_lock:
                    self._padded += 1
                chunk_in = padded
            else:
                chunk_in = chunk
            with torch.inference_mode():
                outputs.append(self._run(chunk_in)[:len(chunk)])
        return torch.cat(outputs).numpy()

    # ------------------------------------------------------------------ describe

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "framework": "torch",
            "framework_version": torch.__version__,
            "requested_precision": self.mode if self.mode != "compile" else "fp32",
            **self._executed,
            "quantized_engine": torch.backends.quantized.engine,
            "threads": torch.get_num_threads(),
            "threads_requested": self.threads or "default",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "weights": self.artifact.weights,
            "model_file": str(self.artifact.path),
            **({"detector": self.artifact.meta["detector"]}
               if "detector" in self.artifact.meta else {}),
        }
        if "quantize_s" in self.artifact.times:
            info["quantize_s"] = self.artifact.times["quantize_s"]
        if self.mode == "compile" and "compile" in info:
            info["compile"] = {**info["compile"], "padded_calls": self._padded,
                               "graphs_compiled_after_load":
                               unique_graphs() - self._graphs_after_load}
        return info

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        return {"api": f"module(x) under torch.inference_mode ({self.mode})",
                "threads": torch.get_num_threads(),
                "interop_threads": torch.get_num_interop_threads(),
                "input": "torch.from_numpy view of the batch, no copy"}

    def close(self) -> None:
        self._run = None
        self._model = None


def _check_model_path(path: str | None) -> None:
    """Only torch state_dicts are accepted: other formats get a one-line pointer to their SUTs."""
    from quantmark.models.source import is_torch_weights
    from quantmark.sut.registry import SUTS

    if path is None or is_torch_weights(path):
        return
    suffix = Path(path).suffix.lower()
    if os.path.isdir(path):
        kind, prefix = "a directory (TensorFlow SavedModel?)", "tf-"
    else:
        kind, prefix = f"a {suffix or 'suffix-less'} file", _FORMAT_SUTS.get(suffix, "")
    takers = [name for name in SUTS if prefix and name.startswith(prefix)]
    where = f"; use {', '.join(takers)} for that format" if takers else ""
    raise UserError(f"--model-path {path} is {kind}: the torch SUTs take a torch state_dict "
                    f"(.pt/.pth){where}")


def probe_sample(name: str, spec: Any) -> np.ndarray:
    """A seeded float32 [1, C, H, W] input of the spec's geometry, what the SUTs prove their
    precision on at load. The torch SUTs run a torch network on normalised float input: a
    raw-pixel (uint8) model, which comes from an ONNX file, is refused in one line."""
    if spec.input_dtype != "float32":
        raise UserError(f"{name}: model {spec.name} takes {spec.input_dtype} pixels; the torch "
                        "SUTs run a state_dict on normalised float32 input: run its ONNX "
                        "file with ort-*, ov-*, tflite-* or tf-*")
    shape = (1, spec.channels, spec.input_size, spec.input_width)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).numpy()


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> Backend:
    """Prepare the artifact (cached FP32 state_dict or INT8 TorchScript), build the backend;
    a text encoder's backend is ``text``'s.

    ``calibration`` is only read for torch-int8; the other SUTs probe with a seeded input.
    """
    sut = module_sut(name, __name__)
    if is_text(spec):
        return tt.create(name, sut, options, spec)
    mode = mode_of(sut)
    note: dict[str, Any] = {}
    if is_detector(spec):  # given its ONNX file: the built-in is rebuilt, others refused
        options, note = td.torch_model(name, spec, options)
    _check_model_path(options.model_path)
    probe = probe_sample(name, spec)  # before any conversion: it refuses uint8 input
    fp32 = tq.fp32_weights(spec, options.model_path)
    if mode == "int8":
        data = calibration.arrays("NCHW")
        artifact = tq.quantize_static_int8(spec, fp32, data, calibration.hash())
        artifact = tq.with_meta(artifact, detector=note) if note else artifact
        return TorchBackend(name, spec, artifact, options, data[:1])
    fp32 = tq.with_meta(fp32, detector=note) if note else fp32
    model = tq.load_fp32_model(spec, fp32)
    if mode == "int8dyn":
        td.check_dynamic(name, spec, model)  # a conv-only detector: nothing to quantize
    applied = {"bf16": "torch.autocast(cpu, bfloat16) at run time",
               "int8dyn": "quantize_dynamic(nn.Linear, qint8) at load",
               "compile": "torch.compile(inductor) at load"}.get(mode)
    artifact = tq.with_meta(fp32, applied_at_load=applied) if applied else fp32
    return TorchBackend(name, spec, artifact, options, probe, model)
