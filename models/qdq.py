"""ONNX models in QDQ form, shared by more than one framework: the calibration reader and QDQ
node counts ONNX Runtime's quantizers use, and the symmetric QDQ model TensorRT runs as explicit
INT8 (``trt-int8`` and ``ort-trt-int8`` with ``trt_int8_route=qdq``, and the ``qdq`` route's
count check). It lives here, below the framework folders, so neither has to import the other.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress

#: ORT static quantization in the form TensorRT's explicit quantization accepts
TRT_QDQ_RECIPE: dict[str, Any] = {
    "format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8", "per_channel": True,
    "activation_symmetric": True, "weight_symmetric": True, "quantize_bias": False,
    "calibrate_method": "MinMax", "pre_process": True, "calibration_batch": 8, "version": 1,
}


class ArrayReader(CalibrationDataReader):
    """Feeds a float32 NCHW array in batches (transposed to NHWC if the model wants that)."""

    def __init__(self, data: np.ndarray, input_name: str, layout: str = "NCHW",
                 batch: int = 8) -> None:
        self.data, self.input_name, self.layout, self.batch = data, input_name, layout, batch
        self._it: Iterator[np.ndarray] = self._batches()
        self.exhausted_at: float | None = None  # perf_counter when calibration data ran out

    def _batches(self) -> Iterator[np.ndarray]:
        for i in range(0, len(self.data), self.batch):
            chunk = self.data[i:i + self.batch]
            if self.layout == "NHWC":
                chunk = chunk.transpose(0, 2, 3, 1)
            yield np.ascontiguousarray(chunk, dtype=np.float32)

    def get_next(self) -> dict[str, np.ndarray] | None:
        chunk = next(self._it, None)
        if chunk is None:
            self.exhausted_at = self.exhausted_at or time.perf_counter()
            return None
        return {self.input_name: chunk}

    def rewind(self) -> None:
        self._it = self._batches()


def count_qdq_nodes(path: str | Path) -> dict[str, Any]:
    """Node counts: ``{"QuantizeLinear": n, "DequantizeLinear": m, "total": t, "ops": {...}}``.

    SUTs report this to prove an INT8 model really is quantized.
    """
    proto = onnx.load(str(path), load_external_data=False)
    ops = Counter(node.op_type for node in proto.graph.node)
    return {"QuantizeLinear": ops.get("QuantizeLinear", 0),
            "DequantizeLinear": ops.get("DequantizeLinear", 0),
            "total": sum(ops.values()), "ops": dict(sorted(ops.items()))}


def check_nchw_calibration(calibration: np.ndarray) -> None:
    """The TensorRT-bound calibrations take a non-empty float [N,C,H,W] batch."""
    if calibration.ndim != 4 or len(calibration) == 0:
        raise ValueError(f"calibration must be a non-empty [N,C,H,W] array, got "
                         f"{calibration.shape}")


def qdq_onnx_for_tensorrt(fp32: Artifact, calibration: np.ndarray,
                          calibration_hash: str) -> Artifact:
    """A QDQ copy of ``fp32`` TensorRT can run as explicit INT8: signed INT8 activations and
    weights, symmetric (zero points 0), per-channel weights, float biases (TensorRT has no
    INT32 dequantization for them). ONNX Runtime's CPU recipe (``sut.onnxruntime.quantize``:
    uint8 activations with zero points) is what MLAS runs fastest, and TensorRT rejects it."""
    check_nchw_calibration(calibration)
    key = hash_json({"what": "trt-qdq-int8", "fp32": fp32.key, "calibration": calibration_hash,
                     "recipe": TRT_QDQ_RECIPE, "onnxruntime": onnxruntime.__version__,
                     "onnx": onnx.__version__})
    model = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        progress(f"quantizing {model} to TensorRT-style QDQ INT8 on {len(calibration)} "
                 "calibration samples ...")
        started = time.perf_counter()
        pre = folder / "pre.onnx"
        quant_pre_process(str(fp32.path), str(pre))
        reader = ArrayReader(calibration, fp32.meta.get("input_name", "input"), "NCHW",
                             TRT_QDQ_RECIPE["calibration_batch"])
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-int8-trtqdq.onnx"
        quantize_static(str(pre), str(out), reader, quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True,
                                       "QuantizeBias": False})
        pre.unlink()
        seconds = time.perf_counter() - started
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "recipe")}
        meta.update({"quant_recipe": TRT_QDQ_RECIPE, "calibration_hash": calibration_hash,
                     "calibration_samples": int(len(calibration)), "fp32_key": fp32.key,
                     "onnxruntime": onnxruntime.__version__, "sha256": hash_file(out),
                     "qdq": count_qdq_nodes(out)})
        return Artifact(path=out, format="onnx", precision="int8", key=key, weights=fp32.weights,
                        source_hash=fp32.meta.get("sha256") or hash_file(fp32.path),
                        times={"quantize_s": round(seconds, 3)}, meta=meta)

    return cached_build(model, key, build)
