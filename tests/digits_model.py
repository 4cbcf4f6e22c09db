"""A small real model the tests train: a CNN on scikit-learn's digits (real labelled data).

Every framework SUT can be checked on it offline in seconds: it is trained here in torch (the
canonical source), saved as a state_dict, and converted by each framework's own converter
exactly as the zoo models are. Digits are 8x8 grey levels 0-16; they are upscaled to 32x32 RGB
in 0-255 pixel units so the usual ``(p - mean) / std`` preprocessing applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantmark.ground.hashing import hash_json
from quantmark.models.zoo import ModelSpec

SIZE = 32
TRAIN_COUNT = 1200  # the rest (597) is the evaluation set
CALIBRATION_COUNT = 256  # drawn from the training split, never from evaluation


def _build(num_classes: int = 10):
    from torch import nn

    def block(cin: int, cout: int) -> list:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]

    return nn.Sequential(
        *block(3, 16), nn.MaxPool2d(2),
        *block(16, 32), nn.MaxPool2d(2),
        *block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, num_classes),
    )


DIGITS_SPEC = ModelSpec(name="digits-cnn", mean=(127.5, 127.5, 127.5),
                        std=(127.5, 127.5, 127.5), builder=_build, input_size=SIZE,
                        resize_short=SIZE, num_classes=10, performance_sample_count=64)


@dataclass
class DigitsData:
    """NCHW float32 inputs, preprocessed for ``DIGITS_SPEC``."""

    train_x: np.ndarray
    train_y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray


def load_digits_data() -> DigitsData:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.astype(np.float32) * (255.0 / 16.0)  # [N,8,8] in 0-255
    scale = SIZE // 8
    big = np.repeat(np.repeat(pixels, scale, axis=1), scale, axis=2)
    rgb = np.repeat(big[:, None, :, :], 3, axis=1)
    x = ((rgb - 127.5) / 127.5).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], digits.target[order].astype(np.int64)
    return DigitsData(x[:TRAIN_COUNT], y[:TRAIN_COUNT], x[TRAIN_COUNT:], y[TRAIN_COUNT:])


def train_digits_model(path: Path, data: DigitsData, epochs: int = 16) -> Path:
    """Train the CNN (seeded, a few seconds on 2 cores) and save its state_dict to ``path``."""
    import torch

    torch.manual_seed(0)
    model = _build()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    steps = epochs * -(-TRAIN_COUNT // 64)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=1e-2, total_steps=steps)
    x, y = torch.from_numpy(data.train_x), torch.from_numpy(data.train_y)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        for batch in torch.randperm(len(x), generator=generator).split(64):
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimiser.step()
            schedule.step()
    torch.save(model.eval().state_dict(), path)
    return path


class ArrayCalibration:
    """The calibration-provider interface SUT factories take (``arrays``, ``hash``,
    ``describe``), over an in-memory NCHW array."""

    def __init__(self, data: np.ndarray, source: str = "digits train split") -> None:
        self.data = np.ascontiguousarray(data, dtype=np.float32)
        self.source = source

    def arrays(self, layout: str) -> np.ndarray:
        if layout == "NCHW":
            return self.data
        return np.ascontiguousarray(self.data.transpose(0, 2, 3, 1))

    def hash(self) -> str:
        return hash_json({"source": self.source, "shape": list(self.data.shape),
                          "sum": float(self.data.astype(np.float64).sum()),
                          "head": self.data.ravel()[:64].tolist()})

    def describe(self) -> dict:
        return {"source": self.source, "count": len(self.data), "hash": self.hash()}


def top1(scores: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent; ``scores`` are [N, classes] or class indices [N]."""
    predicted = scores if scores.ndim == 1 else scores.argmax(axis=1)
    return float((predicted == labels).mean() * 100.0)
