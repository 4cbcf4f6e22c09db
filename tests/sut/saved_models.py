"""Tiny TensorFlow SavedModel directories, as a user would pass with --model-path, and a tiny
ImageNet-format folder to run them over through run.py.

The model is a real convolution + mean + matmul (the TF SUTs refuse a graph with no conv or
matmul: they could not tell what precision ran), saved with ``tf.saved_model.save`` and a
``serving_default`` signature over ``[None, size, size, 3]`` float32 images.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np


def tiny_saved_model(folder: Path, size: int, classes: int, seed: int = 0) -> Path:
    """A SavedModel directory; ``seed`` changes the weights (in variables/), not the graph."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    class Tiny(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.kernel = tf.Variable(rng.normal(0, 0.2, (4, 4, 3, 8)).astype(np.float32))
            self.dense = tf.Variable(rng.normal(0, 0.5, (8, classes)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32,
                                                    name="images")])
        def __call__(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
            features = tf.nn.relu(tf.nn.conv2d(images, self.kernel, strides=4,
                                               padding="VALID"))
            return {"logits": tf.matmul(tf.reduce_mean(features, axis=[1, 2]), self.dense)}

    module = Tiny()
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.__call__})
    return folder


def saved_model_scores(folder: Path, images: np.ndarray) -> np.ndarray:
    """What the SavedModel itself computes for NHWC ``images`` (the reference)."""
    import tensorflow as tf

    # plain FP32: a tf-amp SUT loaded earlier in this process may have left grappler's
    # process-wide mixed precision on
    tf.config.optimizer.set_experimental_options({
        "auto_mixed_precision_onednn_bfloat16": False, "auto_mixed_precision": False})
    signature = tf.saved_model.load(str(folder)).signatures["serving_default"]
    return signature(images=tf.constant(images, tf.float32))["logits"].numpy()


def tiny_image_folder(folder: Path, count: int = 16) -> Path:
    """``count`` random 256x256 JPEGs listed in val_map.txt with labels 0..count-1."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    lines = []
    for number in range(count):
        pixels = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img{number:02d}.jpg")
        lines.append(f"img{number:02d}.jpg {number}")
    (folder / "val_map.txt").write_text("\n".join(lines) + "\n")
    return folder


def same_graph_other_weights(graph_of: Path, weights_of: Path, folder: Path) -> Path:
    """A SavedModel with ``graph_of``'s very saved_model.pb and ``weights_of``'s variables/.

    Two processes exporting one architecture write byte-identical saved_model.pb files (only
    variables/ differs); within one process TensorFlow numbers the traced functions, so this
    copies the graph file instead to get the same pair in a test.
    """
    shutil.copytree(weights_of, folder)
    shutil.copyfile(graph_of / "saved_model.pb", folder / "saved_model.pb")
    return folder
