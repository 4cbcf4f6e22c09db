"""The run's model as the user has it: a built-in architecture at its own size and class count,
or any image classifier file, with its input geometry read from the file where it states it.

``resolve_spec`` turns a ``RunConfig`` (or a diagnosis's config: the same fields) into the one
``ModelSpec`` every part of a run reads (the QSL's recipe, each framework's converter and
quantizer, the calibration samples, LoadGen's sample count). It is a pure function of the
config, so the parent (validating) and the test process (running) resolve the same spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.models import preprocessing
from quantmark.models.zoo import MODELS, ModelSpec, get_model

#: input channels quantmark feeds: grayscale or colour
CHANNELS = (1, 3)
SMALL_INPUT = 64  # up to this size an unknown model's default recipe stretches (CIFAR-style)
_SIZE = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$")


@dataclass(frozen=True)
class StatedShape:
    """What a model file says about its one image input and its class output."""

    layout: str  # "NCHW" | "NHWC"
    channels: int
    height: int | None  # None: dynamic, to be given with --input-size
    width: int | None
    dtype: str  # "float32" | "uint8"
    classes: int
    input_name: str
    output_name: str


def parse_input_size(value: str, flag: str = "--input-size") -> tuple[int, int] | None:
    """``"384"`` -> (384, 384); ``"224x320"`` -> (224, 320) (height x width); "" -> None."""
    if not value:
        return None
    match = _SIZE.match(str(value))
    if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
        raise UserError(f"{flag} {value!r}: give a size in pixels, e.g. 384 or 224x320 "
                        "(height x width)")
    height = int(match.group(1))
    return height, int(match.group(2) or height)


def _dims(value_info: Any) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in value_info.type.tensor_type.shape.dim]


def _channel_axis(dims: list[int | str], where: str) -> int:
    """1 (NCHW) or 3 (NHWC): the axis holding the smaller stated size."""
    first, last = dims[1], dims[3]
    if isinstance(first, int) and (not isinstance(last, int) or first <= last):
        return 1
    if isinstance(last, int):
        return 3
    raise UserError(f"{where} input is {dims}: its channel count is not stated; export it "
                    "with a fixed channel dimension (1 or 3)")


def inspect_onnx(path: str | Path, where: str, task: str = "classification") -> StatedShape:
    """The input geometry and class count an ONNX classifier (or, with ``task="detection"``, a
    detector) states; one line where it is not one image input and one output quantmark can
    feed and score."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{where} is not a valid ONNX model ({cause}); pass a file exported "
                        "with torch.onnx.export or tf2onnx") from None
    if not proto.graph.node and not proto.graph.input:
        raise UserError(f"{where} is not a valid ONNX model (it holds no graph: an empty or "
                        "cut-short file?); pass a file exported with torch.onnx.export or "
                        "tf2onnx")
    init_names = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in init_names]
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs)
        raise UserError(f"{where} has {len(inputs)} inputs ({names}); quantmark feeds one image "
                        "input: export the classifier with a single [N,C,H,W] or [N,H,W,C] input")
    inp = inputs[0]
    dims = _dims(inp)
    elem = inp.type.tensor_type.elem_type
    dtype = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.UINT8: "uint8"}.get(elem)
    if len(dims) != 4 or dtype is None:
        raise UserError(f"{where} input {inp.name!r} is {dims} of type "
                        f"{onnx.TensorProto.DataType.Name(elem)}; expected a float32 or uint8 "
                        "image batch [N,C,H,W] or [N,H,W,C]")
    axis = _channel_axis(dims, where)
    channels = dims[axis]
    if channels not in CHANNELS:
        raise UserError(f"{where} input {inp.name!r} {dims} has {channels} channels; quantmark "
                        "feeds images with 1 (grayscale) or 3 (RGB/BGR) channels: export the "
                        "model for one of those")
    spatial = dims[2:4] if axis == 1 else dims[1:3]
    shape = StatedShape(layout="NCHW" if axis == 1 else "NHWC", channels=int(channels),
                        height=spatial[0] if isinstance(spatial[0], int) else None,
                        width=spatial[1] if isinstance(spatial[1], int) else None,
                        dtype=dtype, classes=0, input_name=inp.name, output_name="")
    if task == "detection":
        return _detector_output(proto, shape, where)
    if task != "classification":  # another task reads its outputs itself: name the first
        return replace(shape, output_name=proto.graph.output[0].name)
    scores = [o for o in proto.graph.output if len(_dims(o)) == 2
              and isinstance(_dims(o)[1], int) and _dims(o)[1] >= 2
              and o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT]
    found = ", ".join(f"{o.name}{_dims(o)}" for o in proto.graph.output)
    if not scores:
        raise UserError(f"{where} has no float [N, classes] output (found {found}); export the "
                        "classifier's logits or probabilities as its output")
    if len(scores) > 1:  # which one is the answer is the user's to say, never a guess
        names = " and ".join(repr(o.name) for o in scores)
        raise UserError(f"{where} has {len(scores)} float [N, classes] outputs ({names}), and "
                        "quantmark scores one: keep only the classifier's, e.g. python -c "
                        f"\"import onnx.utils; onnx.utils.extract_model('{path}', 'one.onnx', "
                        f"['{inp.name}'], ['{scores[0].name}'])\" (or the other name)")
    output = scores[0]
    return replace(shape, classes=int(_dims(output)[1]), output_name=output.name)


def detector_head(dims: list[int | str]) -> tuple[str, int] | None:
    """("raw", classes) for Ultralytics' head ``[N, 4 + C, anchors]`` (or its transpose
    ``[N, anchors, 4 + C]``), ("nms", 0) for selected detections ``[N, K, 6]`` (x1, y1, x2,
    y2, score, class: the class count is not stated), None for any other shape. The anchors
    outnumber the rows (8,400 against 84 at 640 px), which tells the two axes apart."""
    if len(dims) != 3 or not all(isinstance(d, int) for d in dims[1:]):
        return None
    rows, columns = int(dims[1]), int(dims[2])
    if columns == 6 and rows > 6:
        return "nms", 0
    small, large = min(rows, columns), max(rows, columns)
    if small >= 5 and large > small:
        return "raw", small - 4
    return None


def _detector_output(proto: Any, shape: StatedShape, where: str) -> StatedShape:
    """The shape with a detector's first float 3-D output: its name and class count."""
    import onnx

    for output in proto.graph.output:
        head = detector_head(_dims(output))
        if head and output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            return replace(shape, classes=head[1], output_name=output.name)
    found = ", ".join(f"{o.name}{_dims(o)}" for o in proto.graph.output)
    raise UserError(f"{where} has no detector output (found {found}); export the raw head "
                    "[N, 4+classes, anchors] (Ultralytics' format=onnx) or selected detections "
                    "[N, K, 6] (x1, y1, x2, y2, score, class)")


def model_size(stated: StatedShape, given: tuple[int, int] | None, where: str
               ) -> tuple[int, int]:
    """The model's height and width: stated, given, or both (and then the same); every
    task's model file is sized by this one rule."""
    height = stated.height or (given[0] if given else None)
    width = stated.width or (given[1] if given else None)
    if height is None or width is None:
        raise UserError(f"{where} has a dynamic input size; give it with --input-size HxW "
                        "(the size it was trained at)")
    if given and (height, width) != given:
        raise UserError(f"{where} takes {height}x{width} images, not --input-size "
                        f"{given[0]}x{given[1]}; drop --input-size or export the model at "
                        "that size")
    return height, width


def _classes(stated: int, flag: int, where: str) -> int:
    """Classes scored: the flag's, the model's, or ImageNet's 1000 for a 1001-output model (a
    background class first)."""
    if flag:
        if stated not in (flag, flag + 1):
            raise UserError(f"{where} outputs {stated} classes, not --num-classes {flag} (or "
                            f"{flag} + a background class); drop --num-classes or fix it")
        return flag
    return 1000 if stated == 1001 else stated


def model_file_spec(config: Any) -> ModelSpec:
    """A spec for a user's ONNX file: its own geometry and classes, the named model's recipe
    (a built-in ``--model``) or a default convention named in every output."""
    where = f"--model-path {config.model_path}"
    stated = inspect_onnx(config.model_path, where)
    height, width = model_size(stated, parse_input_size(config.input_size), where)
    known = MODELS.get(config.model)
    base = known or ModelSpec(name=config.model, mean=(0.0,), std=(1.0,), builder=_no_builder)
    spec = replace(_at_size(base, height, width), channels=stated.channels,
                   input_dtype=stated.dtype,
                   num_classes=_classes(stated.classes, config.num_classes, where))
    default = None
    if known is None:
        default = ("raw" if stated.dtype == "uint8" else
                   "cifar10" if max(height, width) <= SMALL_INPUT else "imagenet")
    return _with_recipe(spec, config, default, where)


def _at_size(spec: ModelSpec, height: int, width: int) -> ModelSpec:
    """``spec`` at another input size, its short side keeping the spec's crop ratio."""
    if (height, width) == (spec.input_size, spec.input_width):
        return spec
    ratio = spec.resize_short / spec.input_size
    return replace(spec, input_size=height, input_width=width,
                   resize_short=max(height, width, round(min(height, width) * ratio)))


def _no_builder(num_classes: int) -> Any:
    raise UserError("this model comes from its --model-path file: it has no built-in torch "
                    "architecture; the torch-* SUTs need a built-in --model with a state_dict")


def _with_recipe(spec: ModelSpec, config: Any, default: str | None,
                 where: str) -> ModelSpec:
    data = dict(config.preprocess)
    if spec.input_dtype == "uint8":
        data = {k: v for k, v in data.items() if k not in ("mean", "std", "scale")}
    if data or default:
        spec = preprocessing.apply(spec, data, default=None if data.get("preset") else default)
    if spec.channels == 1 and len(spec.mean) != 1:
        if spec.input_dtype == "uint8":
            return replace(spec, mean=(0.0,), std=(1.0,))
        raise UserError(f"{where} takes 1-channel (grayscale) images, but the recipe has 3 "
                        "means; give --mean M --std S with one value each (or --preprocess "
                        "unit)")
    return spec


def resolve_spec(config: Any) -> ModelSpec:
    """The ``ModelSpec`` this run uses: the built-in model at ``--input-size`` and
    ``--num-classes`` (its torch weights export at that size), or the ``--model-path`` ONNX
    file's own, with the run's preprocessing recipe applied."""
    _no_text_settings(config)
    if config.model_path and str(config.model_path).endswith(".onnx") \
            and Path(config.model_path).is_file():
        return model_file_spec(config)
    spec = get_model(config.model)
    size = parse_input_size(config.input_size)
    if size:
        spec = _at_size(spec, *size)
    if config.num_classes and config.num_classes != spec.num_classes:
        # another class count: the shipped weights' classifier does not fit (seeded random
        # weights, or the user's state_dict)
        spec = replace(spec, num_classes=config.num_classes, pretrained_source=None,
                       pretrained_package="")
    return _with_recipe(spec, config, None, f"model {spec.name}")


def _no_text_settings(config: Any) -> None:
    """A text model's settings on an image model would be ignored without a word: one line
    (a sweep refuses them the same way, ``sweep.lengths.check``)."""
    given = [(flag, value) for flag, value in (
        ("--seq-len", getattr(config, "seq_len", 0)), ("--padding", getattr(config, "padding", "")),
        ("--tokenizer", getattr(config, "tokenizer", None))) if value]
    if given:
        flag, value = given[0]
        raise UserError(f"{flag} {value} is a text model's setting, and model {config.model} "
                        "takes images: drop it (an image model's size is --input-size)")


def resized_weights_note(spec: ModelSpec) -> str | None:
    """What a run at another size or class count says about the weights it got: pretrained
    weights transfer across input sizes (the convolutions and the pooled classifier do not
    depend on it), not across class counts."""
    base = MODELS.get(spec.name)
    if base is None or (base.input_size, base.input_width, base.num_classes) == \
            (spec.input_size, spec.input_width, spec.num_classes):
        return None
    if spec.pretrained_source:
        return (f"{spec.name} at {spec.input_size}x{spec.input_width}: its pretrained weights "
                f"(trained at {base.input_size}) transfer; accuracy differs from the trained "
                "size")
    return (f"{spec.name} at {spec.input_size}x{spec.input_width}, {spec.num_classes} classes: "
            "seeded random weights unless --model-path gives a state_dict")


def open_run_dataset(config: Any, spec: ModelSpec) -> Any:
    """The run's dataset: ``--dataset-path`` (a val_map folder or class folders, its names
    mapped by ``--labels``) or the model's built-in one, checked against the classes the model
    scores (one line naming both where they do not fit)."""
    from quantmark.qsl import open_dataset
    from quantmark.qsl.label_space import check_classes

    dataset = open_dataset(config.dataset_path, labels=config.labels,
                           builtin=spec.builtin_dataset)
    check_classes(dataset, spec.num_classes, spec.name)
    return dataset


def file_model_name(model_path: str | None) -> str | None:
    """The name a run of a user's ONNX file goes by when no ``--model`` is given: the file's
    stem, where its input or classes are not the default model's (a CIFAR network is not
    EfficientNet-Lite0, and its results say so); None otherwise (the default model's name and
    recipe, as before)."""
    from quantmark.models.zoo import DEFAULT_MODEL

    if not model_path or not str(model_path).endswith(".onnx") or \
            not Path(model_path).is_file():
        return None
    try:
        stated = inspect_onnx(model_path, f"--model-path {model_path}")
    except UserError:  # not a classifier: another task's model (a detector) goes by its
        if not _other_task_model(model_path):  # a detector or text encoder goes by its
            return None  # name; a file no task reads is the run's validation's to name
        stated = None
    default = MODELS[DEFAULT_MODEL]
    if stated is not None and (stated.channels, stated.height, stated.width, stated.dtype) == \
            (3, default.input_size, default.input_width, "float32") and \
            stated.classes in (default.num_classes, default.num_classes + 1):
        return None
    # an export named model.onnx (Optimum's, a text encoder's folder) goes by its folder
    stem = Path(model_path).stem
    if stem == "model" and Path(model_path).resolve().parent.name:
        stem = Path(model_path).resolve().parent.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "model"
    return f"{name}-file" if name in MODELS else name


def _other_task_model(model_path: str) -> bool:
    """The file is a detector's or a text encoder's (read, not run)."""
    from quantmark.models.text_graph import read_text_model

    where = f"--model-path {model_path}"
    for read in (lambda: inspect_onnx(model_path, where, "detection"),
                 lambda: read_text_model(model_path, where)):
        try:
            read()
            return True
        except UserError:
            continue
    return False
