"""TensorFlow's device evidence on a GPU, checked from hand-written placements (no GPU needed)."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import SutError
from quantmark.sut.tensorflow import executed_graph as tf_graph


def test_tensorflow_compute_on_the_cpu_is_counted():
    assert tf_graph.cpu_fallback({"device:GPU:0": 12}) == 0
    assert tf_graph.cpu_fallback({"device:GPU:0": 10, "device:CPU:0": 2}) == 2
    with pytest.raises(SutError, match="changed nothing on this GPU"):
        tf_graph.executed_precision("tf-amp", {"float32": {"Conv2D": 3}}, tf_graph.HALF_DTYPES,
                                    "GPU")
    assert tf_graph.executed_precision("tf-amp", {"float16": {"Conv2D": 3},
                                                  "float32": {"MatMul": 1}},
                                       tf_graph.HALF_DTYPES, "GPU") == "fp16+fp32"
