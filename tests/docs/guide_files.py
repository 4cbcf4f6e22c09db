"""What a page's examples need before they run, made in the page's folder: the short user.conf
the runs are given (``guide_commands.SHORT_CONF``), and the user's files the page names. A
user's model is a tiny seeded ONNX CNN (made with onnx's helpers, no torch: a second), a
user's dataset a folder per class of small PNGs; their predictions are noise, and what the
examples check is that quantmark runs them as the page says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.conftest import ROOT
from tests.docs.guide_commands import SHORT_CONF, SHORT_CONF_TEXT

CLASSES = 10
PER_CLASS = 8


def onnx_classifier(path: Path, classes: int, size: int) -> Path:
    """A 3xSIZExSIZE float image in (any batch), ``classes`` logits out: a strided 3x3
    convolution, ReLU, global average pool and a dense layer, with seeded weights."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    weights = {"conv_w": rng.normal(0, 0.3, (8, 3, 3, 3)), "conv_b": np.zeros(8),
               "dense_w": rng.normal(0, 0.3, (classes, 8)), "dense_b": np.zeros(classes)}
    nodes = [helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1] * 4,
                              strides=[2, 2]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
             helper.make_node("Flatten", ["pool"], ["flat"]),
             helper.make_node("Gemm", ["flat", "dense_w", "dense_b"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, path.stem,
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(value.astype(np.float32), name)
         for name, value in weights.items()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def class_folders(root: Path, per_class: int = PER_CLASS) -> Path:
    """``root/<class>/<n>.png``: 10 classes of noisy colour fields, 40x40 pixels, ``per_class``
    of each (tests/quantmark/test_your_model.py's dataset too)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in range(CLASSES):
        folder = root / f"class{label}"
        folder.mkdir(parents=True)
        colour = np.array([label * 25, 255 - label * 25, (label * 70) % 255])
        for index in range(per_class):
            pixels = np.clip(colour + rng.integers(0, 60, (40, 40, 3)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{index}.png")
    return root


#: the files each page names, by the page's path: an ImageNet-shaped classifier (224x224,
#: 1000 classes) runs on the built-in photos; a CIFAR-shaped one on its own class folders
FILES: dict[str, dict[str, Callable[[Path], Path]]] = {
    "docs/guides/deploy.md": {"mine.onnx": lambda p: onnx_classifier(p, 1000, 224)},
    "docs/guides/own-model.md": {"cifar10.onnx": lambda p: onnx_classifier(p, CLASSES, 32),
                                 "cifar": class_folders},
}


def files_of(page: Path) -> set[str]:
    return set(FILES.get(str(page.relative_to(ROOT)), {}))


def prepare(page: Path, folder: Path) -> None:
    """The page's folder as its examples expect it."""
    (folder / SHORT_CONF).write_text(SHORT_CONF_TEXT)
    for name, make in FILES.get(str(page.relative_to(ROOT)), {}).items():
        make(folder / name)
