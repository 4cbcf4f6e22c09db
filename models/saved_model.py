"""FP32 ONNX -> TensorFlow SavedModel (onnx2tf), cached: the source of the TF and TFLite SUTs.

TensorFlow has no ONNX importer of its own; onnx2tf rewrites the ONNX graph op by op into TF
ops and transposes the network to NHWC, TensorFlow's native layout, so the SavedModel takes
``[N, S, S, 3]``. Its output matches ONNX Runtime to ~1e-5 on the zoo models (see the SUT
tests). The batch stays dynamic: onnx2tf downloads a sample file when the batch is a small
static number, which must never happen offline. A user's own SavedModel directory is accepted
too (``load_user_saved_model``). A text encoder has its own recipe (``models.text_saved_model``).

A detector (``spec.task == "detection"``) is rewritten first: onnx2tf guesses layouts from
static shapes, and with a dynamic batch the YOLO fixture's run-time shape arithmetic made it
concatenate anchors on the wrong axis and slice the DFL output empty, and a [2, A] anchor
constant meeting [N, 2, A] stopped it. ``fold_shape_arithmetic`` and ``align_constant_ranks``
(``models.onnx_rewrites``) fix both without changing the function; ``check_detector`` then runs
the SavedModel against onnxruntime and refuses a conversion that computes something else.
"""

from __future__ import annotations

import contextlib
import io
import keyword
import os
import shutil
import time
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, hash_folder, progress
from quantmark.models.native_input import check_dtype, input_layout, wanted
from quantmark.models.onnx_rewrites import align_constant_ranks, fold_shape_arithmetic
from quantmark.models.source import fp32_onnx
from quantmark.models.tensorflow_env import require_tensorflow, tensorflow_version
from quantmark.models.text_graph import is_text

SAVED_MODEL_RECIPE = {"converter": "onnx2tf", "signature": "serving_default",
                      "layout": "NHWC", "onnxsim": False, "maxpool_zero_pad": True, "version": 2}
SAVED_MODEL_FILE = "saved_model.pb"
#: what a detector's conversion adds (its SavedModel key carries it with the task and head)
DETECTOR_RECIPE = {"rewrites": ["shape arithmetic folded to constants (onnxruntime, batch 1 and "
                                "2)", "broadcast constants given their operand's rank"],
                   "check": "SavedModel vs onnxruntime, seeded batch of 2, error / (1 + |value|)"
                            " <= 1e-3, nms rows matched to the nearest", "version": 1}


def zero_pad_maxpools_after_relu(model: Any) -> int:
    """Pad max pools whose input is a ReLU output with 0 instead of -inf; returns how many.

    onnx2tf turns a padded MaxPool into PadV2(-3.4e38) + MaxPool. TFLite's INT8 calibration then
    sees -3.4e38 in the padded tensor and, since a pad shares its input's scale, gives the ReLU
    output a scale of ~1e36: every value quantizes to one number and XNNPACK refuses the model
    (ResNet's stem). After a ReLU every window already holds a value >= 0, so padding with 0
    computes exactly the same maximum.
    """
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    count = 0
    for position, node in reversed(list(enumerate(graph.node))):
        pads = next((list(a.ints) for a in node.attribute if a.name == "pads"), None)
        producer = producers.get(node.input[0]) if node.input else None
        if node.op_type != "MaxPool" or not pads or not any(pads) or producer is None \
                or producer.op_type != "Relu":
            continue
        half = len(pads) // 2
        pad_values = [0, 0, *pads[:half], 0, 0, *pads[half:]]
        name = f"{node.name or node.output[0]}_zero_pad"
        graph.initializer.append(numpy_helper.from_array(
            np.asarray(pad_values, dtype=np.int64), f"{name}_pads"))
        graph.node.insert(position, helper.make_node(
            "Pad", [node.input[0], f"{name}_pads"], [f"{name}_out"], name=name, mode="constant"))
        node.input[0] = f"{name}_out"
        for attribute in node.attribute:
            if attribute.name == "pads":
                attribute.ints[:] = [0] * len(pads)
        count += 1
    return count


def saved_model_key(onnx_artifact: Artifact, spec: Any = None) -> str:
    """The SavedModel's key; a user's ONNX adds the spec's input (its dynamic height and width
    are fixed to it), so the exported models keep their keys."""
    what = {"what": "saved-model", "source": onnx_artifact.key,
            "source_sha": onnx_artifact.meta.get("sha256"), "onnx2tf": dist_version("onnx2tf"),
            "tensorflow": tensorflow_version(), "recipe": SAVED_MODEL_RECIPE}
    if spec is not None and "user_file" in onnx_artifact.meta:
        what["input"] = [spec.channels, spec.input_size, spec.input_width]
    if is_detector(spec):  # never the key of a classifier of the same file
        what["task"] = {"task": spec.task, "head": spec.head, "recipe": DETECTOR_RECIPE}
    return hash_json(what)


def is_detector(spec: Any) -> bool:
    return getattr(spec, "task", "classification") == "detection"


def detector_layout(dims: list[int | None], spec: Any) -> bool | None:
    """Whether a detector output of ``dims`` is the ONNX layout transposed (True: raw
    [N, anchors, 4+C] or nms [N, 6, K], as onnx2tf may leave it), as it is (False: raw
    [N, 4+C, anchors], nms [N, K, 6]), or not the spec's head (None)."""
    if len(dims) != 3:
        return None
    rows, axis = (4 + spec.num_classes, 1) if spec.head == "raw" else (6, 2)
    if dims[axis] == rows:
        return False
    return True if dims[3 - axis] == rows else None


def safe_input_name(model: Any) -> str | None:
    """Rename an image input named like a Python keyword (``in``): onnx2tf names the
    SavedModel's signature argument after it, and then writes no SavedModel at all. Returns
    the old name, or None when it was kept."""
    weights = {t.name for t in model.graph.initializer}
    image = next(i for i in model.graph.input if i.name not in weights)
    old = image.name
    if not keyword.iskeyword(old):
        return None
    image.name = "image_input"
    for node in model.graph.node:
        node.input[:] = [image.name if name == old else name for name in node.input]
    return old


def fix_spatial_dims(model: Any, spec: Any) -> int:
    """Give the NCHW input's dynamic height and width the spec's size (onnx2tf converts for
    one size; the batch stays dynamic); returns how many dims were fixed."""
    weights = {t.name for t in model.graph.initializer}
    image = next(i for i in model.graph.input if i.name not in weights)
    dims = image.type.tensor_type.shape.dim
    fixed = 0
    for axis, size in ((2, spec.input_size), (3, spec.input_width)):
        if len(dims) == 4 and not dims[axis].HasField("dim_value"):
            dims[axis].dim_value = size
            fixed += 1
    return fixed


def check_detector(folder: Path, source: Artifact, spec: Any) -> dict[str, Any]:
    """Run the SavedModel and the ONNX on one seeded batch of 2 and compare: onnx2tf guesses
    layouts, so a detector it converted wrongly is refused here, not measured."""
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf

    pixels = np.random.default_rng(0).uniform(0, 255, (2, spec.channels, spec.input_size,
                                                       spec.input_width))
    mean, std = (np.reshape(v[:spec.channels], (-1, 1, 1)) for v in (spec.mean, spec.std))
    x = (pixels.round().astype(np.uint8) if spec.input_dtype == "uint8" else
         ((pixels - mean) / std).astype(np.float32))
    session = ort.InferenceSession(str(source.path), providers=["CPUExecutionProvider"])
    name = source.meta.get("output_name") or session.get_outputs()[0].name
    expected = session.run([name], {session.get_inputs()[0].name: x})[0]
    signature = tf.saved_model.load(str(folder)).signatures["serving_default"]
    (input_name,) = signature.structured_input_signature[1]
    with tf.device("/CPU:0"):  # the conversion's check, not a GPU's TF32 rounding
        outputs = signature(**{input_name: tf.constant(x.transpose(0, 2, 3, 1))})
    got = next((o.numpy() for o in outputs.values() if o.shape.rank == 3), np.zeros(0))
    transposed = got.shape != expected.shape and got.shape == expected.transpose(0, 2, 1).shape
    got = got.transpose(0, 2, 1) if transposed else got
    error = _mismatch(got, expected, spec.head) if got.shape == expected.shape else got.shape
    if not isinstance(error, float) or error > 1e-3:
        raise UserError(f"model {spec.name}: onnx2tf's SavedModel of {source.path.name} does "
                        f"not compute the ONNX model (error {error} on output "
                        f"{list(expected.shape)}); run it on onnxruntime or openvino")
    return {"max_error": error, "error": "|SavedModel - onnxruntime| / (1 + |onnxruntime|)",
            "batch": 2, "output_transposed": bool(transposed)}


def _mismatch(got: Any, expected: Any, head: str) -> float:
    """The largest error scaled by 1 + |expected|; nms rows are each matched to the nearest
    row of the other output, as scores a hair apart may swap ranks."""
    import numpy as np

    def scaled(a: Any, b: Any) -> Any:
        return np.abs(a - b) / (1 + np.abs(b))

    if head != "nms":
        return float(scaled(got, expected).max())
    pairs = [scaled(g[:, None], e[None]).max(-1) for g, e in zip(got, expected, strict=True)]
    return float(max(max(d.min(0).max(), d.min(1).max()) for d in pairs))


def _onnx2tf(onnx_input: Path, work: Path, spec: Any, detector: Artifact | None) -> str:
    """onnx2tf's conversion (its printout returned: it prints a whole model summary even when
    quiet). A detector it cannot convert (``detector``: its ONNX) is refused in one line."""
    import onnx2tf

    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter):
            onnx2tf.convert(input_onnx_file_path=str(onnx_input), output_folder_path=str(work),
                            output_signaturedefs=True, non_verbose=True,
                            not_use_onnxsim=True)  # the export is already optimised
    except Exception as exc:
        if detector is None:
            raise
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"model {spec.name}: onnx2tf cannot convert {detector.path.name} "
                        f"({type(exc).__name__}: {cause}); run it on onnxruntime or openvino, "
                        "or export the detector without the failing ops") from None
    return chatter.getvalue()


def _refuse_static_detector(spec: Any, source: Artifact) -> None:
    """onnx2tf converts a small static batch only with sample images it downloads: one line."""
    if is_detector(spec) and source.meta.get("static_batch"):
        raise UserError(f"model {spec.name}: {source.path.name} has a static batch of "
                        f"{source.meta['static_batch']}, which onnx2tf converts only with sample "
                        "images it downloads: export the detector with a dynamic batch "
                        "(Ultralytics: dynamic=True)")


def export_saved_model(spec: Any, model_path: str | Path | None = None) -> Artifact:
    """The model as a TF SavedModel (NHWC, dynamic batch), converted from its FP32 ONNX.

    ``model_path``: None (built-in weights), a torch state_dict, an .onnx file, or a user's
    SavedModel directory (used in place). A text model (its ONNX export) is converted at fixed
    token shapes by ``models.text_saved_model``.
    """
    if is_text(spec):
        from quantmark.models.text_saved_model import text_saved_model

        return text_saved_model(spec, model_path)
    if model_path is not None and Path(model_path).is_dir():
        return load_user_saved_model(model_path, spec)
    require_tensorflow("a TensorFlow/TFLite SUT")
    source = fp32_onnx(spec, model_path)
    if source.meta.get("layout") != "NCHW":
        raise UserError(f"model {spec.name}: onnx2tf needs an NCHW ONNX model; "
                        f"{source.path.name} is {source.meta.get('layout')}")
    _refuse_static_detector(spec, source)
    key = saved_model_key(source, spec)

    def build(folder: Path) -> Artifact:
        progress(f"converting {spec.name} ONNX -> TensorFlow SavedModel (onnx2tf, one-off) ...")
        work = folder / "onnx2tf"
        started = time.perf_counter()
        import onnx

        prepared = onnx.load(str(source.path))
        rewritten = zero_pad_maxpools_after_relu(prepared)
        fix_spatial_dims(prepared, spec)
        safe_input_name(prepared)
        detector = {"recipe": DETECTOR_RECIPE,
                    "shape_tensors_folded": fold_shape_arithmetic(prepared, spec),
                    "constants_aligned": align_constant_ranks(prepared)} \
            if is_detector(spec) else None
        onnx_input = folder / "onnx2tf-input.onnx"
        onnx.save(prepared, str(onnx_input))
        chatter = _onnx2tf(onnx_input, work, spec, source if detector else None)
        convert_s = time.perf_counter() - started
        if not (work / SAVED_MODEL_FILE).is_file():
            raise RuntimeError(f"onnx2tf wrote no SavedModel for {spec.name}: {chatter[-400:]}")
        for entry in work.iterdir():  # keep the SavedModel, drop onnx2tf's own .tflite files
            if entry.suffix != ".tflite":
                os.replace(entry, folder / entry.name)
        shutil.rmtree(work)
        onnx_input.unlink()
        progress(f"converted {spec.name} to SavedModel in {convert_s:.1f} s")
        meta = {"model": spec.name, "layout": "NHWC", "label_offset":
                source.meta.get("label_offset", 0), "num_classes":
                source.meta.get("num_classes"), "signature": "serving_default",
                "channels": spec.channels, "input_dtype": spec.input_dtype,
                "source_onnx": str(source.path), "source_onnx_key": source.key,
                "onnx2tf": dist_version("onnx2tf"), "recipe": SAVED_MODEL_RECIPE,
                "maxpools_zero_padded": rewritten}
        if detector is not None:
            detector["check"] = check_detector(folder, source, spec)
            meta.update(task=spec.task, head=spec.head, detector=detector)
        return Artifact(
            path=folder / SAVED_MODEL_FILE, format="saved_model", precision="fp32", key=key,
            weights=source.weights, source_hash=source.source_hash,
            times={**source.times, "tf_convert_s": round(convert_s, 3)}, meta=meta)

    return cached_build(spec.name, key, build)


def saved_model_hash(folder: Path) -> str:
    """Hash of every file of a SavedModel directory. saved_model.pb alone holds the graph but
    not the weights (those are in variables/): two models of one architecture share it, and
    keyed by it the TFLite cache would hand one model's conversion to the other."""
    return hash_json(hash_folder(folder))


def load_user_saved_model(path: str | Path, spec: Any) -> Artifact:
    """Validate a user's SavedModel directory: one image input of the spec's channels, size and
    type (NHWC or NCHW), a [N, classes(+1)] output."""
    folder = Path(path)
    where = f"model {spec.name}: --model-path {folder}"
    if not (folder / SAVED_MODEL_FILE).is_file():
        raise UserError(f"{where} is a directory without {SAVED_MODEL_FILE}; pass a TensorFlow "
                        "SavedModel directory")
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(folder))
        signature = loaded.signatures["serving_default"]
    except (KeyError, ValueError, OSError) as exc:
        raise UserError(f"{where}: cannot load its serving_default signature ({exc}); save "
                        "the model with tf.saved_model.save or keras Model.export") from None
    inputs = signature.structured_input_signature[1]
    if len(inputs) != 1:
        raise UserError(f"{where} has {len(inputs)} inputs; expected one image input of "
                        f"{wanted(spec)}")
    (input_name, input_spec), = inputs.items()
    dims = None if input_spec.shape.rank is None else list(input_spec.shape)
    layout = input_layout(dims or [], spec, where)
    check_dtype(input_spec.dtype.name, spec, where, dims or [])
    outputs = {name: list(out.shape) for name, out in signature.structured_outputs.items()}
    accepted = (spec.num_classes, spec.num_classes + 1)
    output_name = next((name for name, dims in outputs.items() if (
        detector_layout(dims, spec) is not None if is_detector(spec)
        else len(dims) == 2 and dims[1] in accepted)), None)
    if output_name is None:
        wants = (f"{spec.head} detector" if is_detector(spec) else
                 f"[N,{accepted[0]}] or [N,{accepted[1]}]")
        raise UserError(f"{where} has no {wants} output (found {list(outputs.values())})")
    classes = spec.num_classes if is_detector(spec) else int(outputs[output_name][1])
    folder_hash = saved_model_hash(folder)
    task = {"task": spec.task, "head": spec.head} if is_detector(spec) else {}
    return Artifact(
        path=folder / SAVED_MODEL_FILE, format="saved_model", precision="fp32", key=folder_hash,
        weights=f"user: SavedModel {folder.name}", source_hash=folder_hash, times={},
        meta={"model": spec.name, "layout": layout, "user_file": str(folder.resolve()),
              "label_offset": 1 if classes == spec.num_classes + 1 else 0,
              "channels": spec.channels, "input_dtype": spec.input_dtype,
              "num_classes": classes, "signature": "serving_default",
              "input_name": input_name, "output_name": output_name, "cached": False, **task},
    )
