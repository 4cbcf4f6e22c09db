"""digits-detect's architecture: the constants, the anchor grid and the torch module at any
square size (a multiple of 16), read by the training (``training``) and by the trainer
interface and exports (``detector``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from quantmark.ground.errors import UserError

from . import canvases

if TYPE_CHECKING:  # torch is imported lazily
    import torch
    from torch import nn


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
    repeatable ones). Long because its torch classes are defined inside it: torch is imported
    only when a module is built, never by importing this file."""
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


