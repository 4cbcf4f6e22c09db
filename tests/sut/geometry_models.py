"""Small classifiers of other input geometries, written by hand with torch: 1 or 3 channels,
square or not, float32 or raw uint8 input, any class count. Each is saved as a state_dict (the
torch SUTs' source) and exported to ONNX (the other SUTs' source) with the same weights, and
comes with its ``ModelSpec``, images preprocessed by that spec's recipe, and a calibration
provider whose samples go through the same recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import hash_json
from quantmark.models.zoo import ModelSpec
from quantmark.qsl.preprocess import normalise, recipe_for

SEED = 0


def tiny_net(channels: int, classes: int, raw: bool) -> Any:
    """A 2-conv CNN; a raw-pixel one scales its uint8 input itself, as a deployed model does."""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(channels, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.classifier = nn.Linear(16, classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if raw:
                x = (x.to(torch.float32) - 127.5) / 127.5
            return self.classifier(self.features(x))

    return Tiny()


@dataclass(frozen=True)
class Case:
    """One geometry: channels, height x width, classes, input type."""

    name: str
    channels: int = 3
    height: int = 32
    width: int = 32
    classes: int = 10
    dtype: str = "float32"

    def spec(self) -> ModelSpec:
        raw = self.dtype == "uint8"
        mean = (0.0,) if raw else (127.5,) * self.channels
        std = (1.0,) if raw else (127.5,) * self.channels
        return ModelSpec(name=f"geom-{self.name}", mean=mean, std=std,
                         builder=lambda n: tiny_net(self.channels, n, raw),
                         input_size=self.height, input_width=self.width,
                         resize_short=max(self.height, self.width), resize_rule="stretch",
                         channels=self.channels, input_dtype=self.dtype,
                         num_classes=self.classes, performance_sample_count=16)


def seeded_model(case: Case) -> Any:
    """The case's network with seeded weights and non-trivial BatchNorm statistics, its
    classifier centred and scaled on seeded images so that different images get different
    classes (an untrained net gives every image the same one)."""
    import torch

    torch.manual_seed(SEED)
    spec = case.spec()
    model = spec.builder(case.classes).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
        x = torch.from_numpy(samples(spec, "NCHW", 64, seed=3))
        features = model.features((x.float() - 127.5) / 127.5 if case.dtype == "uint8" else x)
        mean, std = features.mean(0), features.std(0) + 1e-6
        weight = torch.randn(case.classes, features.shape[1]) / std
        model.classifier.weight.copy_(weight)
        model.classifier.bias.copy_(-(weight @ mean))
    return model


def write_model(case: Case, folder: Path) -> tuple[Path, Path]:
    """(state_dict .pt, ONNX .onnx with a dynamic batch) of the case's seeded network."""
    import torch

    model = seeded_model(case)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / f"{case.name}.pt"
    torch.save(model.state_dict(), weights)
    onnx_path = folder / f"{case.name}.onnx"
    dtype = torch.uint8 if case.dtype == "uint8" else torch.float32
    example = torch.zeros(2, case.channels, case.height, case.width, dtype=dtype)
    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(model, (example,), str(onnx_path), input_names=["input"],
                      output_names=["logits"], dynamo=True, dynamic_shapes=({0: batch},),
                      verbose=False)
    return weights, onnx_path


def images(count: int, height: int, width: int, seed: int = SEED) -> np.ndarray:
    """Seeded uint8 RGB images (smooth colour fields plus texture), NHWC."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0, 200, (count, 4, 4, 3))
    upscaled = coarse.repeat(-(-height // 4), axis=1).repeat(-(-width // 4), axis=2)
    texture = rng.uniform(0, 55, (count, height, width, 3))
    return np.clip(upscaled[:, :height, :width] + texture, 0, 255).astype(np.uint8)


def samples(spec: ModelSpec, layout: str, count: int = 6, seed: int = 1) -> np.ndarray:
    """``count`` images as the model takes them: the spec's recipe in ``layout``."""
    return normalise(images(count, spec.input_size, spec.input_width, seed),
                     recipe_for(spec, layout))


class RecipeCalibration:
    """The calibration-provider interface the SUT factories take, over seeded images that go
    through the spec's recipe (``arrays(layout)``), as the run's provider does."""

    def __init__(self, spec: ModelSpec, count: int = 32) -> None:
        self.spec, self.count = spec, count

    def arrays(self, layout: str) -> np.ndarray:
        return samples(self.spec, layout, self.count, seed=2)

    def hash(self) -> str:
        return hash_json({"what": "geometry-test-calibration", "count": self.count,
                          "recipe": recipe_for(self.spec, "NCHW").key()})

    def describe(self) -> dict[str, Any]:
        return {"source": "seeded images", "count": self.count, "hash": self.hash()}
