"""The built-in detector ``digits-detect``: a small anchor-free CNN that quantmark trains itself,
once, on the built-in detection set's training canvases (``canvases``), exported as Ultralytics
exports YOLOv8/11. No installed package ships real YOLO weights: this one is trained at first
use on real data (handwritten scans), not pretrained.

Its ONNX has one output ``output0 [N, 4 + 10, A]``: rows 0-3 the box (cx, cy, w, h) in input
pixels, rows 4.. the per-class sigmoid scores, A anchors over strides 8 and 16; NMS is left
outside, as ``yolo export`` leaves it. Input ``images [N, 3, S, S]``, RGB / 255, S = 96 as
trained or any multiple of 16 (the anchors are rebuilt for S, not saved; one file per size).
Only ops every converter and quantizer here handles: Conv (BatchNorm folded at export), SiLU,
Sigmoid, Reshape, Concat, Add/Sub/Mul. Boxes are distances from each anchor point to the four
edges, ``sigmoid * REACH * stride``; that decode is a module of its own (``decode``), which
INT8 quantizers keep float. Box and class logits come from separate convolutions, so each
has its own INT8 scale: with one convolution for both, torch-int8 (decode float) lost 6.8 mAP
points to FP32 on the evaluation canvases; the same weights split into two convolutions, 2.0.

Trained deterministically (``train``): fixed seeds, one intra-op thread, deterministic
algorithms, seeded minibatch order, a fixed number of epochs (about 70 s of one core; two
threads were 1.8x faster on an idle machine but 17x slower beside one busy process, measured).
Targets are assigned by centre: a box goes to the stride its size matches (both in an overlap
band) and to the anchors inside it near its centre (the smallest box wins an anchor two boxes
claim); class scores learn the IoU of the predicted box (BCE), boxes learn GIoU.

The weights' identity is the hash of ``training_recipe`` (this file's source, the recipe, the
dataset's identity, torch's version); the files are cached under it with their sha256 in a
seal that every use checks (a changed or missing file is retrained with one warning line).
The zoo's trainer interface (``trained_identity``, ``trained_description``, ``trained_file``)
serves the torch SUTs.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

from . import architecture, canvases, fitting

if TYPE_CHECKING:  # torch is imported lazily
    from torch import nn

    from quantmark.models.zoo import ModelSpec

from .architecture import (  # noqa: F401 - the detector's public names, as before the split
    INPUT_SIZE,
    MODEL_NAME,
    NUM_CLASSES,
    OPSET,
    REACH,
    RECIPE,
    STRIDES,
    anchor_grid,
    build_module,
    check_size,
    sized_builder,
)
from .fitting import train

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- the cache
def training_recipe() -> dict[str, Any]:
    """Everything the trained weights depend on, computed without torch: the recipe, the
    head's geometry, the dataset's identity, this file's and the dataset code's source."""
    code = [Path(__file__), Path(canvases.__file__), Path(architecture.__file__),
            Path(fitting.__file__)]
    return {"recipe": RECIPE, "model": MODEL_NAME, "input_size": INPUT_SIZE,
            "num_classes": NUM_CLASSES, "strides": list(STRIDES), "reach": REACH,
            "opset": OPSET, "dataset": canvases.builtin_detection_identity(),
            "code": {path.name: hash_file(path, 64) for path in code},
            "torch": dist_version("torch")}


def recipe_hash() -> str:
    return hash_json(training_recipe(), 16)


def _check_spec(spec: ModelSpec | None) -> None:
    """Refuse a spec these weights cannot serve (another class count, channels or input)."""
    if spec is None:
        return
    got = (spec.num_classes, spec.channels, spec.input_dtype, spec.input_width)
    if got != (NUM_CLASSES, 3, "float32", spec.input_size):
        raise UserError(f"model {spec.name} is trained by quantmark for {NUM_CLASSES} classes "
                        "and square 3-channel float32 inputs, not (classes, channels, dtype, "
                        f"width) {got}; drop --num-classes, or pass your own --model-path")
    check_size(spec.input_size)


def trained_identity(spec: ModelSpec | None = None) -> dict[str, Any]:
    """The weights' identity for cache keys (``zoo.weights_identity``): the recipe's hash and
    seed. One for every input size: the weights hold no anchors."""
    _check_spec(spec)
    return {"kind": "trained", "recipe": recipe_hash(), "seed": RECIPE["seed"]}


def trained_description(spec: ModelSpec | None = None) -> str:
    """What the weights are, as written into results."""
    _check_spec(spec)
    size = INPUT_SIZE if spec is None else spec.input_size
    return (f"trained by quantmark on the built-in digit canvases ({canvases.TRAIN_IMAGES} "
            f"train canvases) at {INPUT_SIZE} px, seed {RECIPE['seed']} (recipe "
            f"{recipe_hash()}), run at {size} px; evaluated on the {canvases.EVAL_IMAGES} "
            f"held-out canvases ({canvases.EVAL_OBJECTS} scans of the held-out digits)")


def trained_file(spec: ModelSpec | None = None) -> Path:
    """The trained state_dict file, verified by sha256; trained first when absent or changed."""
    _check_spec(spec)
    return _trained()["state"]


def builtin_detector_onnx(size: int | None = None) -> Path:
    """The trained detector as ONNX at ``size`` px (None: the trained 96): ``images`` ->
    ``output0 [N, 14, A]``, verified by sha256; trained and exported first when absent or
    changed. Each size is its own file, sealed under the state_dict it was exported from."""
    size = INPUT_SIZE if size is None else check_size(size)
    files = _trained()
    if size == INPUT_SIZE:
        return files["onnx"]
    seal = files["state"].with_name(f"{files['state'].stem}-{size}px.json")
    found, problem = _verified(seal, ("onnx",))
    if found is not None:
        return found["onnx"]
    if problem is not None:
        log.warning("%s at %d px failed verification: %s; exporting it again", MODEL_NAME, size,
                    problem)
    data = export_bytes(builtin_detector_module(size))
    return _seal(seal, {"size": size, "state": files["state"].name}, [("onnx", data)])["onnx"]


def builtin_detector_module(size: int = INPUT_SIZE) -> nn.Module:
    """The trained detector for ``size`` px inputs as a torch module in eval mode, from the
    same verified training as the ONNX files."""
    import torch

    state = torch.load(_trained()["state"], map_location="cpu", weights_only=True)
    model = build_module(size=size)
    model.load_state_dict(state)
    return model.eval()


def _trained() -> dict[str, Path]:
    """{"state": the state_dict file, "onnx": its export}, each checked against the sha256
    its seal records; trained once when either is absent or differs."""
    seal = cache_dir("trained-weights") / f"{MODEL_NAME}-{recipe_hash()}.json"
    files, problem = _verified(seal)
    if files is not None:
        return files
    if problem is not None:
        log.warning("trained %s failed verification: %s; retraining it", MODEL_NAME, problem)
    else:
        log.info("training %s on the built-in digit canvases (one-off, a minute or two) ...",
                 MODEL_NAME)
    root = canvases.builtin_detection_root()
    started, cpu = time.perf_counter(), time.process_time()
    model = train(root)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    log.info("trained %s in %.1f s (%.1f s of CPU)", MODEL_NAME, seconds, cpu)
    record = {"train_seconds": round(seconds, 2), "train_cpu_seconds": round(cpu, 2),
              "recipe": training_recipe()}
    return _seal(seal, record, [("state", _state_bytes(model)), ("onnx", export_bytes(model))])


def _seal(seal: Path, record: dict[str, Any], items: list[tuple[str, bytes]]
          ) -> dict[str, Path]:
    """Write each (kind, bytes) beside ``seal``, named by content (a racing process writes its
    own file, and each seal names its own), then the seal: ``record`` + each file's sha256."""
    for kind, data in items:
        digest = hashlib.sha256(data).hexdigest()
        name = f"{seal.stem}-{digest[:16]}.{'pt' if kind == 'state' else kind}"
        atomic_write_bytes(seal.with_name(name), data)
        record[kind] = {"file": name, "sha256": digest}
    atomic_write_json(seal, record)
    return {kind: seal.with_name(record[kind]["file"]) for kind, _ in items}


def _verified(seal: Path, kinds: tuple[str, ...] = ("state", "onnx")
              ) -> tuple[dict[str, Path] | None, str | None]:
    """(the files, None) when ``seal`` names files with their recorded sha256; else (None,
    what is wrong), or (None, None) when nothing was ever trained."""
    try:
        record = json.loads(seal.read_text())
        named = {kind: (str(record[kind]["file"]), str(record[kind]["sha256"]))
                 for kind in kinds}
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{seal.name} cannot be read ({type(exc).__name__})"
    files = {}
    for kind, (name, digest) in named.items():
        path = seal.with_name(name)
        if Path(name).name != name or not path.is_file():
            return None, f"{name} is missing"
        if hash_file(path, 64) != digest:
            return None, f"{name} differs from what was trained"
        files[kind] = path
    return files, None


def _state_bytes(model: nn.Module) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def export_bytes(model: nn.Module) -> bytes:
    """``model`` as ONNX bytes, opset 17, dynamic batch (TorchScript exporter: BatchNorm
    folded into the convolutions, the plain ops listed above). The output states its rows
    and anchors, as Ultralytics' export does: the exporter leaves them symbolic, and a
    detector's head is recognised by them."""
    import warnings

    import onnx
    import torch

    buffer = io.BytesIO()
    example = torch.zeros(1, 3, model.size, model.size)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        stated = model(example).shape[1:]
        torch.onnx.export(model, (example,), buffer, input_names=["images"],
                          output_names=["output0"], opset_version=OPSET,
                          dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}},
                          dynamo=False)
    proto = onnx.load_from_string(buffer.getvalue())
    for dim, value in zip(proto.graph.output[0].type.tensor_type.shape.dim[1:], stated,
                          strict=True):
        dim.dim_value = int(value)
    return proto.SerializeToString()
