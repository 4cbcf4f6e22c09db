"""OpenVINO on a text encoder (BERT-style): its ONNX export read by OpenVINO's own ONNX
frontend, the token inputs fed by name at the run's shapes, NNCF's transformer INT8 recipe,
and what the runtime graph says ran.

Shapes: token inputs are ``[batch, sequence]``. Fixed padding feeds every batch at the run's
``seq_len``, so the sequence is static (``[-1, seq_len]``; SingleStream ``[1, seq_len]``) and
the plugin plans its memory once; dynamic padding cuts each batch to its longest sentence, so
the sequence is dynamic too (``[-1, -1]``). The float SUTs compile the ONNX file itself (no
IR is cached: the frontend reads it in well under a second and keeps its f32 weights).

INT8 recipe (``TEXT_QUANT_RECIPE``): ``nncf.quantize`` with ``model_type=TRANSFORMER``, NNCF's
transformer scheme (MIXED preset: symmetric weights, asymmetric activations; SmoothQuant on
the MatMul inputs; LayerNorm, Softmax and GELU left float as NNCF chooses), calibrated one
sentence at a time at its own length, so no padding token's activations (masked in attention
and pooling, but not in the linear layers) widen a range. NNCF's overflow fix follows the
image recipe (off where VNNI cannot saturate). The INT8 IR is quantized with both token dims
dynamic, so one cached IR serves either padding and every sequence length; its key holds the
FP32 ONNX's, the calibration's hash, the recipe (with its model type) and the text task's
head and inputs, so it never collides with an image IR.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.text_graph import PADDINGS, probe_tokens, text_artifact, token_feeds
from quantmark.sut.openvino.convert import cpu_has_vnni
from quantmark.sut.openvino.ir import ir_files_hash
from quantmark.sut.openvino.runtime_graph import layer_precisions

TEXT_QUANT_RECIPE: dict[str, Any] = {
    "tool": "nncf.quantize", "model_type": "TRANSFORMER", "preset": "MIXED",
    "fast_bias_correction": True, "calibration_batch": 1, "calibration_length": "own",
    "version": 1,
}
#: runtime nodes the CPU plugin's Snippets fuse ops into: a text encoder's attention
#: (MatMul-Softmax-MatMul) runs in one. Not compute layers for the proof (they also fuse plain
#: elementwise chains), but recorded so the attention's precision is on the record
FUSED_LAYERS = frozenset({"Subgraph"})


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


@dataclass(frozen=True)
class TextInputs:
    """How a text model is fed: its token inputs by name, the output it answers with, the
    run's sequence length and whether each batch is cut to its longest sentence."""

    inputs: tuple[str, ...]
    output_name: str
    seq_len: int
    dynamic: bool

    def feeds(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """``{input: int64 [N, L]}`` for QSL samples ``[N, 3, seq_len]``, each a C array:
        OpenVINO shares (or copies) whole contiguous buffers, not strided views."""
        return {name: np.ascontiguousarray(value)
                for name, value in token_feeds(batch, self.inputs, self.dynamic).items()}

    def probe(self, batch: int) -> dict[str, np.ndarray]:
        """The load-time run's feeds: a valid full-length batch (``probe_tokens``)."""
        return self.feeds(probe_tokens(self.seq_len, batch))

    def shape(self, batch: int | None) -> list[int]:
        """The token inputs' ``[batch, sequence]`` as compiled (-1: dynamic)."""
        return [batch or -1, -1 if self.dynamic else self.seq_len]

    def input_note(self, queued: bool) -> str:
        """How batches reach the request (``queued``: the AsyncInferQueue's), for the speed
        settings."""
        cut = ("cut to the batch's longest sentence" if self.dynamic
               else f"at the full {self.seq_len} tokens")
        handed = ("copied into the idle request" if queued
                  else "shared with the request (share_inputs=True)")
        return (f"token inputs {', '.join(self.inputs)} by name, int64 [N, L] {cut}, each "
                f"made a C array and {handed}")

    def benchmark_shapes(self, batch: int) -> list[str]:
        """benchmark_app's shape arguments for these inputs at ``batch``. With dynamic padding
        it feeds the full ``seq_len`` (quantmark cuts each batch shorter): an upper bound."""
        data = ",".join(f"{name}[{batch},{self.seq_len}]" for name in self.inputs)
        if not self.dynamic:
            return ["-shape", data]
        return ["-shape", ",".join(f"{name}[?,?]" for name in self.inputs),
                "-data_shape", data]


def text_fp32(spec: Any, path: str | None) -> Artifact:
    """The FP32 artifact of a text model (its ONNX file, used in place); one line where the
    file or the run's padding cannot work."""
    if not path:
        raise UserError(f"model {spec.name}: a text model runs from its ONNX export; pass "
                        "--model-path model.onnx")
    where = f"model {spec.name}: --model-path {path}"
    if not str(path).endswith(".onnx"):
        raise UserError(f"{where}: the OpenVINO SUTs read a text encoder's ONNX export with "
                        "OpenVINO's ONNX frontend (token inputs by name); pass its .onnx file, "
                        "not an IR or torch weights")
    if spec.padding not in PADDINGS or spec.seq_len < 1:
        raise UserError(f"model {spec.name}: padding {spec.padding!r} at sequence length "
                        f"{spec.seq_len}; choose padding {' or '.join(PADDINGS)} and a "
                        "sequence length of at least 1")
    return text_artifact(path, spec, where)


def text_sut_model(spec: Any, path: str | None, int8: bool,
                   calibration: Any) -> tuple[Artifact, TextInputs]:
    """What an OpenVINO SUT runs for a text model: the ONNX file (float SUTs) or its NNCF
    INT8 IR (``int8``: calibrated on ``calibration.arrays("tokens")``), and how to feed it."""
    fp32 = text_fp32(spec, path)
    artifact = (ov_text_int8_ir(fp32, calibration.arrays("tokens"), calibration.hash())
                if int8 else fp32)
    text = TextInputs(tuple(fp32.meta["inputs"]), str(fp32.meta["output_name"]),
                      int(spec.seq_len), spec.padding == "dynamic")
    return artifact, text


def reshape_tokens(model: ov.Model, inputs: tuple[str, ...], shape: list[int],
                   where: str) -> None:
    """Every token input to ``shape`` in place; one line where the export cannot take it."""
    try:
        model.reshape({model.input(name): ov.PartialShape(shape) for name in inputs})
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses with long messages
        raise UserError(f"{where}: OpenVINO cannot give the token inputs {inputs} the shape "
                        f"{shape} ({_first_line(exc)}); export the encoder with dynamic batch "
                        "and sequence axes") from None


def text_model(core: ov.Core, path: str, text: TextInputs, static_batch: int | None) -> Any:
    """The model as the SUT compiles it (and the profiler reads it): the ONNX file or INT8 IR,
    its token inputs at the run's shape (``static_batch``: SingleStream's)."""
    model = core.read_model(path)
    reshape_tokens(model, text.inputs, text.shape(static_batch), f"openvino: {path}")
    return model


def prove_runs(compiled: Any, text: TextInputs, batch: int, where: str) -> int:
    """Run the compiled encoder once on ``probe_tokens`` (it takes token inputs at the run's
    shape) and return the index of the output it answers with."""
    names = [sorted(output.get_names()) for output in compiled.outputs]
    index = next((i for i, found in enumerate(names) if text.output_name in found), None)
    if index is None:
        raise SutError(f"{where} has no output {text.output_name!r} (outputs {names}); pass "
                       "the encoder whose ONNX file names it")
    try:
        compiled.create_infer_request().infer(text.probe(batch))
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses
        raise SutError(f"{where} failed on a probe batch of token inputs {text.shape(batch)} "
                       f"({_first_line(exc)})") from None
    return index


def text_evidence(compiled: Any, text: TextInputs, layers: dict[str, list[str]]
                  ) -> dict[str, Any]:
    """What a text SUT's record adds: the compiled token shapes, and which compute layers
    (by name) and fused attention subgraphs ran at each precision."""
    fused = collections.Counter(name for _, name, _ in layer_precisions(compiled, FUSED_LAYERS))
    return {
        "inputs": {inp.get_any_name(): str(inp.get_partial_shape()) for inp in compiled.inputs},
        "padding": "dynamic" if text.dynamic else "fixed",
        "seq_len": text.seq_len,
        "output_name": text.output_name,
        "compute_layer_names": layers,
        "fused_subgraphs_by_precision": dict(sorted(fused.items())),
    }


def text_quant_recipe() -> dict[str, Any]:
    """The text recipe on this machine: NNCF's overflow fix only where int8 can saturate."""
    return {**TEXT_QUANT_RECIPE,
            "overflow_fix": "disable" if cpu_has_vnni() else "first_layer_only"}


def text_quantize_key(fp32: Artifact, calibration_hash: str) -> str:
    """The text INT8 IR's cache key: its own ``what`` and the text task's fields beside the
    image key's (FP32 identity, calibration, recipe, versions)."""
    import nncf

    return hash_json({"what": "openvino-nncf-int8-text", "fp32": fp32.key,
                      "fp32_sha": fp32.meta.get("sha256"), "calibration": calibration_hash,
                      "recipe": text_quant_recipe(), "nncf": nncf.__version__,
                      "openvino": ov.__version__, "task": "text", "head": fp32.meta.get("head"),
                      "inputs": list(fp32.meta["inputs"]),
                      "output_name": fp32.meta.get("output_name")})


def calibration_items(calibration: np.ndarray, inputs: tuple[str, ...]
                      ) -> list[dict[str, np.ndarray]]:
    """One feed dict per sentence, cut to its own length (see the module's recipe)."""
    return [{name: np.ascontiguousarray(value)
             for name, value in token_feeds(calibration[i:i + 1], inputs, True).items()}
            for i in range(len(calibration))]


def _nncf_quantize(model: ov.Model, items: list[dict[str, np.ndarray]],
                   recipe: dict[str, Any]) -> ov.Model:
    """NNCF's post-training quantization of ``model`` with the text ``recipe``."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    return nncf.quantize(
        model, nncf.Dataset(items), model_type=nncf.ModelType[recipe["model_type"]],
        preset=nncf.QuantizationPreset[recipe["preset"]], subset_size=len(items),
        fast_bias_correction=recipe["fast_bias_correction"],
        advanced_parameters=AdvancedQuantizationParameters(
            overflow_fix=OverflowFix(recipe["overflow_fix"])))


def ov_text_int8_ir(fp32: Artifact, calibration: np.ndarray, calibration_hash: str) -> Artifact:
    """INT8 IR of a text model's ONNX file by NNCF's transformer recipe, calibrated on token
    samples ``[N, 3, L]`` (int64); cached."""
    if calibration.ndim != 3 or calibration.shape[1] != 3 or len(calibration) == 0:
        raise ValueError(f"calibration must be a non-empty [N, 3, L] batch of token samples, "
                         f"got {calibration.shape}")
    inputs = tuple(fp32.meta["inputs"])
    key = text_quantize_key(fp32, calibration_hash)
    model_name = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Any) -> Artifact:
        import nncf

        progress(f"quantizing {model_name} to INT8 with NNCF (transformer) on "
                 f"{len(calibration)} calibration sentences ...")
        model = ov.Core().read_model(str(fp32.path))
        reshape_tokens(model, inputs, [-1, -1], f"model {model_name}: {fp32.path}")
        recipe = text_quant_recipe()
        t0 = time.perf_counter()
        quantized = _nncf_quantize(model, calibration_items(calibration, inputs), recipe)
        quantize_s = time.perf_counter() - t0
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-int8.xml"
        ov.save_model(quantized, str(out), compress_to_fp16=False)
        progress(f"quantized {model_name} in {quantize_s:.1f} s")
        fake_quantize = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops())
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "user_file")}
        meta.update({
            "quant_recipe": recipe, "calibration_hash": calibration_hash,
            "calibration_samples": int(len(calibration)), "fp32_key": fp32.key,
            "fp32_file": str(fp32.path), "nncf": nncf.__version__, "openvino": ov.__version__,
            "fake_quantize_ops": int(fake_quantize), "sha256": ir_files_hash(out),
        })
        return Artifact(path=out, format="openvino-ir", precision="int8", key=key,
                        weights=fp32.weights, source_hash=fp32.meta.get("sha256") or fp32.key,
                        times={"quantize_s": round(quantize_s, 3)}, meta=meta)

    return cached_build(model_name, key, build)
