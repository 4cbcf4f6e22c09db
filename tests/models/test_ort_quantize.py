"""ONNX Runtime's quantization tooling outside the CPU SUTs: the INT8 calibration table the
TensorRT execution provider reads (ort-trt-int8). Runs on CPU."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from quantmark.models import ort_quantize
from quantmark.models.source import fp32_onnx
from tests.digits_model import DIGITS_SPEC


def test_calibration_table_for_the_tensorrt_provider(digits_weights, digits_calibration):
    """The table ort-trt-int8 hands TensorRT: ranges of the model's own tensors, cached."""
    fp32 = fp32_onnx(DIGITS_SPEC, str(digits_weights))
    data = digits_calibration.arrays("NCHW")
    table = ort_quantize.tensorrt_calibration_table(fp32, data, digits_calibration.hash())
    assert table.path.name == "calibration.flatbuffers" and table.path.stat().st_size > 0
    ranges = json.loads((table.path.parent / "calibration.json").read_text())["data"]
    graph = onnx.load(str(fp32.path)).graph
    conv_outputs = [node.output[0] for node in graph.node if node.op_type == "Conv"]
    assert conv_outputs and set(conv_outputs) <= set(ranges)
    assert table.meta["tensors"] == len(ranges) and table.meta["calibration_samples"] == len(data)
    for name in conv_outputs:  # symmetric: TensorRT reads one dynamic range per tensor
        low, high = (float(np.asarray(ranges[name][k]["data"]).reshape(-1)[0])
                     for k in ("lowest", "highest"))
        assert high > 0 and low == pytest.approx(-high)
    again = ort_quantize.tensorrt_calibration_table(fp32, data, digits_calibration.hash())
    assert again.meta["cached"] is True and again.key == table.key
