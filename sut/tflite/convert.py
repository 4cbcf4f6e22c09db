"""SavedModel -> .tflite with TensorFlow's own TFLiteConverter (cached), and user .tflite files.

The TFLite SUTs all start from the SavedModel of ``models.saved_model`` (NHWC, dynamic batch),
so they compute the same function as the TF SUTs. Four recipes, TensorFlow's standard ones:

* ``fp32``: the plain conversion.
* ``fp16``: float16 weights (``Optimize.DEFAULT`` + ``supported_types=[float16]``). On CPU the
  weights are dequantized to fp32 once at load (DEQUANTIZE nodes on constant fp16 tensors) and
  the compute stays fp32: on the digits model the XNNPACK output matches a numpy fp32 forward
  with fp16-rounded weights to 3e-6, and differs from an fp16-arithmetic forward by 6e-3.
* ``int8dyn``: dynamic range (``Optimize.DEFAULT``, no representative data): int8 weights for
  tensors of >= 1024 elements, activations quantized per sample at run time. XNNPACK's output
  matches a numpy forward with per-sample asymmetric int8 activations to 3e-6.
* ``int8``: full integer, calibrated on the shared calibration set (one sample per yield),
  ``TFLITE_BUILTINS_INT8`` only, int8 input and output. A ``Recipe`` that keeps layers in
  float (``run.py diagnose --recover``) goes through TF's own per-node exclusion instead:
  ``tf.lite.experimental.QuantizationDebugger`` calibrates with the same converter and
  ``QuantizationDebugOptions(denylisted_nodes=..., fully_quantize=True)`` quantizes the rest
  with int8 input and output (``fully_quantize``; the debugger leaves ``inference_input_type``
  unused), adding DEQUANTIZE/QUANTIZE around each float op. A recipe's ``damage`` edits the
  converted flatbuffer (``tensorflow.lite.tools.flatbuffer_utils``): the op's int8 weights
  re-quantized over a range ``factor`` times too wide, its int32 bias likewise.
* A detector's ``int8`` keeps its box decode float, with float input and output
  (``detection``: one int8 tensor cannot hold pixel boxes and 0..1 scores).

Everything here that reads a .tflite uses ai-edge-litert only (``inspection``), never TensorFlow:
a Raspberry Pi with just ai-edge-litert + numpy can validate and run a user's .tflite
(``load_user_tflite``).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.exported import read_record, verify_record
from quantmark.models.native_input import check_dtype, input_layout, show, wanted
from quantmark.models.saved_model import tensorflow_version
from quantmark.sut.info import SutInfo
from quantmark.sut.layers import Recipe
from quantmark.sut.registry import find_sut, module_sut
from quantmark.sut.tflite.detection import DETECTION_INT8, convert_int8, detector_io, int8_detector
from quantmark.sut.tflite.inspection import (
    INPUT_TYPES,
    executed_precision,
    file_precision,
    inspect_file,
)
from quantmark.sut.tflite.recipe import DAMAGE, EXCLUSION

RECIPES: dict[str, dict[str, Any]] = {
    "fp32": {"optimizations": [], "version": 1},
    "fp16": {"optimizations": ["DEFAULT"], "supported_types": ["float16"], "version": 1},
    "int8dyn": {"optimizations": ["DEFAULT"], "representative_dataset": None, "version": 1},
    "int8": {"optimizations": ["DEFAULT"], "representative_dataset": "calibration, 1 per yield",
             "supported_ops": ["TFLITE_BUILTINS_INT8"], "inference_input_type": "int8",
             "inference_output_type": "int8", "version": 1},
}
#: the module whose factory builds the TFLite SUTs (their registry entries name it)
BACKEND_MODULE = f"{__package__}.backend"


# ---------------------------------------------------------------- a user's .tflite (no TF)
def _input_layout(inp: dict[str, Any], spec: Any, where: str) -> str:
    """The layout of the model's input for ``spec`` (its channels, height and width) and its
    type: float32, an int8/uint8 input quantized per tensor (a full-integer model's float
    input), or a raw-pixel model's unquantized uint8; UserError (one line) otherwise."""
    dims = [None if d == -1 else int(d) for d in inp["shape_signature"]]
    if inp["dtype"] not in INPUT_TYPES or inp["per_channel"]:
        raise UserError(f"{where} input {inp['name']!r} is {inp['dtype']} {show(dims)}; expected "
                        "float32, int8 or uint8 (per-tensor quantized): re-export the classifier")
    layout = input_layout(dims, spec, where)
    # a quantized input takes float values (quantized on the way in); an unquantized uint8
    # one takes the pixels as they are
    takes = "float32" if inp["dtype"] == "float32" or inp["scale"] else inp["dtype"]
    check_dtype(takes, spec, where, dims)
    return layout


def model_io(summary: dict[str, Any], spec: Any, where: str) -> dict[str, Any]:
    """Layout, class output and batch of a model for ``spec``; UserError (one line) if unfit."""
    if len(summary["inputs"]) != 1:
        raise UserError(f"{where} has {len(summary['inputs'])} inputs; expected one image input "
                        f"of {wanted(spec)}")
    inp = summary["inputs"][0]
    layout = _input_layout(inp, spec, where)
    if getattr(spec, "task", "") == "detection":
        return detector_io(summary, spec, where, layout)
    accepted = (spec.num_classes, spec.num_classes + 1)
    output = next((o for o in summary["outputs"] if len(o["shape_signature"]) == 2
                   and o["shape_signature"][1] in accepted and o["dtype"] in INPUT_TYPES
                   and not o["per_channel"]), None)
    if output is None:
        found = ", ".join(f"{o['dtype']}{o['shape_signature']}" for o in summary["outputs"])
        raise UserError(f"{where} has no [N,{accepted[0]}] or [N,{accepted[1]}] class output "
                        f"(found {found}); export the classifier logits")
    batch = inp["shape_signature"][0]
    if batch not in (-1, 1):
        raise UserError(f"{where} has a static batch of {batch}; convert it with a dynamic "
                        "batch (None) or batch 1")
    classes = output["shape_signature"][1]
    return {"layout": layout, "label_offset": 1 if classes == spec.num_classes + 1 else 0,
            "num_classes": classes, "output_name": output["name"],
            "static_batch": None if batch == -1 else batch,
            "input_dtype": inp["dtype"], "output_dtype": output["dtype"]}


def load_user_tflite(path: str | Path, spec: Any) -> Artifact:
    """Validate a user's .tflite for ``spec`` (used in place); UserError (one line) if unfit."""
    p = Path(path)
    where = f"model {spec.name}: --model-path {p}"
    if not p.is_file():
        raise UserError(f"{where} not found; pass an existing .tflite file")
    try:
        summary = inspect_file(p)
    except (ValueError, RuntimeError) as exc:
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{where} is not a TFLite model ai-edge-litert can read ({cause}); pass "
                        "a .tflite written by tf.lite.TFLiteConverter or ai-edge-torch") from None
    io = model_io(summary, spec, where)
    sha256 = hash_file(p, 64)  # one read: the record checks the full digest, keys use 16
    file_hash = sha256[:16]
    kind = file_precision(summary)
    record = read_record(p)
    weights = f"user: {p.name}"
    if record is not None:  # written by run.py export: the file is quantmark's own artifact
        verify_record(record, p, sha256)
        if record.get("model") != spec.name:
            raise UserError(f"{where} was exported for model {record.get('model')}: pass "
                            f"--model {record.get('model')} (or leave --model out)")
        weights = f"exported: {record.get('artifact', {}).get('weights', p.name)}"
    return Artifact(
        path=p, format="tflite", precision=kind, key=file_hash, weights=weights,
        source_hash=file_hash, times={},
        meta={"model": spec.name, "user_file": str(p.resolve()), "file_precision": kind,
              "executed_precision": executed_precision(summary), "sha256": file_hash,
              "cached": False, "export_record": record, **io},
    )


def tflite_sut(name: str) -> SutInfo:
    """The registry entry of the TFLite SUT ``name`` (its precision key is the recipe)."""
    return module_sut(name, BACKEND_MODULE)


def check_precision(artifact: Artifact, sut: str) -> None:
    """A user's .tflite must hold what the SUT name promises; otherwise name the SUT that fits."""
    wanted, found = tflite_sut(sut).precision_key, artifact.meta["file_precision"]
    if wanted == found:
        return
    fits = find_sut("tflite", found).name
    what = {"fp32": "an fp32 model", "fp16": "a model with fp16 weights",
            "int8dyn": "a dynamic-range int8 model (float activations)",
            "int8": "a full-integer int8 model"}[found]
    needs = {"fp32": "fp32 weights", "fp16": "fp16 weights (float compute)",
             "int8dyn": "dynamic-range int8 weights", "int8": "full-integer int8 ops"}[wanted]
    raise UserError(f"--model-path {artifact.path} is {what}, but {sut} measures {needs}: run it "
                    f"as {fits}, or pass the .pt/.onnx/SavedModel and quantmark converts it "
                    f"for {sut}")


# ---------------------------------------------------------------- conversion (needs TF)
def tflite_key(saved: Artifact, precision: str, calibration_hash: str | None = None,
               recipe: Recipe | None = None) -> str:
    """The artifact key; a changed recipe joins it only when it changes something, so the
    normal artifacts keep their keys."""
    what: dict[str, Any] = {"what": "tflite", "saved_model": saved.key, "precision": precision,
                            "tensorflow": tensorflow_version(), "recipe": DETECTION_INT8
                            if int8_detector(saved, precision) else RECIPES[precision],
                            "calibration": calibration_hash if precision == "int8" else None}
    if saved.meta.get("task") == "detection":  # a user's SavedModel folder keys by its files
        what["task"] = [saved.meta["task"], saved.meta.get("head")]
    if recipe is not None and recipe.key():
        what.update({"recipe_changes": recipe.key(), "exclusion": EXCLUSION,
                     "damage": DAMAGE if recipe.damage else None})
    return hash_json(what)


def _check_recipe(precision: str, recipe: Recipe | None) -> None:
    if recipe is None or not recipe.key():
        return
    if any(not factor > 0 for _, factor in recipe.damage):
        raise UserError(f"tflite: damage factors must be positive: {recipe.damage}")
    if precision != "int8":
        raise UserError(f"tflite-{precision} has no calibrated quantization whose layers could "
                        "be kept in float; only tflite-int8 takes a recipe")


def converter_for(saved_dir: Path, precision: str) -> Any:
    """TensorFlow's TFLite converter on the SavedModel's serving signature, set for
    ``precision``'s weights (fp16: half weights; int8dyn and int8: the default optimisation);
    an int8 caller adds its calibration and integer ops."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_dir),
                                                         signature_keys=["serving_default"])
    if precision != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if precision == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    return converter


def _convert(saved_dir: Path, precision: str, calibration: np.ndarray | None,
             recipe: Recipe | None = None) -> bytes:
    import tensorflow as tf

    converter = converter_for(saved_dir, precision)
    if precision == "int8":
        assert calibration is not None

        def representative() -> Any:
            for sample in calibration:  # as given: the model's layout and input type
                yield [np.ascontiguousarray(sample[None])]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
        if recipe is not None and recipe.key():
            from quantmark.sut.tflite.recipe import convert_excluding, damage_weights

            flatbuffer = (convert_excluding(converter, representative, recipe.exclude)
                          if recipe.exclude else converter.convert())
            return damage_weights(flatbuffer, recipe.damage) if recipe.damage else flatbuffer
    return converter.convert()


def convert_tflite(saved: Artifact, precision: str, calibration: np.ndarray | None = None,
                   calibration_hash: str | None = None, recipe: Recipe | None = None) -> Artifact:
    """The SavedModel ``saved`` converted with recipe ``precision`` (cached).

    ``calibration``: float32 samples in the SavedModel's layout; int8 only, with its hash.
    ``recipe``: layers kept in float or damaged (int8 only); ``Recipe()`` or None: the
    normal model, under its usual key.
    """
    if precision == "int8" and (calibration is None or not calibration_hash
                                or calibration.ndim != 4 or len(calibration) == 0):
        raise ValueError("int8 conversion needs a non-empty [N,H,W,C] calibration array and "
                         "its hash")
    _check_recipe(precision, recipe)
    model = saved.meta.get("model", "model")
    key = tflite_key(saved, precision, calibration_hash, recipe)
    changes = recipe.key() if recipe is not None else {}
    suffix = "".join(f"-{what}{len(items)}" for what, items in changes.items())  # type: ignore

    def build(folder: Path) -> Artifact:
        what = (f"calibrating on {len(calibration)} samples and converting"
                if precision == "int8" and calibration is not None else "converting")
        progress(f"{what} {model} SavedModel -> TFLite {precision}{suffix} ...")
        import tensorflow  # noqa: F401 - imported before the clock: seconds, not conversion

        started = time.perf_counter()
        detector = int8_detector(saved, precision)  # a detector's int8: its decode stays float
        flatbuffer = (convert_int8(saved.path.parent, calibration, recipe, detector) if detector
                      else _convert(saved.path.parent, precision, calibration, recipe))
        convert_s = time.perf_counter() - started
        out = folder / f"{model}-{precision}{suffix}.tflite"
        out.write_bytes(flatbuffer)
        progress(f"converted {model} to TFLite {precision} in {convert_s:.1f} s")
        summary = inspect_file(out)
        shape = summary["inputs"][0]["shape_signature"]
        batch = shape[0]
        if batch != -1 and "user_file" not in saved.meta:
            raise RuntimeError(f"TFLite {precision} of {model} lost the dynamic batch: {shape}")
        if batch not in (-1, 1):
            raise UserError(f"--model-path {saved.meta['user_file']}: the SavedModel has a "
                            f"static batch of {batch}; save it with a dynamic batch (None)")
        meta = {k: v for k, v in saved.meta.items() if k in (
            "model", "layout", "label_offset", "num_classes", "channels", "task", "head")}
        meta.update({
            **({"detector": detector} if detector else {}),
            "saved_model_key": saved.key, "tensorflow": tensorflow_version(),
            "recipe": DETECTION_INT8 if detector else RECIPES[precision],
            "file_precision": file_precision(summary),
            "executed_precision": executed_precision(summary),
            "static_batch": None if batch == -1 else batch, "sha256": hash_file(out),
            "input": summary["inputs"][0], "tensor_types": summary["tensor_types"],
        })
        if precision == "int8" and calibration is not None:
            from quantmark.sut.tflite.recipe import recipe_meta

            meta.update({"calibration_hash": calibration_hash,
                         "calibration_samples": int(len(calibration)),
                         **recipe_meta(out, recipe)})
        return Artifact(path=out, format="tflite", precision=precision, key=key,
                        weights=saved.weights, source_hash=saved.key,
                        times={**saved.times, "tflite_convert_s": round(convert_s, 3)},
                        meta=meta)

    return cached_build(model, key, build)


def prepare_tflite(sut: str, spec: Any, model_path: str | None, calibration: Any,
                   recipe: Recipe | None = None) -> Artifact:
    """The .tflite a TFLite SUT runs: the user's file as is, or converted for the SUT.

    ``model_path``: None (built-in weights), a .tflite, a torch state_dict, an .onnx or a
    SavedModel directory. ``calibration`` (``arrays(layout)``, ``hash()``) is read for int8 only.
    ``recipe``: tflite-int8 only, layers kept in float (not for a user's .tflite).
    """
    precision = tflite_sut(sut).precision_key
    _check_recipe(precision, recipe)
    changed = recipe is not None and bool(recipe.key())
    if changed and model_path is not None and str(model_path).endswith(".tflite"):
        raise UserError(f"--model-path {model_path}: a ready .tflite cannot be re-quantized; "
                        "pass its SavedModel, .onnx or .pt and quantmark converts it")
    if model_path is not None and str(model_path).endswith(".tflite"):
        artifact = load_user_tflite(model_path, spec)
        check_precision(artifact, sut)
        return artifact
    from quantmark.models.source import TORCH_WEIGHT_SUFFIXES

    if model_path is not None and not Path(model_path).is_dir() and not str(model_path).endswith(
            (".onnx", *TORCH_WEIGHT_SUFFIXES)):
        raise UserError(f"--model-path {model_path}: the TFLite SUTs take a .tflite file, a "
                        "torch state_dict (.pt/.pth), an .onnx file or a SavedModel directory")
    if importlib.util.find_spec("tensorflow") is None:
        raise UserError(f"{sut} needs tensorflow to convert model {spec.name} to TFLite: pip "
                        "install 'quantmark[tf]', or pass a ready .tflite with --model-path")
    from quantmark.models.saved_model import export_saved_model

    saved = export_saved_model(spec, model_path)
    if precision != "int8":
        return convert_tflite(saved, precision)
    layout = saved.meta.get("layout", "NHWC")
    return convert_tflite(saved, precision, calibration.arrays(layout), calibration.hash(),
                          recipe)
