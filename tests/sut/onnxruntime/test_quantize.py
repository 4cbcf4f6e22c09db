"""ONNX Runtime's quantizer: static INT8 on real weights, and the INT8 calibration table the
TensorRT execution provider reads (ort-trt-int8). Runs on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from quantmark.models.artifacts import Artifact
from quantmark.models.qdq import count_qdq_nodes
from quantmark.models.source import fp32_onnx
from quantmark.models.zoo import get_model
from quantmark.sut.onnxruntime import quantize as ort_quantize
from quantmark.sut.onnxruntime.quantize import quantize_key, quantize_static_int8
from tests.digits_model import DIGITS_SPEC
from tests.models.helpers import photo_crops


@pytest.fixture(scope="module")
def lite0_onnx() -> Artifact:
    """EfficientNet-Lite0 with its real ImageNet weights, exported once."""
    from quantmark.models.onnx_export import export_onnx

    return export_onnx(get_model("efficientnet-lite0"))


def _session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


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


def test_int8_quantization(lite0_onnx: Artifact) -> None:
    """Real (pretrained) weights: top-1 agreement is meaningful, unlike for random nets."""
    spec = get_model("efficientnet-lite0")
    calib, test = photo_crops(spec, 16, seed=10), photo_crops(spec, 16, seed=11)
    q = quantize_static_int8(lite0_onnx, calib, "photo-crops-16-seed10")
    assert q.precision == "int8" and q.meta["cached"] is False
    assert q.times["calibration_s"] > 0 and q.meta["quant_recipe"]["format"] == "QDQ"
    counts = count_qdq_nodes(q.path)
    assert counts["QuantizeLinear"] > 20 and counts["DequantizeLinear"] > 20
    assert counts["ops"]["Conv"] == count_qdq_nodes(lite0_onnx.path)["ops"]["Conv"]
    assert count_qdq_nodes(lite0_onnx.path)["QuantizeLinear"] == 0
    ref = _session(lite0_onnx.path).run(None, {"input": test})[0].argmax(1)
    got = _session(q.path).run(None, {"input": test})[0].argmax(1)
    assert (ref == got).mean() >= 0.75, (ref, got)
    again = quantize_static_int8(lite0_onnx, calib, "photo-crops-16-seed10")
    assert again.meta["cached"] is True and again.times == q.times
    assert quantize_key(lite0_onnx, "other-calibration") != q.key
