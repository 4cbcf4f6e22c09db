"""Torch -> ONNX export (cached) and validation of user-supplied ONNX files.

Exporter choice: the torch.export-based ("dynamo") exporter. It is torch's supported path
(the TorchScript exporter is deprecated), and its graphs are cleaner: EfficientNet's
TF-"SAME" ZeroPad2d is folded into Conv pads and BN into Conv, where the legacy exporter leaves
Shape/Gather/Pad chains that ORT quantization cannot fuse. It costs ~10 s per model on 2
cores (legacy: 1-5 s), paid once thanks to the cache. Outputs match torch to ~1e-5 relative.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnxruntime

if TYPE_CHECKING:
    import torch
from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.zoo import ModelSpec, build_torch_model, weights_description, weights_identity

OPSET = 20  # the dynamo exporter's native opset; ORT 1.31 runs and quantizes it
INPUT_NAME = "input"
OUTPUT_NAME = "logits"
EXPORT_RECIPE = {"exporter": "dynamo", "opset": OPSET, "dynamic_batch": True,
                 "external_data": False, "optimize": True, "version": 1}
MAX_BATCH = 4096


def export_key(spec: ModelSpec, weights_path: str | Path | None = None) -> str:
    """Cache key: model, weights identity, tool versions and the export recipe."""
    return hash_json({
        "what": "onnx-export", "model": spec.name, "num_classes": spec.num_classes,
        "input_size": spec.input_size, **geometry_changes(spec),
        "weights": weights_identity(spec, weights_path),
        "torch": dist_version("torch"), "onnx": onnx.__version__, "recipe": EXPORT_RECIPE,
    })


def geometry_changes(spec: ModelSpec) -> dict[str, Any]:
    """The input geometry a spec changes from the square 3-channel default: only these enter
    the cache key, so every built-in model keeps its key."""
    changes = {"input_width": spec.input_width, "channels": spec.channels}
    defaults = {"input_width": spec.input_size, "channels": 3}
    return {k: v for k, v in changes.items() if v != defaults[k]}


def export_onnx(spec: ModelSpec, weights_path: str | Path | None = None) -> Artifact:
    """FP32 ONNX for ``spec``: input "input" [batch,C,H,W], output "logits" [batch,classes]."""
    key = export_key(spec, weights_path)

    def build(folder: Path) -> Artifact:
        progress(f"exporting {spec.name} to ONNX (one-off, then cached) ...")
        t0 = time.perf_counter()
        model, weights = build_torch_model(spec, weights_path)
        build_s = time.perf_counter() - t0
        out = folder / f"{spec.name}-fp32.onnx"
        t1 = time.perf_counter()
        _dynamo_export(model, spec, out)
        export_s = time.perf_counter() - t1
        onnx.checker.check_model(str(out), full_check=True)
        progress(f"exported {spec.name} in {export_s:.1f} s")
        return Artifact(
            path=out, format="onnx", precision="fp32", key=key, weights=weights,
            source_hash=hash_json(weights_identity(spec, weights_path)),
            times={"build_torch_s": round(build_s, 3), "export_s": round(export_s, 3)},
            meta={"model": spec.name, "input_name": INPUT_NAME, "output_name": OUTPUT_NAME,
                  "layout": "NCHW", "label_offset": spec.label_offset,
                  "num_classes": spec.num_classes, "opset": OPSET, "recipe": EXPORT_RECIPE,
                  "torch": dist_version("torch"), "onnx": onnx.__version__,
                  "sha256": hash_file(out)},
        )

    return cached_build(spec.name, key, build)


def _dynamo_export(model: torch.nn.Module, spec: ModelSpec, out: Path) -> None:
    import torch

    # batch 2: a batch of 1 may be specialised away
    example = torch.zeros(2, spec.channels, spec.input_size, spec.input_width)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    # the exporter warns about absent torchvision ops and internal deprecations: not ours
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, (example,), str(out), dynamo=True, external_data=False,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: batch},), opset_version=OPSET, optimize=True,
                verbose=False,
            )
    finally:
        quiet.setLevel(level)
    proto = onnx.load(str(out))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    if dims[0].dim_value:  # a static batch would silently break the SUT's batching
        raise RuntimeError(f"export of {spec.name} lost the dynamic batch dimension")


# --------------------------------------------------------------------------- user ONNX


def load_user_onnx(path: str | Path, spec: ModelSpec) -> Artifact:
    """Validate a user's ONNX file (``--model-path``) for ``spec``; UserError (one line) if unfit.

    Accepts one float32 or uint8 image input, NCHW or NHWC, with the spec's channels, height
    and width (``quantmark.models.workload`` read them from this file, or from flags where the
    file leaves them dynamic), and takes the first float output [N, classes] or
    [N, classes+1] (a background class: meta label_offset=1). The file is used in place.
    """
    from quantmark.models.workload import inspect_onnx

    p = Path(path)
    where = f"model {spec.name}: --model-path {p}"
    if not p.is_file():
        raise UserError(f"{where} not found; pass an existing .onnx file")
    try:
        onnx.checker.check_model(str(p))
    except Exception as exc:
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{where} is not a valid ONNX model ({cause}); "
                        "pass a file exported with torch.onnx.export or tf2onnx") from None
    stated = inspect_onnx(p, where, spec.task)
    want = (spec.channels, spec.input_size, spec.input_width)
    got = (stated.channels, stated.height or spec.input_size, stated.width or spec.input_width)
    if got != want or stated.dtype != spec.input_dtype:
        raise UserError(f"{where} takes {stated.dtype} {got[0]}x{got[1]}x{got[2]} (CxHxW) "
                        f"images, not the {spec.input_dtype} {want[0]}x{want[1]}x{want[2]} "
                        f"model {spec.name} takes; pass the model's own --model (or none)")
    accepted = (spec.num_classes, spec.num_classes + 1)
    if spec.task == "detection":  # a detector's classes sit in its head, no background class
        accepted = (spec.num_classes,) if stated.classes else (0,)
    elif spec.task != "classification":  # another task's outputs are its own to read
        accepted = (stated.classes,)
    if stated.classes not in accepted:
        raise UserError(f"{where} outputs {stated.classes} classes; model {spec.name} scores "
                        f"{spec.num_classes} (or {spec.num_classes} + a background class): "
                        "pass --num-classes or the model's own --model")
    proto = onnx.load(str(p), load_external_data=False)
    in_dims = next(i for i in proto.graph.input if i.name == stated.input_name)
    batch = in_dims.type.tensor_type.shape.dim[0]
    file_hash = hash_file(p)
    op_types = {n.op_type for n in proto.graph.node}
    quantized = bool(op_types & {"QuantizeLinear", "QLinearConv", "ConvInteger", "MatMulInteger"})
    meta: dict[str, Any] = {
        "model": spec.name, "user_file": str(p.resolve()), "input_name": stated.input_name,
        "output_name": stated.output_name, "layout": stated.layout,
        "static_batch": batch.dim_value if batch.HasField("dim_value") and batch.dim_value > 0
        else None,
        "label_offset": max(0, stated.classes - spec.num_classes),
        "num_classes": stated.classes or spec.num_classes, "task": spec.task, "head": spec.head,
        "channels": stated.channels, "input_dtype": stated.dtype,
        "opset": next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                      None),
        "onnxruntime": onnxruntime.__version__, "sha256": file_hash, "cached": False,
    }
    return Artifact(
        path=p, format="onnx", precision="int8" if quantized else "fp32", key=file_hash,
        weights=weights_description(spec, p), source_hash=file_hash, times={}, meta=meta,
    )
