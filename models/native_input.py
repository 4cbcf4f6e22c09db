"""A model file's image input, checked against the run's spec, for the formats quantmark takes
natively besides ONNX (OpenVINO IR, .tflite, SavedModel).

An ONNX file's geometry becomes the spec (``quantmark.models.workload``); these formats run as
they are, so what they take must be what the spec (the built-in model, ``--input-size``) feeds:
its channels (1 or 3), height, width and input type. Each framework reads its file's input
shape (dynamic dims as None) and asks ``input_layout`` which layout that shape is; anything
else is one line naming both shapes and the fix. Shared here, below the framework folders, so
that none imports another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quantmark.ground.errors import UserError

#: input channels quantmark feeds: grayscale or colour
CHANNELS = (1, 3)
Dim = int | None  # None: a dynamic dimension


def show(dims: Sequence[Dim]) -> str:
    """``[?,3,224,224]``: a shape as the messages write it."""
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def wanted(spec: Any) -> str:
    """The input ``spec`` feeds, as the messages write it (CxHxW and type)."""
    return f"{spec.input_dtype} {spec.channels}x{spec.input_size}x{spec.input_width} (CxHxW)"


def _candidates(dims: Sequence[Dim]) -> dict[str, tuple[Dim, Dim, Dim]]:
    """(channels, height, width) of a 4-D shape read as NCHW and as NHWC."""
    return {"NCHW": (dims[1], dims[2], dims[3]), "NHWC": (dims[3], dims[1], dims[2])}


def _fits(chw: tuple[Dim, Dim, Dim], spec: Any) -> bool:
    c, h, w = chw
    return c == spec.channels and h in (None, spec.input_size) and w in (None, spec.input_width)


def input_layout(dims: Sequence[Dim], spec: Any, where: str) -> str:
    """"NCHW" or "NHWC": the layout in which ``dims`` is ``spec``'s channels, height and width
    (a dynamic height or width fits any). A UserError (one line) names the file's input and the
    spec's where it is not: another size, other channels, or not an image batch at all."""
    if len(dims) != 4:
        raise UserError(f"{where} input is {show(dims)}; quantmark feeds one image batch "
                        "[N,C,H,W] or [N,H,W,C]: export the classifier with that input")
    candidates = _candidates(dims)
    for layout, chw in candidates.items():  # NCHW first: the torch/ONNX convention
        if _fits(chw, spec):
            return layout
    stated = [(layout, chw) for layout, chw in candidates.items() if chw[0] in CHANNELS]
    if not stated:
        counts = [c for c, _, _ in candidates.values() if c is not None]
        if not counts:
            raise UserError(f"{where} input {show(dims)} states no channel count; export it "
                            "with a fixed channel dimension (1 or 3)")
        raise UserError(f"{where} input {show(dims)} has {min(counts)} channels; quantmark "
                        "feeds images with 1 (grayscale) or 3 (RGB/BGR) channels: export the "
                        "model for one of those")
    layout, (c, h, w) = stated[0]
    size = f"{h or '?'}x{w or '?'}"
    fix = (f"pass --input-size {size}" if c == spec.channels and h and w else
           "give the model's ONNX file (quantmark reads its geometry from it)")
    raise UserError(f"{where} takes {c}x{size} (CxHxW, {layout} {show(dims)}) images, but "
                    f"model {spec.name} feeds {wanted(spec)}: {fix}, or export the model for "
                    f"the spec's input")


def check_dtype(dtype: str, spec: Any, where: str, dims: Sequence[Dim]) -> None:
    """The file's input type must be the spec's: float32 (normalised) or uint8 (raw pixels)."""
    if dtype != spec.input_dtype:
        what = ("raw uint8 pixels" if dtype == "uint8" else
                f"{dtype} values" if dtype != "float32" else "normalised float32 values")
        raise UserError(f"{where} input {show(dims)} takes {what}, but model {spec.name} feeds "
                        f"{wanted(spec)}: export the model with a {spec.input_dtype} input, or "
                        "give its ONNX file (quantmark reads the input type from it)")
