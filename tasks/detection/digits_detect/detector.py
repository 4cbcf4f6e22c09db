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

import functools
import hashlib
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

from . import canvases

if TYPE_CHECKING:  # torch is imported lazily
    import torch
    from torch import nn

    from quantmark.models.zoo import ModelSpec

log = logging.getLogger(__name__)

MODEL_NAME = "digits-detect"
INPUT_SIZE = canvases.CANVAS
NUM_CLASSES = 10
STRIDES = (8, 16)
REACH = 4.0  # the farthest box edge from its anchor point, in strides
# a box whose longer side is below SPLIT_PX[1] is learned at stride 8, at or above SPLIT_PX[0]
# at stride 16 (both in between)
SPLIT_PX = (20.0, 28.0)
CENTRE_RADIUS = 1.5  # anchors within this many strides of a box's centre learn it
OPSET = 17
RECIPE: dict[str, Any] = {"optimizer": "AdamW", "lr": 3e-3, "weight_decay": 5e-4, "epochs": 10,
                          "batch_size": 32, "seed": 0, "threads": 1, "box_gain": 2.0,
                          "schedule": "linear warm-up 1 epoch, cosine to 5%"}


def anchor_grid(size: int = INPUT_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Anchor points ``[A, 2]`` (x, y in input pixels, cell centres) and strides ``[A]``,
    stride 8's cells first, each row by row: the order of the output's A axis."""
    points, strides = [], []
    for stride in STRIDES:
        cells = size // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        points.append((np.stack([xs, ys], -1).reshape(-1, 2) + 0.5) * stride)
        strides.append(np.full(cells * cells, stride))
    return np.concatenate(points).astype(np.float32), np.concatenate(strides).astype(np.float32)


def check_size(size: int) -> int:
    """``size`` if the detector runs at it: a multiple of its coarsest stride, so both anchor
    grids tile the input (the trained weights hold no anchors: any such size loads them)."""
    step = STRIDES[-1]
    if isinstance(size, int) and not isinstance(size, bool) and size >= step and not size % step:
        return size
    low = max(step, int(size) // step * step)
    nearest = sorted({low, low + step} if int(size) > low else {low})
    raise UserError(f"{MODEL_NAME} takes square inputs whose side is a multiple of {step} px, "
                    f"not {size}: use {' or '.join(map(str, nearest))}")


def build_module(num_classes: int = NUM_CLASSES, size: int = INPUT_SIZE) -> nn.Module:
    """The detector for ``size`` x ``size`` inputs with fresh weights (seed the RNG first for
    repeatable ones)."""
    import torch
    from torch import nn

    check_size(size)

    def conv(cin: int, cout: int, stride: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.SiLU())

    class Decode(nn.Module):
        """The head's post-processing (boxes in pixels beside 0..1 scores), a module of its own
        so an INT8 quantizer can keep it float. Its anchors follow the input size and are not
        saved (non-persistent): the trained state_dict loads at any size."""

        def __init__(self) -> None:
            super().__init__()
            points, strides = anchor_grid(size)
            self.register_buffer("points", torch.from_numpy(points.T.copy()),  # [2, A]
                                 persistent=False)
            self.register_buffer("reach", torch.from_numpy(strides * REACH)[None],  # [1, A]
                                 persistent=False)

        def corners(self, raw: torch.Tensor) -> torch.Tensor:
            """x1, y1, x2, y2 ``[N, 4, A]`` in pixels from the logits ``[N, 4 + C, A]``."""
            ltrb = raw[:, :4].sigmoid() * self.reach
            return torch.cat((self.points - ltrb[:, :2], self.points + ltrb[:, 2:]), 1)

        def forward(self, maps: list[torch.Tensor]) -> torch.Tensor:
            raw = flat(maps)
            box = self.corners(raw)
            xywh = torch.cat(((box[:, :2] + box[:, 2:]) * 0.5, box[:, 2:] - box[:, :2]), 1)
            return torch.cat((xywh, raw[:, 4:].sigmoid()), 1)

    class DigitsDetector(nn.Module):
        """Backbone /8 and /16, one head per stride with separate box and class prediction
        convolutions (as Ultralytics' cv2 and cv3): [N, 4 + C, A] as Ultralytics exports."""

        def __init__(self) -> None:
            super().__init__()
            self.size = size
            self.p3 = nn.Sequential(conv(3, 16, 2), conv(16, 32, 2), conv(32, 32),
                                    conv(32, 64, 2), conv(64, 64))
            self.p4 = nn.Sequential(conv(64, 96, 2), conv(96, 96))
            self.heads = nn.ModuleList([conv(c, c) for c in (64, 96)])
            self.boxes = nn.ModuleList([nn.Conv2d(c, 4, 1) for c in (64, 96)])
            self.scores = nn.ModuleList([nn.Conv2d(c, num_classes, 1) for c in (64, 96)])
            self.decode = Decode()
            for score in self.scores:  # start with few confident scores (rare positives)
                nn.init.constant_(score.bias, -4.0)

        def maps(self, x: torch.Tensor) -> list[torch.Tensor]:
            """The prediction convolutions' outputs, per stride the boxes ``[N, 4, h, w]``
            then the classes ``[N, C, h, w]``."""
            p3 = self.p3(x)
            f3, f4 = self.heads[0](p3), self.heads[1](self.p4(p3))
            return [self.boxes[0](f3), self.scores[0](f3), self.boxes[1](f4), self.scores[1](f4)]

        def raw(self, x: torch.Tensor) -> torch.Tensor:
            """The heads' logits ``[N, 4 + C, A]`` (boxes before decoding, scores before
            the sigmoid): what training reads."""
            return flat(self.maps(x))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.decode(self.maps(x))

    return DigitsDetector()


def flat(maps: list[torch.Tensor]) -> torch.Tensor:
    """Box and class maps (``maps``' order) as one ``[N, 4 + C, A]`` in the anchors' order,
    each flattened before any concatenation: boxes and scores first meet in the decode."""
    import torch

    rows = [m.flatten(2) for m in maps]
    return torch.cat([torch.cat(rows[i:i + 2], 1) for i in range(0, len(rows), 2)], 2)


def sized_builder(size: int) -> Callable[[int], nn.Module]:
    """The zoo's ``builder(num_classes)`` for ``size`` x ``size`` inputs (untrained)."""
    check_size(size)
    return functools.partial(build_module, size=size)


# ----------------------------------------------------------------------------- targets
def assign(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each anchor's object for one image: (the object's index or -1 ``[A]``, its box as
    x1, y1, x2, y2 ``[A, 4]``), from the image's COCO (x, y, w, h) ``boxes``."""
    points, strides = anchor_grid()
    owner = np.full(len(points), -1)
    best = np.full(len(points), np.inf)
    for k, (x, y, w, h) in enumerate(boxes):
        side = max(w, h)
        level_ok = np.where(strides == STRIDES[0], side < SPLIT_PX[1], side >= SPLIT_PX[0])
        cx, cy = x + w / 2, y + h / 2
        near = (np.abs(points[:, 0] - cx) < CENTRE_RADIUS * strides) & \
               (np.abs(points[:, 1] - cy) < CENTRE_RADIUS * strides)
        inside = (points[:, 0] > x) & (points[:, 0] < x + w) & \
                 (points[:, 1] > y) & (points[:, 1] < y + h)
        # a box smaller than its stride may hold no anchor point: its centre cell learns it
        cell = (np.floor(points[:, 0] / strides) == np.floor(cx / strides)) & \
               (np.floor(points[:, 1] / strides) == np.floor(cy / strides))
        claim = level_ok & ((near & inside) | cell) & (w * h < best)
        owner[claim], best[claim] = k, w * h
    corners = np.zeros((len(points), 4), np.float32)
    if len(boxes):
        xyxy = np.concatenate([boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
        corners[owner >= 0] = xyxy[owner[owner >= 0]]
    return owner, corners


def load_part(root: Path, part: str) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray],
                                               list[int]]:
    """One part of the COCO folder: pixels ``[N, H, W, 3]`` uint8, per image boxes (x, y, w, h)
    and class indices (0..9, from the category ids), and the image ids, in file order."""
    from PIL import Image

    record = json.loads((root / canvases.ANNOTATIONS / f"instances_{part}.json").read_text())
    index = {cid: digit for digit, cid in enumerate(canvases.CATEGORY_IDS)}
    per_image: dict[int, list[dict]] = {image["id"]: [] for image in record["images"]}
    for ann in record["annotations"]:
        per_image[ann["image_id"]].append(ann)
    pixels = []
    for image in record["images"]:
        with Image.open(root / part / image["file_name"]) as decoded:
            pixels.append(np.asarray(decoded.convert("RGB")))
    boxes = [np.array([a["bbox"] for a in per_image[i["id"]]], np.float32).reshape(-1, 4)
             for i in record["images"]]
    labels = [np.array([index[a["category_id"]] for a in per_image[i["id"]]], np.int64)
              for i in record["images"]]
    return np.stack(pixels), boxes, labels, [image["id"] for image in record["images"]]


def targets(boxes: list[np.ndarray], labels: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every image's anchor targets: class index or -1 ``[N, A]``, and x1y1x2y2 ``[N, A, 4]``."""
    classes, corners = [], []
    for b, lab in zip(boxes, labels, strict=True):
        owner, xyxy = assign(b)
        classes.append(np.where(owner >= 0, lab[np.maximum(owner, 0)] if len(lab) else -1, -1))
        corners.append(xyxy)
    return np.stack(classes).astype(np.int64), np.stack(corners)


# ----------------------------------------------------------------------------- training
def box_loss(pred: torch.Tensor, true: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(IoU, 1 - GIoU) of matching x1y1x2y2 rows: the score target and the box loss."""
    import torch

    lt, rb = torch.maximum(pred[:, :2], true[:, :2]), torch.minimum(pred[:, 2:], true[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(1)
    area = (pred[:, 2:] - pred[:, :2]).prod(1) + (true[:, 2:] - true[:, :2]).prod(1)
    union = area - inter + 1e-6
    iou = inter / union
    hull = (torch.maximum(pred[:, 2:], true[:, 2:]) - torch.minimum(pred[:, :2], true[:, :2]))
    hull_area = hull.prod(1) + 1e-6
    return iou, 1.0 - (iou - (hull_area - union) / hull_area)


def loss(model: nn.Module, x: torch.Tensor, classes: torch.Tensor, corners: torch.Tensor
         ) -> torch.Tensor:
    """Scores: BCE towards the IoU of each positive anchor's box (0 elsewhere); boxes: GIoU
    loss at positives; both per positive anchor."""
    import torch

    raw = model.raw(x)
    pred = model.decode.corners(raw).transpose(1, 2)
    positive = classes >= 0
    count = positive.sum().clamp(min=1)
    iou, giou_loss = box_loss(pred[positive], corners[positive])
    score_target = torch.zeros_like(raw[:, 4:]).transpose(1, 2)  # [N, A, C]
    score_target[positive, classes[positive]] = iou.detach().clamp(min=0.05)
    scores = torch.nn.functional.binary_cross_entropy_with_logits(
        raw[:, 4:].transpose(1, 2), score_target, reduction="sum")
    return (scores + RECIPE["box_gain"] * giou_loss.sum()) / count


def train(root: Path) -> nn.Module:
    """The detector trained on ``root``'s training canvases by ``RECIPE``, in eval mode; the
    caller's RNG state, thread count and determinism setting are left as they were."""
    import torch

    pixels, boxes, labels, _ = load_part(root, canvases.TRAIN)
    classes, corners = (torch.from_numpy(a) for a in targets(boxes, labels))
    images = torch.from_numpy(pixels).permute(0, 3, 1, 2)  # uint8 NCHW, scaled per batch
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    with torch.random.fork_rng(devices=[]):
        torch.set_num_threads(RECIPE["threads"])
        torch.use_deterministic_algorithms(True)
        try:
            torch.manual_seed(RECIPE["seed"])
            model = build_module()
            _fit(model, images, classes, corners)
        finally:
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(deterministic)
    return model.eval()


def _fit(model: nn.Module, images: torch.Tensor, classes: torch.Tensor,
         corners: torch.Tensor) -> None:
    import math

    import torch

    size, epochs = RECIPE["batch_size"], RECIPE["epochs"]
    steps = epochs * math.ceil(len(images) / size)
    warm = math.ceil(len(images) / size)

    def rate(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(steps - warm, 1)))

    optimiser = torch.optim.AdamW(model.parameters(), lr=RECIPE["lr"],
                                  weight_decay=RECIPE["weight_decay"])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, rate)
    order = torch.Generator().manual_seed(RECIPE["seed"])
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for batch in torch.randperm(len(images), generator=order).split(size):
            optimiser.zero_grad()
            value = loss(model, images[batch].float() / 255.0, classes[batch], corners[batch])
            value.backward()
            optimiser.step()
            schedule.step()
            total += float(value.detach()) * len(batch)
        log.debug("%s epoch %d: loss %.4f", MODEL_NAME, epoch + 1, total / len(images))


# ----------------------------------------------------------------------------- the cache
def training_recipe() -> dict[str, Any]:
    """Everything the trained weights depend on, computed without torch: the recipe, the
    head's geometry, the dataset's identity, this file's and the dataset code's source."""
    code = [Path(__file__), Path(canvases.__file__)]
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
