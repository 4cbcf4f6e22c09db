"""The CPU torch SUTs on a text encoder (``spec.task == "text"``): ``torch-fp32``,
``torch-bf16``, ``torch-int8dyn`` and ``torch-compile``; ``torch-int8`` is refused
(``text_model``).

``predict`` gets a batch of QSL samples, int64 ``[N, 3, seq_len]``, and calls the module with
its token feeds by input name (``models.text_graph.token_feeds``: views, cut to the batch's
longest sequence where the padding is dynamic) under ``torch.inference_mode``; it answers
float32 ``[N, width]`` (the embedding or the logits).

What executed is proven at load from torch.profiler's record of one probe forward: the matrix
multiply kernels that ran (``aten::addmm``/``mm``/``bmm``/``baddbmm``, CPU scaled-dot-product
attention) by the dtype of their inputs, and ``quantized::linear*`` kernels as INT8. Nested
composite ops (``aten::linear``, ``aten::matmul``) are not counted: under autocast their outer
call shows the float inputs before the cast.

* fp32: every matmul kernel float32, else it fails.
* bf16: ``torch.autocast(cpu, bfloat16)``; no bf16 matmul kernel fails at load.
* int8dyn: ``quantize_dynamic`` of every ``nn.Linear`` (qint8 weights per output channel, as
  ort-int8dyn quantizes; activations quantized per call); the dynamically quantized Linear
  modules are counted and the ``quantized::linear_dynamic`` kernels must have run, else it
  fails. The attention's activation x activation products (``bmm``, or CPU scaled-dot-product
  attention) stay float: executed precision "int8+fp32", with counts.
* compile: inductor, checked against eager FP32 at load. Fixed padding: static shapes at
  batch 1 and the run's batch size, other batch sizes padded up with copies of a real row
  (counted). Dynamic padding: one graph with symbolic batch and sequence (``dynamic=True``),
  proven at load not to recompile for another sequence length; sequences are fed at least 2
  tokens long (a length of 1 would specialise a new graph; the extra token is padding).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError
from quantmark.models.text_graph import batch_length, token_feeds
from quantmark.sut.info import SutInfo
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.pytorch import quantize as tq
from quantmark.sut.pytorch import text_compile as tc
from quantmark.sut.pytorch import text_model as tm
from quantmark.sut.pytorch.shared import fp32_settings, mode_of, unique_graphs

log = logging.getLogger(__name__)

#: the kernels that do a transformer's multiply-accumulate work, named as torch.profiler does
MATMUL_KERNELS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                            "aten::_scaled_dot_product_flash_attention_for_cpu"})
INTEGER_KERNELS = ("quantized::linear",)  # quantized::linear_dynamic, quantized::linear ...
_PROFILER_DTYPES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16",
                    "double": "fp64"}
#: torch's dynamic INT8 of a transformer: as ort-int8dyn's recipe (int8 weights per output
#: channel); on MiniLM over 64 built-in sentences at 128 tokens, cosine to FP32 was 0.977 mean
#: (0.947 min) per channel against 0.949 (0.915) per tensor, the image SUT's recipe
DYNAMIC_RECIPE: dict[str, Any] = {"api": "quantize_dynamic", "modules": ["Linear"],
                                  "dtype": "qint8", "qconfig": "per_channel_dynamic_qconfig",
                                  "engine": tq.ENGINE}
PROOF = ("torch.profiler (CPU) over one probe forward at load: matrix multiply kernels by "
         "input dtype, quantized::linear* as int8")


def matmul_kernels(forward: Callable[[], Any]) -> dict[str, dict[str, int]]:
    """{kernel: {precision: calls}} of the matmul kernels one call of ``forward`` ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        forward()
    seen: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for event in prof.events():
        if event.name.startswith(INTEGER_KERNELS):
            seen[event.name]["int8"] += 1
        elif event.name in MATMUL_KERNELS:
            dtypes = {_PROFILER_DTYPES.get(d, d) for d in event.input_dtypes
                      if d and d != "Scalar"}
            seen[event.name]["+".join(sorted(dtypes)) or "unknown"] += 1
    return {name: dict(counts) for name, counts in sorted(seen.items())}


def by_precision(kernels: dict[str, dict[str, int]]) -> dict[str, int]:
    """Matmul kernel calls per precision, over every kernel."""
    total: collections.Counter[str] = collections.Counter()
    for counts in kernels.values():
        total.update(counts)
    return dict(sorted(total.items()))


def quantize_linear_per_channel(model: nn.Module) -> tuple[nn.Module, float]:
    """Dynamic INT8 of every ``nn.Linear`` in place (``DYNAMIC_RECIPE``); (model, seconds)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    tq.use_x86_engine()
    t0 = time.perf_counter()
    with tq.quiet():
        quantized = quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig},
                                     dtype=torch.qint8, inplace=True)
    return quantized, time.perf_counter() - t0


class TextBackend(Backend):
    """One eager, dynamically quantized or compiled encoder shared by every worker thread."""

    layout = "tokens"

    def __init__(self, name: str, sut: SutInfo, spec: Any, model: tm.TextModel,
                 options: SutOptions) -> None:
        self.name = name
        self.sut = sut
        self.mode = mode_of(sut)
        self.spec = spec
        self.artifact = model.artifact
        self.label_offset = 0
        self.threads = options.threads
        self.batch_size = max(1, options.batch_size)
        self.inputs = model.inputs
        self.seq_len = int(spec.seq_len)
        self.dynamic = spec.padding == "dynamic"
        self._model: nn.Module | None = model.module
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
        loader = {"fp32": self._load_fp32, "bf16": self._load_bf16,
                  "int8dyn": self._load_int8dyn, "compile": self._load_compile}[self.mode]
        loader()
        self._executed["proof"] = PROOF

    def _probe_kernels(self, module: nn.Module, autocast: bool = False
                       ) -> tuple[dict[str, dict[str, int]], dict[str, int], torch.Tensor]:
        """(matmul kernels, calls per precision, output) of one probe forward of ``module``."""
        feeds = self._feeds(tc.probe_batch(self.seq_len, 2))
        out: list[torch.Tensor] = []

        def forward() -> None:
            with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16,
                                                        enabled=autocast):
                out.append(module(**feeds))

        kernels = matmul_kernels(forward)
        self._check_output(out[0], 2)
        return kernels, by_precision(kernels), out[0]

    def _check_output(self, out: Any, rows: int) -> None:
        """The answer is one finite float ``[rows, width]`` tensor of the ONNX file's width."""
        width = self.spec.num_classes
        if not isinstance(out, torch.Tensor) or out.shape[0] != rows or out.dim() != 2 \
                or (width and out.shape[1] != width) or not bool(torch.isfinite(out).all()):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise SutError(f"{self.name}: the module answers {shape} for {rows} samples, not "
                           f"finite [batch, {width or 'width'}] values")

    def _load_fp32(self) -> None:
        kernels, counts, _ = self._probe_kernels(self._model)
        others = {k: n for k, n in counts.items() if k != "fp32"}
        if others or not self.sut.proven(counts):
            raise SutError(f"{self.name}: matmul kernels ran {counts or 'none'}, not float32")
        self._run = self._model
        self._executed = {"executed_precision": "fp32", "evidence": {"fp32_matmul_kernels":
                                                                     counts.get("fp32", 0)},
                          "matmul_kernels": kernels, **fp32_settings()}

    def _load_bf16(self) -> None:
        kernels, counts, _ = self._probe_kernels(self._model, autocast=True)
        bf16, fp32 = counts.get("bf16", 0), counts.get("fp32", 0)
        if not self.sut.proven(counts):
            raise SutError(f"{self.name}: no matmul kernel ran in bfloat16 under autocast "
                           f"({counts or 'none'}); refusing to measure FP32 as BF16")
        self._run = self._model
        self._executed = {
            "executed_precision": "bf16" if fp32 == 0 else "bf16+fp32",
            "evidence": {"bf16_matmul_kernels": bf16, "fp32_matmul_kernels": fp32},
            "matmul_kernels": kernels, "autocast": "cpu bfloat16",
            # without native bf16 dot products oneDNN emulates them: bf16 numerics, slowly
            "cpu_avx512_bf16": getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: None)(),
        }

    def _load_int8dyn(self) -> None:
        model, seconds = quantize_linear_per_channel(self._model)
        self.artifact.times["quantize_s"] = round(seconds, 4)
        dynamic = sum(isinstance(m, torch.ao.nn.quantized.dynamic.Linear)
                      for m in model.modules())
        float_linear = sum(type(m) is nn.Linear for m in model.modules())
        with tq.quiet():  # quantized dtypes warn once: deprecated
            kernels, counts, _ = self._probe_kernels(model)
        integer, floating = counts.get("int8", 0), counts.get("fp32", 0)
        if not dynamic or not self.sut.proven(counts):
            raise SutError(f"{self.name}: no integer Linear kernel ran ({dynamic} dynamically "
                           f"quantized Linear modules; matmul kernels {counts or 'none'}); "
                           "refusing to measure FP32 as INT8")
        self._run = model
        self._executed = {
            "executed_precision": "int8" if floating == 0 else "int8+fp32",
            "evidence": {"int8_matmul_kernels": integer, "fp32_matmul_kernels": floating,
                         "dynamic_int8_linear_modules": dynamic,
                         "float_linear_modules": float_linear},
            "matmul_kernels": kernels, "quant_recipe": DYNAMIC_RECIPE,
            "note": "dynamic quantization covers nn.Linear only: the attention's activation x "
                    "activation products stay FP32. Activation scales are computed per call, "
                    "so a sample's output depends slightly on the rest of its batch",
        }

    def _load_compile(self) -> None:
        kernels, counts, _ = self._probe_kernels(self._model)
        if set(counts) != {"fp32"}:
            raise SutError(f"{self.name}: eager matmul kernels ran {counts or 'none'}, not "
                           "float32")
        compiled, record = tc.compile_encoder(self.name, self._model, self._feeds,
                                              self.seq_len, self.batch_size, self.dynamic)
        self._run = compiled
        self._compiled_sizes = tuple(record["compiled_batch_sizes"])
        self._graphs_after_load = unique_graphs()
        self._executed = {
            "executed_precision": "fp32",
            "evidence": {"fp32_matmul_kernels_eager": counts["fp32"],
                         "compiled_output_dtype": "float32"},
            "matmul_kernels": kernels, "compile": record, **fp32_settings(),
        }

    # ------------------------------------------------------------------ predict

    def _feeds(self, tokens: np.ndarray) -> dict[str, torch.Tensor]:
        """The module's keyword inputs for a batch of QSL samples: torch views, no copy; for a
        compiled graph contiguous copies (its guards check strides, and a padded batch is
        contiguous: views would make it compile again)."""
        if self.mode != "compile":
            views = token_feeds(tokens, self.inputs, self.dynamic)
            return {name: torch.from_numpy(view) for name, view in views.items()}
        if self.dynamic:
            # a symbolic length of 1 would specialise a new graph: feed at least 2 tokens
            length = min(tokens.shape[2], max(2, batch_length(tokens, True)))
            tokens = tokens[:, :, :length]
        views = token_feeds(tokens, self.inputs, dynamic=False)
        return {name: torch.from_numpy(np.ascontiguousarray(view))
                for name, view in views.items()}

    def predict(self, batch: np.ndarray) -> np.ndarray:
        feeds = self._feeds(np.asarray(batch, dtype=np.int64))
        if self.mode == "compile" and not self.dynamic:
            return self._predict_static(feeds)
        with torch.inference_mode():
            if self.mode == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return self._run(**feeds).float().numpy()
            return self._run(**feeds).float().numpy()

    def _predict_static(self, feeds: dict[str, torch.Tensor]) -> np.ndarray:
        """Run on compiled batch sizes: chunks of the largest, the last padded up with copies
        of its own last row (a real sequence: no all-padding row reaches the model)."""
        n = len(next(iter(feeds.values())))
        largest, outputs = self._compiled_sizes[-1], []
        for start in range(0, n, largest):
            chunk = {k: v[start:start + largest] for k, v in feeds.items()}
            rows = len(chunk["input_ids"])
            size = next(s for s in self._compiled_sizes if s >= rows)
            if size != rows:
                chunk = {k: torch.cat([v, v[-1:].expand(size - rows, -1)])
                         for k, v in chunk.items()}
                with self._pad_lock:
                    self._padded += 1
            with torch.inference_mode():
                outputs.append(self._run(**chunk)[:rows])
        return torch.cat(outputs).float().numpy()

    # ------------------------------------------------------------------ describe

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "framework": "torch",
            "framework_version": torch.__version__,
            "requested_precision": self.mode if self.mode != "compile" else "fp32",
            **self._executed,
            "text": {"inputs": list(self.inputs), "seq_len": self.seq_len,
                     "padding": self.spec.padding or "fixed",
                     "runs": self.artifact.meta.get("runs"), "onnx_read": False},
            "quantized_engine": torch.backends.quantized.engine,
            "threads": torch.get_num_threads(),
            "threads_requested": self.threads or "default",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "weights": self.artifact.weights,
            "model_file": str(self.artifact.path),
        }
        if "quantize_s" in self.artifact.times:
            info["quantize_s"] = self.artifact.times["quantize_s"]
        if self.mode == "compile" and "compile" in info:
            info["compile"] = {**info["compile"], "padded_calls": self._padded,
                               "graphs_compiled_after_load":
                               unique_graphs() - self._graphs_after_load}
        return info

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        cut = ("cut to the batch's longest sequence" if self.dynamic
               else f"at the full {self.seq_len} tokens")
        copies = "contiguous copies" if self.mode == "compile" else "views"
        return {"api": f"module(**token feeds) under torch.inference_mode ({self.mode})",
                "threads": torch.get_num_threads(),
                "interop_threads": torch.get_num_interop_threads(),
                "input": f"torch.from_numpy {copies} of the token rows, {cut}"}

    def close(self) -> None:
        self._run = None
        self._model = None


def create(name: str, sut: SutInfo, options: SutOptions, spec: Any) -> TextBackend:
    """The backend of torch SUT ``sut`` on text model ``spec`` (torch-int8 refused)."""
    mode = mode_of(sut)
    if mode == "int8":
        tm.refuse_static(name, spec)
    t0 = time.perf_counter()
    model = tm.text_model(name, spec, options.model_path)
    model.artifact.times["build_torch_s"] = round(time.perf_counter() - t0, 3)
    applied = {"bf16": "torch.autocast(cpu, bfloat16) at run time",
               "int8dyn": "quantize_dynamic(nn.Linear, qint8 per channel) at load",
               "compile": "torch.compile(inductor) at load"}.get(mode)
    if applied:
        model.artifact = tq.with_meta(model.artifact, applied_at_load=applied)
    log.debug("%s: %s, inputs %s", name, model.artifact.weights, model.inputs)
    return TextBackend(name, sut, spec, model, options)
