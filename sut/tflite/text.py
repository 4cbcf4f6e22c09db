"""The TFLite SUTs on a text encoder (``spec.task == "text"``): the text SavedModel
(``models.text_saved_model``: token inputs ``[1, seq_len]``, checked against onnxruntime)
converted by TensorFlow's TFLiteConverter with ``convert``'s four recipes, and run with its
token inputs fed by name.

* ``fp32``, ``fp16`` (fp16 weights, dequantized at load) and ``int8dyn`` (dynamic range: int8
  weights of the FULLY_CONNECTED / BATCH_MATMUL ops with constant weights, activations
  quantized per sample at run time; the attention's activation x activation matmuls stay
  float, and ``executed_precision`` counts them) are the image recipes as they are.
* ``int8`` (static, calibrated on the run's held-out sentences, one per yield, fed by input
  name) quantizes the weight matmuls only (``TEXT_INT8``), as ``ort-int8``'s text rule does:
  every FULLY_CONNECTED op is int8 x int8 with int8 weights, and every other op type is
  denylisted (``tf.lite.experimental.QuantizationDebugger``, ``recipe.convert_excluding``,
  ``fully_quantize=False``), so LayerNorm, GELU, softmax, the attention's activation x
  activation BATCH_MATMULs and the mask stay float, and so do the token inputs (int64) and
  the output. TensorFlow's whole-graph recipe (``TFLITE_BUILTINS_INT8``, every op) converts
  and runs too, but one int8 scale cannot hold the attention scores beside the mask's
  -3.4e38: MiniLM's embeddings pointed elsewhere (mean cosine to FP32 0.37 on 48 real
  sentences; 0.77 with the mask at -30).

The model's batch is static (1), so each batch runs one sample at a time on the interpreter
checked out for that predict, as an image model with a static batch of 1 does
(``backend``); ``--padding dynamic`` is refused (the sequence length is fixed too).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.saved_model import tensorflow_version
from quantmark.models.text_graph import TOKEN_INPUTS, probe_tokens
from quantmark.models.text_saved_model import ELSEWHERE, refuse_dynamic_padding, static_batch_note
from quantmark.sut.interface import SutOptions
from quantmark.sut.tflite.convert import RECIPES, converter_for, tflite_key, tflite_sut
from quantmark.sut.tflite.inspection import executed_precision, file_precision, inspect_file
from quantmark.sut.tflite.interpreter_backend import TFLiteBackend


def _token_details(interpreter: Any) -> dict[str, dict[str, Any]]:
    """``{token input name: its input detail}`` from the model's serving signature."""
    runner = interpreter.get_signature_runner("serving_default")
    return {name: detail for name, detail in runner.get_input_details().items()}


class _TextRunner:
    """One interpreter at batch 1: a sample's token rows set by input name, one invoke."""

    def __init__(self, path: str, threads: int, inputs: tuple[str, ...],
                 output_index: int = -1) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=path, num_threads=threads)
        self.interpreter.allocate_tensors()
        details = _token_details(self.interpreter)
        missing = [name for name in inputs if name not in details]
        if missing or len(details) != len(inputs):
            raise ValueError(f"{path} takes inputs {sorted(details)}, not the text model's "
                             f"{list(inputs)}")
        #: (tensor index, QSL sample row) per token input
        self.feeds = [(int(details[name]["index"]), TOKEN_INPUTS.index(name))
                      for name in inputs]
        self.output_index = output_index

    def run(self, sample: np.ndarray) -> np.ndarray:
        """The output for one QSL sample ``[3, seq_len]`` (a copy, ``[1, width]``)."""
        for index, row in self.feeds:
            self.interpreter.set_tensor(index, sample[row][None])
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.output_index)


class TextTFLiteBackend(TFLiteBackend):
    """A text model's .tflite: token inputs ``[1, seq_len]`` by name, a batch one sample at a
    time; the file's proof and XNNPACK's share as for an image model."""

    def __init__(self, artifact: Artifact, precision: str, threads: int, invoke: str,
                 seq_len: int) -> None:
        super().__init__(artifact, precision, threads, invoke)
        self.invoke = "per-sample"
        self.inputs = tuple(artifact.meta["inputs"])
        self.seq_len = seq_len
        self.layout = "tokens"

    def _make_runner(self, output_index: int = -1) -> _TextRunner:
        return _TextRunner(self.model_path, self.threads, self.inputs, output_index)

    def _bind_io(self, summary: dict[str, Any], first: Any) -> None:
        """The token inputs at ``[1, seq_len]`` and the single ``[1, width]`` output."""
        self._input = {"tokens": [
            {"name": name, "index": int(detail["index"]),
             "dtype": np.dtype(detail["dtype"]).name, "shape": [int(d) for d in detail["shape"]]}
            for name, detail in _token_details(first.interpreter).items()]}
        wrong = [t["shape"] for t in self._input["tokens"] if t["shape"] != [1, self.seq_len]]
        outputs = [o for o in summary["outputs"] if o["shape_signature"][:1] == [1]
                   and len(o["shape_signature"]) == 2]
        if wrong or len(outputs) != 1:
            raise SutError(f"{self.model_path}: token inputs {wrong or 'fine'} and outputs "
                           f"{[o['shape_signature'] for o in summary['outputs']]}; expected "
                           f"[1, {self.seq_len}] inputs and one [1, width] output")
        self._output = outputs[0]
        first.output_index = self._output["index"]

    def _prove(self, summary: dict[str, Any], first: Any, log: list[str]) -> None:
        super()._prove(summary, first, log)
        try:  # the model runs on token inputs, as the timed predicts will feed them
            first.run(probe_tokens(self.seq_len)[0])
        except (ValueError, RuntimeError) as exc:
            raise SutError(f"{self.model_path} failed on a probe sample of token inputs "
                           f"[1, {self.seq_len}] ({exc})") from exc

    def predict(self, batch: np.ndarray) -> np.ndarray:
        runner = self._checkout()
        try:
            out = np.concatenate([runner.run(batch[i]) for i in range(len(batch))])
        finally:
            self._idle.put(runner)
        return self._from_output(out)

    def encode_samples(self, samples: np.ndarray) -> np.ndarray:
        return samples  # token ids: fed as they are, never quantized

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "invoke_note": static_batch_note(self.seq_len),
                "text": {"inputs": list(self.inputs), "seq_len": self.seq_len,
                         "padding": "fixed", "static_batch": 1,
                         "saved_model_check": self.artifact.meta.get("saved_model_check")}}

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        from quantmark.sut.tflite.vendor import litert_benchmark_command

        return {"api": "Interpreter: set_tensor per token input, invoke, get_tensor (one "
                       "interpreter per worker)",
                "delegate": "XNNPACK (default)", "threads": self.threads, "invoke": self.invoke,
                "input": f"int64 token rows {', '.join(self.inputs)} [1, {self.seq_len}], "
                         "set per sample",
                "vendor_command": litert_benchmark_command(self.model_path, self.threads),
                "vendor_note": "litert-benchmark feeds random token ids; same model, threads "
                               "and batch (1)"}


#: what tflite-int8 quantizes in a text model (its artifact key and record carry it)
TEXT_INT8: dict[str, Any] = {
    "optimizations": ["DEFAULT"], "supported_ops": ["TFLITE_BUILTINS_INT8"],
    "representative_dataset": "held-out sentences, 1 per yield, token rows by input name",
    "quantized_ops": ["FULLY_CONNECTED"],
    "float": "every other op type (QuantizationDebugger denylisted_ops, fully_quantize=False): "
             "float32 output, int64 token inputs", "version": 1}
#: the op types tflite-int8 quantizes in a text model
QUANTIZED_OPS = frozenset(TEXT_INT8["quantized_ops"])


def text_recipe(precision: str) -> dict[str, Any]:
    return TEXT_INT8 if precision == "int8" else RECIPES[precision]


def _converter_failure(exc: Exception) -> str:
    """The ops TFLite's builtins lack, from the converter's error (else its first line)."""
    text = str(exc)
    ops = sorted(set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", text)))
    if ops:
        return f"TFLite has no builtin {', '.join(ops)}"
    return (text.strip().splitlines() or [type(exc).__name__])[0][:200]


def _text_flatbuffer(saved_dir: Path, precision: str, inputs: tuple[str, ...],
                     calibration: np.ndarray | None) -> bytes:
    """TensorFlow's converter with ``convert``'s recipe; int8 calibrates one sentence per
    yield, its token rows fed by input name."""
    import tensorflow as tf

    converter = converter_for(saved_dir, precision)
    if precision == "int8":
        assert calibration is not None
        from quantmark.sut.tflite.inspection import open_interpreter
        from quantmark.sut.tflite.recipe import convert_excluding

        def representative() -> Any:
            for sample in calibration:
                yield {name: sample[TOKEN_INPUTS.index(name)][None] for name in inputs}

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        fp32 = converter_for(saved_dir, "fp32").convert()
        kinds = {op["op_name"] for op in open_interpreter(
            None, model_content=fp32)._get_ops_details()}
        return convert_excluding(converter, representative, (), fully_quantize=False,
                                 ops=tuple(sorted(kinds - QUANTIZED_OPS)))
    return converter.convert()


def convert_text_tflite(saved: Artifact, precision: str, calibration: np.ndarray | None = None,
                        calibration_hash: str | None = None) -> Artifact:
    """The text SavedModel converted with recipe ``precision`` (cached); ``calibration``:
    token samples ``[N, 3, seq_len]`` and their hash, int8 only."""
    seq_len = int(saved.meta["seq_len"])
    if precision == "int8" and (calibration is None or not calibration_hash
                                or calibration.shape[1:] != (3, seq_len)):
        raise ValueError(f"int8 conversion needs [N, 3, {seq_len}] token samples and their hash")
    model, inputs = saved.meta.get("model", "model"), tuple(saved.meta["inputs"])
    key = hash_json({"what": "tflite-text", "tflite": tflite_key(saved, precision,
                                                                  calibration_hash),
                     "recipe": text_recipe(precision)})

    def build(folder: Path) -> Artifact:
        progress(f"converting {model} text SavedModel -> TFLite {precision} ...")
        import tensorflow  # noqa: F401 - imported before the clock: seconds, not conversion

        started = time.perf_counter()
        try:
            flatbuffer = _text_flatbuffer(saved.path.parent, precision, inputs, calibration)
        except Exception as exc:  # the converter raises ConverterError and others
            raise UserError(f"tflite-{precision}: TensorFlow's converter cannot convert "
                            f"{model} ({_converter_failure(exc)}); {ELSEWHERE}") from None
        convert_s = time.perf_counter() - started
        out = folder / f"{model}-{precision}.tflite"
        out.write_bytes(flatbuffer)
        summary = inspect_file(out)
        progress(f"converted {model} to TFLite {precision} in {convert_s:.1f} s")
        meta = {k: v for k, v in saved.meta.items() if k in (
            "model", "task", "head", "layout", "inputs", "width", "num_classes", "seq_len",
            "static_batch", "label_offset")}
        meta.update({
            "saved_model_key": saved.key, "saved_model_check": saved.meta.get("check"),
            "tensorflow": tensorflow_version(), "recipe": text_recipe(precision),
            "file_precision": file_precision(summary),
            "executed_precision": executed_precision(summary), "sha256": hash_file(out),
            "tensor_types": summary["tensor_types"], "compute_ops": summary["compute_ops"]})
        if precision == "int8" and calibration is not None:
            meta.update({"calibration_hash": calibration_hash,
                         "calibration_samples": int(len(calibration))})
        return Artifact(path=out, format="tflite", precision=precision, key=key,
                        weights=saved.weights, source_hash=saved.key,
                        times={**saved.times, "tflite_convert_s": round(convert_s, 3)},
                        meta=meta)

    return cached_build(model, key, build)


def create_text(name: str, options: SutOptions, spec: Any, calibration: Any,
                invoke: str) -> TextTFLiteBackend:
    """The TFLite SUT ``name`` on text model ``spec``: its .tflite converted from the text
    SavedModel (tflite-int8 calibrated on ``calibration.arrays("tokens")``)."""
    import importlib.util

    from quantmark.models.text_saved_model import text_saved_model

    refuse_dynamic_padding(name, spec)
    if str(options.model_path or "").endswith(".tflite"):
        raise UserError(f"{name}: a text model's .tflite is converted here from its ONNX "
                        "export; pass the .onnx file")
    if importlib.util.find_spec("tensorflow") is None:
        raise UserError(f"{name} needs tensorflow to convert model {spec.name} to TFLite: pip "
                        "install 'quantmark[tf]'")
    precision = tflite_sut(name).precision_key
    saved = text_saved_model(spec, options.model_path)
    tokens = calibration.arrays("tokens") if precision == "int8" else None
    artifact = convert_text_tflite(saved, precision, tokens,
                                   calibration.hash() if tokens is not None else None)
    return TextTFLiteBackend(artifact, precision, options.threads, invoke, int(spec.seq_len))
