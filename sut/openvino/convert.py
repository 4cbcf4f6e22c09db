"""OpenVINO IR artifacts: FP32 IR converted from the canonical ONNX, and NNCF INT8 IR.

Both are cached like every artifact (``models.artifacts.cached_build``); the IR is an ``.xml``
plus its ``.bin`` in one cache folder. FP32 IR is saved with ``compress_to_fp16=False``:
OpenVINO's default stores FP16 weights, which would make "ov-fp32" compute with rounded
weights. A user may also hand in their own IR (``--model-path model.xml``).

INT8 recipe (NNCF post-training quantization; PERFORMANCE preset: symmetric INT8 weights and
activations, NNCF's per-tensor activation defaults), calibration fed in batches of 8 with
``batchwise_statistics`` so ranges are per sample while inference runs batched. Two choices
differ from NNCF's defaults, both measured (top-1 agreement with the FP32 IR; EfficientNet-
Lite0 on the 1536 built-in eval crops with the 256 built-in calibration crops, and the digits
test CNN on its 597 eval images):

* full ``BiasCorrection`` (``fast_bias_correction=False``). Digits: fast 92.8%, full 99.5%
  (top-1 90.8 / 94.8 vs FP32 95.1); Lite0 without overflow fix: fast 92.1%, full 95.4%. It
  calibrates several times slower; paid once, then cached.
* no overflow fix on CPUs with VNNI. NNCF's default quantizes the first layer's weights to
  7 bits because pre-VNNI AVX2/AVX-512 int8 instructions can saturate; VNNI cannot, and the
  halved range cost Lite0 3 top-1 points. Lite0, full bias correction: with the fix 92.1%
  (top-1 64.5 vs FP32 67.6), without 95.4% (67.1). CPUs without VNNI keep NNCF's fix; the
  choice is part of the recipe and so of the cache key.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.detector_graph import detector_artifact, is_detector, task_key, task_meta
from quantmark.models.native_input import check_dtype, input_layout, wanted
from quantmark.sut.layers import Recipe
from quantmark.sut.openvino.ir import ir_files_hash, is_quantized, make_batch_dynamic

CONVERT_RECIPE: dict[str, Any] = {
    "converter": "openvino.convert_model", "source": "onnx", "compress_to_fp16": False,
    "dynamic_batch": True, "version": 1,
}
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
QUANT_RECIPE: dict[str, Any] = {
    "tool": "nncf.quantize", "preset": "PERFORMANCE", "fast_bias_correction": False,
    "batchwise_statistics": True, "calibration_batch": 8, "version": 1,
}


def cpu_has_vnni() -> bool:
    """x86 VNNI (or AMX-INT8) per /proc/cpuinfo: int8 dot products that cannot saturate."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    return any(flag in flags for flag in VNNI_FLAGS)


def quant_recipe() -> dict[str, Any]:
    """The recipe on this machine: NNCF's overflow fix only where int8 math can saturate."""
    return {**QUANT_RECIPE, "overflow_fix": "disable" if cpu_has_vnni() else "first_layer_only"}


def _dims(shape: ov.PartialShape) -> list[int | None]:
    """A partial shape's dims (None: dynamic); a dynamic rank reads as no dims at all."""
    if shape.rank.is_dynamic:
        return []
    return [None if d.is_dynamic else d.get_length() for d in shape]


#: OpenVINO element types an image input may have -> the spec's input dtype
INPUT_TYPES = {"f32": "float32", "u8": "uint8"}


def _classifier_output(model: ov.Model, classes: tuple[int, ...]) -> int | None:
    """Index of the first float [N, classes] output, or None."""
    for index, output in enumerate(model.outputs):
        shape = output.get_partial_shape()
        if (shape.rank.is_static and shape.rank.get_length() == 2 and shape[1].is_static
                and shape[1].get_length() in classes and output.get_element_type().is_real()):
            return index
    return None


def load_user_ir(path: str | Path, spec: Any) -> Artifact:
    """Validate a user's OpenVINO IR (``--model-path x.xml``); UserError (one line) if unfit.

    Accepts one image input the spec feeds (its channels, height and width, NCHW or NHWC; f32,
    or u8 for a raw-pixel spec) and a float output [N, classes] or [N, classes+1] (background
    class: label_offset 1). The file is used in place.
    """
    p = Path(path)
    where = f"model {spec.name}: --model-path {p}"
    if not p.is_file():
        raise UserError(f"{where} not found; pass an existing OpenVINO .xml (with its .bin)")
    try:
        model = ov.Core().read_model(str(p))
    except Exception as exc:  # OpenVINO raises RuntimeError subclasses with long messages
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{where} is not a readable OpenVINO IR ({cause}); pass an .xml saved "
                        "by openvino.save_model, with its .bin beside it") from None
    if len(model.inputs) != 1:
        raise UserError(f"{where} has {len(model.inputs)} inputs; expected one image input "
                        f"of {wanted(spec)}")
    inp = model.input(0)
    shape = inp.get_partial_shape()
    dims = _dims(shape)
    layout = input_layout(dims, spec, where)
    element = inp.get_element_type().get_type_name()
    check_dtype(INPUT_TYPES.get(element, element), spec, where, dims)
    if is_detector(spec):
        from quantmark.sut.openvino.detection import user_detector_ir

        return user_detector_ir(p, model, spec, where, layout)
    accepted = (spec.num_classes, spec.num_classes + 1)
    out_index = _classifier_output(model, accepted)
    if out_index is None:
        found = ", ".join(f"{o.get_any_name() if o.get_names() else '?'}{o.get_partial_shape()}"
                          for o in model.outputs)
        raise UserError(f"{where} has no float output [N,{accepted[0]}] or [N,{accepted[1]}] "
                        f"(found {found}); convert the classifier logits")
    try:
        static_batch = make_batch_dynamic(model)
    except Exception:
        raise UserError(f"{where} has a static batch {shape[0]} that OpenVINO cannot make "
                        "dynamic; convert it with a dynamic batch (input shape [-1,...])") from None
    classes = model.output(out_index).get_partial_shape()[1].get_length()
    identity = ir_files_hash(p)
    meta: dict[str, Any] = {
        "model": spec.name, "user_file": str(p.resolve()), "layout": layout,
        "output_index": out_index, "static_batch": static_batch, "num_classes": classes,
        "label_offset": 1 if classes == spec.num_classes + 1 else 0,
        "channels": spec.channels, "input_dtype": spec.input_dtype,
        "input_hw": [spec.input_size, spec.input_width],  # fixes dynamic dims at compile
        "openvino": ov.__version__, "sha256": identity, "cached": False,
    }
    return Artifact(path=p, format="openvino-ir",
                    precision="int8" if is_quantized(model) else "fp32", key=identity,
                    weights=f"user IR: {p.name} sha256 {identity}", source_hash=identity,
                    times={}, meta=meta)


def convert_key(source: Artifact, spec: Any = None) -> str:
    """The IR's key; a user's ONNX adds the spec's input (its dynamic height and width are
    fixed to it), so the exported models keep their keys."""
    what = {"what": "openvino-ir", "source": source.key, "source_sha": source.meta.get("sha256"),
            "openvino": ov.__version__, "recipe": CONVERT_RECIPE}
    if spec is not None and "user_file" in source.meta:
        what["input"] = [spec.channels, spec.input_size, spec.input_width]
    return hash_json({**what, **task_key(source.meta)})


def fix_spatial_dims(model: ov.Model, size: Any, layout: str) -> bool:
    """Give a dynamic input height or width ``size`` (the spec's height, width; the batch stays
    as it is): a model with dynamic spatial dims runs at the size the run feeds. True if
    changed."""
    shape = model.input(0).get_partial_shape()
    dims = _dims(shape)
    axes = (2, 3) if layout == "NCHW" else (1, 2)
    if len(dims) != 4 or all(dims[a] is not None for a in axes):
        return False
    sizes = dict(zip(axes, (int(size[0]), int(size[1])), strict=True))
    new = [shape[i] if i not in sizes else ov.Dimension(sizes[i]) for i in range(4)]
    model.reshape({model.input(0): ov.PartialShape(new)})
    return True


def ov_fp32_ir(spec: Any, model_path: str | Path | None = None) -> Artifact:
    """FP32 OpenVINO IR for ``spec``: the user's .xml, or converted from the canonical ONNX."""
    if model_path is not None and str(model_path).endswith(".xml"):
        return load_user_ir(model_path, spec)
    from quantmark.models.source import fp32_onnx

    source = fp32_onnx(spec, model_path)
    if is_detector(spec):
        source = detector_artifact(source, spec)
    key = convert_key(source, spec)

    def build(folder: Path) -> Artifact:
        progress(f"converting {spec.name} to OpenVINO IR (one-off, then cached) ...")
        t0 = time.perf_counter()
        model, how = _convert(source, spec)
        static_batch = make_batch_dynamic(model)
        fix_spatial_dims(model, (spec.input_size, spec.input_width),
                         source.meta.get("layout", "NCHW"))
        out = folder / f"{source.path.stem.removesuffix('-fp32')}-fp32.xml"
        ov.save_model(model, str(out), compress_to_fp16=False)
        convert_s = time.perf_counter() - t0
        progress(f"converted {spec.name} in {convert_s:.1f} s")
        meta = {k: v for k, v in source.meta.items()
                if k in ("model", "layout", "label_offset", "num_classes", "output_name",
                         "input_name", "user_file", "channels", "input_dtype")}
        output_name = source.meta.get("output_name")
        meta.update({
            "model": meta.get("model", spec.name), "layout": source.meta.get("layout", "NCHW"),
            "output_index": _output_index(model, output_name), "static_batch": static_batch,
            "source_onnx": str(source.path), "source_key": source.key,
            "recipe": CONVERT_RECIPE, "openvino": ov.__version__,
            "sha256": ir_files_hash(out), **how, **task_meta(spec),
        })
        # a QDQ ONNX converts to FakeQuantize ops: that IR is INT8, whatever the SUT asked
        precision = "int8" if is_quantized(model) else "fp32"
        return Artifact(path=out, format="openvino-ir", precision=precision, key=key,
                        weights=source.weights,
                        source_hash=source.meta.get("sha256") or source.key,
                        times={"convert_s": round(convert_s, 3)}, meta=meta)

    return cached_build(spec.name, key, build)


def _convert(source: Artifact, spec: Any) -> tuple[ov.Model, dict[str, Any]]:
    """``openvino.convert_model`` of the ONNX file, and what the artifact records of how; a
    detector it cannot convert gets the one known fix, else is refused in one line."""
    try:
        return ov.convert_model(str(source.path)), {}
    except RuntimeError as exc:
        if not is_detector(spec):
            raise
        from quantmark.sut.openvino.detection import conversion_error, read_detector

        where = f"model {spec.name}: --model-path {source.meta.get('user_file', source.path)}"
        try:
            return read_detector(source.path, where)
        except (RuntimeError, ValueError):
            raise conversion_error(exc, source.path, where) from None


def _output_index(model: ov.Model, name: str | None) -> int:
    """The converted model's output that was the ONNX classifier output (first by default)."""
    for index, output in enumerate(model.outputs):
        if name and name in output.get_names():
            return index
    return 0


def quantize_key(fp32: Artifact, calibration_hash: str, recipe: Recipe | None = None) -> str:
    """The INT8 IR's cache key; a layer recipe joins it only when it changes something, so
    the SUT's normal IR keeps its key."""
    import nncf

    what: dict[str, Any] = {"what": "openvino-nncf-int8", "fp32": fp32.key,
                            "fp32_sha": fp32.meta.get("sha256"), "calibration": calibration_hash,
                            "recipe": quant_recipe(), "nncf": nncf.__version__,
                            "openvino": ov.__version__}
    if recipe is not None and recipe.key():
        what["layers"] = recipe.key()
    return hash_json({**what, **task_key(fp32.meta)})


def _nncf_quantize(model: ov.Model, calibration: np.ndarray, recipe: dict[str, Any],
                   layers: Recipe, head: list[str]) -> tuple[ov.Model, Any]:
    """NNCF's post-training quantization of ``model`` with ``recipe`` (the NNCF settings),
    the diagnosis' layers and a detector's ``head`` kept in FP32 (its ignored scope, also
    returned; None without)."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

    step = recipe["calibration_batch"]
    # as given: the provider's samples are already the model's layout and input type
    batches = [np.ascontiguousarray(calibration[i:i + step])
               for i in range(0, len(calibration), step)]
    names = list(head)
    if layers.exclude:
        from quantmark.sut.openvino.recipe import ignored_names

        names = list(dict.fromkeys([*ignored_names(model, layers.exclude), *head]))
    ignored = nncf.IgnoredScope(names=names) if names else None
    # NNCF counts dataset items, not images: subset_size = all batches = every sample
    quantized = nncf.quantize(
        model, nncf.Dataset(batches), preset=nncf.QuantizationPreset.PERFORMANCE,
        subset_size=len(batches), fast_bias_correction=recipe["fast_bias_correction"],
        advanced_parameters=AdvancedQuantizationParameters(
            batchwise_statistics=recipe["batchwise_statistics"],
            overflow_fix=OverflowFix(recipe["overflow_fix"])),
        ignored_scope=ignored,
    )
    return quantized, ignored


def ov_int8_ir(fp32: Artifact, calibration: np.ndarray, calibration_hash: str,
               recipe: Recipe | None = None) -> Artifact:
    """INT8 IR of ``fp32`` by NNCF post-training quantization, calibrated on ``calibration``.

    ``calibration`` is in the model's layout and input type (float32, or a raw-pixel model's
    uint8): the caller asks the provider for it, and NNCF gets it as it is.
    ``recipe`` (diagnosis): ops kept in FP32 through NNCF's ignored scope, and weight damage
    injected after quantization.
    """
    if calibration.ndim != 4 or len(calibration) == 0:
        raise ValueError(f"calibration must be a non-empty 4-D array, got {calibration.shape}")
    layers = recipe or Recipe()  # ``recipe`` inside build() is the NNCF settings
    key = quantize_key(fp32, calibration_hash, layers)
    model_name = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        import nncf

        progress(f"quantizing {model_name} to INT8 with NNCF on {len(calibration)} "
                  "calibration samples ...")
        model = ov.Core().read_model(str(fp32.path))
        make_batch_dynamic(model)
        if fp32.meta.get("input_hw"):  # a user's IR with a dynamic height or width
            fix_spatial_dims(model, fp32.meta["input_hw"], fp32.meta.get("layout", "NCHW"))
        recipe = quant_recipe()
        head, head_meta = _float_head(fp32, model)
        t0 = time.perf_counter()
        quantized, ignored = _nncf_quantize(model, calibration, recipe, layers, head)
        quantize_s = time.perf_counter() - t0
        if layers.damage:
            from quantmark.sut.openvino.recipe import widen_weight_range

            widen_weight_range(quantized, layers.damage)
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-int8.xml"
        ov.save_model(quantized, str(out), compress_to_fp16=False)
        progress(f"quantized {model_name} in {quantize_s:.1f} s")
        fake_quantize = sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops())
        meta = {k: v for k, v in fp32.meta.items()
                if k not in ("cached", "sha256", "recipe", "user_file")}
        meta.update({
            "quant_recipe": recipe, "calibration_hash": calibration_hash,
            "calibration_samples": int(len(calibration)), "fp32_key": fp32.key,
            "fp32_file": str(fp32.path), "nncf": nncf.__version__,
            "openvino": ov.__version__, "fake_quantize_ops": int(fake_quantize),
            "sha256": ir_files_hash(out),
        })
        if layers.key() or head:
            meta["nncf_ignored_scope"] = list(ignored.names) if ignored else []
        if layers.key():
            meta["layer_recipe"] = layers.key()
        meta.update(head_meta)
        return Artifact(path=out, format="openvino-ir", precision="int8", key=key,
                        weights=fp32.weights,
                        source_hash=fp32.meta.get("sha256") or fp32.key,
                        times={"quantize_s": round(quantize_s, 3)}, meta=meta)

    return cached_build(model_name, key, build)


def _float_head(fp32: Artifact, model: ov.Model) -> tuple[list[str], dict[str, Any]]:
    """A detector's head post-processing ops in the model NNCF quantizes (kept FP32), and what
    the artifact records of them; none for a classifier."""
    if not is_detector(fp32.meta):
        return [], {}
    from quantmark.sut.openvino.detection import float_head_meta, head_ops

    head, stops = head_ops(model, f"model {fp32.meta.get('model', fp32.path.stem)}")
    return head, float_head_meta(head, stops)
