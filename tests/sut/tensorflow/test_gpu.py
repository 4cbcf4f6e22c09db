"""TensorFlow's device evidence on a GPU, checked from hand-written placements (no GPU needed)."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import SutError
from quantmark.sut.tensorflow import backend as tf_sut


def test_tensorflow_compute_on_the_cpu_is_counted():
    assert tf_sut.cpu_fallback({"device:GPU:0": 12}) == 0
    assert tf_sut.cpu_fallback({"device:GPU:0": 10, "device:CPU:0": 2}) == 2
    with pytest.raises(SutError, match="changed nothing on this GPU"):
        tf_sut.executed_precision("tf-amp", {"float32": {"Conv2D": 3}}, tf_sut.HALF_DTYPES,
                                  "GPU")
    assert tf_sut.executed_precision("tf-amp", {"float16": {"Conv2D": 3},
                                                "float32": {"MatMul": 1}},
                                     tf_sut.HALF_DTYPES, "GPU") == "fp16+fp32"
