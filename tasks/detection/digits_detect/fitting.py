"""digits-detect's training: targets assigned by centre, the loss and the deterministic fit
(what ``detector._trained`` runs once at first use)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import canvases

if TYPE_CHECKING:  # torch is imported lazily
    import torch
    from torch import nn



from .architecture import (
    CENTRE_RADIUS,
    MODEL_NAME,
    RECIPE,
    SPLIT_PX,
    STRIDES,
    anchor_grid,
    build_module,
)

log = logging.getLogger(__name__)


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


