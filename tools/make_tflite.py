"""Write a small float .tflite image classifier ([N, SIZE, SIZE, 3] -> [N, 1000]) with TensorFlow.

A stand-in for "a model exported for another input size": tools/arm_check.sh hands it to a
224x224 model's run on arm64 and expects one clear line, not a crash.

    python tools/make_tflite.py --size 160 OUT.tflite
"""

from __future__ import annotations

import argparse
from pathlib import Path


def write(path: Path, size: int, classes: int = 1000) -> None:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    kernel = tf.constant(rng.normal(0, 0.1, (3, 3, 3, 16)).astype(np.float32))
    dense = tf.constant(rng.normal(0, 0.1, (16, classes)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32)])
    def classify(images):
        features = tf.nn.relu(tf.nn.conv2d(images, kernel, strides=2, padding="SAME"))
        return tf.matmul(tf.reduce_mean(features, axis=[1, 2]), dense)

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [classify.get_concrete_function()], classify)
    path.write_bytes(converter.convert())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--size", type=int, default=160)
    args = parser.parse_args()
    write(args.output, args.size)


if __name__ == "__main__":
    main()
