"""TFLite on a detector (``spec.task == "detection"``): its output, and tflite-int8 with the
box decode kept in float.

The output is the ONNX model's: raw ``[N, 4+C, anchors]`` or nms ``[N, K, 6]``; where the
converted model holds it transposed (told by the axis of length 4+C, or 6) the backend turns it
back and says so (``output_transposed``).

Full integer: a YOLO head concatenates boxes in pixels (0..640) with sigmoid scores (0..1), and
one int8 tensor cannot hold both: quantized at the boxes' scale every score collapses. Measured
on the tiny fixture (64 px, random weights, seeded batch of 2) against ONNX Runtime: the usual
recipe (every op int8, int8 input and output) put boxes off by up to 6.5 px and scores by 0.47;
keeping the decode after the last backbone convolution in float, 1.7 px (the DFL softmax and
its bin-weighting convolution still int8); keeping every op from the reshape that flattens the
feature maps into anchors in float (DFL included), 0.05 px and 0.002. That last recipe is what
tflite-int8 does here, with TensorFlow's own selective quantization:
``tf.lite.experimental.QuantizationDebugger`` calibrates, and its ``denylisted_nodes`` (op
output tensor names, found on the fp32 conversion of the same SavedModel) stay float while
every other op, every backbone and head convolution among them, is int8. The name denylist
missed the nms head's TOPK_V2 (it stayed int8, its scores tied on the int8 grid and the ranks
changed), so op types that only the head has are denylisted by type too. The converter still
rounds the class sigmoid to its fixed int8 grid (1/256) and back: the 0.002 score error, listed
as ``head_integer_ops``. ``fully_quantize`` is off, so the model takes and returns float32 (its
QUANTIZE/DEQUANTIZE run inside the model, in the timed invoke): an int8 output would quantize
the scores with the boxes again. The executed-precision proof is unchanged: the integer conv
ops, and the file's int8 weights. The artifact records what stayed float and the box error
against its fp32 twin on calibration samples (``int8_vs_fp32``).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.models.saved_model import detector_layout

log = logging.getLogger(__name__)

#: how tflite-int8 quantizes a detector (part of its artifact key and meta)
DETECTION_INT8 = {"optimizations": ["DEFAULT"], "representative_dataset":
                  "calibration, 1 per yield", "supported_ops": ["TFLITE_BUILTINS_INT8"],
                  "inference_input_type": "float32", "inference_output_type": "float32",
                  "float_head": "every op downstream of a RESHAPE from a rank-4 feature map to "
                                "rank 3 (anchors): QuantizationDebugger denylisted_nodes, and "
                                "denylisted_ops for op types only the head has; "
                                "fully_quantize=False", "version": 1}
HEADS = {"raw": "[N,4+classes,anchors]", "nms": "[N,K,6]"}
#: calibration samples the int8 artifact's box error is measured on (against its fp32 twin)
ERROR_SAMPLES = 8


def int8_detector(saved: Any, precision: str) -> dict[str, Any] | None:
    """A detector's tflite-int8 conversion: its head and class count (the artifact's notes
    start from it); None for every other conversion."""
    if precision != "int8" or saved.meta.get("task") != "detection":
        return None
    return {"head": saved.meta.get("head"), "num_classes": saved.meta["num_classes"]}


def _dims(detail: dict[str, Any]) -> list[int | None]:
    return [None if d == -1 else int(d) for d in detail["shape_signature"]]


def detector_io(summary: dict[str, Any], spec: Any, where: str, layout: str) -> dict[str, Any]:
    """``model_io`` for a detector: its one output of the spec's head, and the batch."""
    from quantmark.sut.tflite.inspection import INPUT_TYPES

    output = next((o for o in summary["outputs"] if detector_layout(_dims(o), spec) is not None
                   and o["dtype"] in INPUT_TYPES and not o["per_channel"]), None)
    if output is None:
        found = ", ".join(f"{o['dtype']}{o['shape_signature']}" for o in summary["outputs"])
        raise UserError(f"{where} has no {spec.head} detector output {HEADS[spec.head]} with "
                        f"{spec.num_classes} classes (found {found}); export the detector's head")
    inp = summary["inputs"][0]
    batch = inp["shape_signature"][0]
    if batch not in (-1, 1):
        raise UserError(f"{where} has a static batch of {batch}; convert it with a dynamic "
                        "batch (None) or batch 1")
    return {"layout": layout, "label_offset": 0, "num_classes": spec.num_classes,
            "output_name": output["name"], "static_batch": None if batch == -1 else batch,
            "input_dtype": inp["dtype"], "output_dtype": output["dtype"],
            "task": spec.task, "head": spec.head,
            "output_transposed": detector_layout(_dims(output), spec)}


def _head(flatbuffer: bytes) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The head's ops in execution order (every op downstream of a RESHAPE that flattens a
    rank-4 feature map into rank 3, the anchors axis) and the model's tensors."""
    from quantmark.sut.tflite.inspection import open_interpreter

    interpreter = open_interpreter(None, model_content=flatbuffer)
    tensors = {int(t["index"]): t for t in interpreter.get_tensor_details()}
    rank = {index: len(t["shape_signature"]) for index, t in tensors.items()}
    ops = [op for op in interpreter._get_ops_details() if op["op_name"] != "DELEGATE"]
    consumers: dict[int, list[dict[str, Any]]] = {}
    for op in ops:
        for tensor in op["inputs"]:
            consumers.setdefault(int(tensor), []).append(op)
    pending = deque(op for op in ops if op["op_name"] == "RESHAPE" and len(op["inputs"])
                    and rank[int(op["inputs"][0])] == 4 and rank[int(op["outputs"][0])] == 3)
    head: set[int] = set()
    while pending:
        op = pending.popleft()
        if op["index"] not in head:
            head.add(op["index"])
            pending.extend(c for t in op["outputs"] for c in consumers.get(int(t), []))
    return [op for op in ops if op["index"] in head], tensors


def float_head(flatbuffer: bytes) -> tuple[list[str], list[str]]:
    """What to keep float: the head's op output tensor names, and the op types only the head
    has (the denylist by name misses some: a TOPK_V2 stayed int8 until denied by type)."""
    head, tensors = _head(flatbuffer)
    from quantmark.sut.tflite.inspection import open_interpreter

    ops = open_interpreter(None, model_content=flatbuffer)._get_ops_details()
    names = {op["index"] for op in head}
    elsewhere = {op["op_name"] for op in ops if op["index"] not in names}
    return ([tensors[int(t)]["name"] for op in head for t in op["outputs"]],
            sorted({op["op_name"] for op in head} - elsewhere - {"DELEGATE"}))


def integer_head_ops(flatbuffer: bytes) -> dict[str, int]:
    """Head ops of the converted model that still compute on integers (QUANTIZE: a float
    value rounded to the int8 grid and back, e.g. after a LOGISTIC, whose int8 output the
    converter fixes at 1/256)."""
    head, tensors = _head(flatbuffer)
    kinds = Counter(op["op_name"] for op in head if any(
        np.dtype(tensors[int(t)]["dtype"]).name in ("int8", "uint8", "int16")
        for t in op["outputs"]) and op["op_name"] != "DEQUANTIZE")
    return dict(sorted(kinds.items()))


def convert_int8(saved_dir: Path, calibration: np.ndarray, recipe: Any,
                 detector: dict[str, Any]) -> bytes:
    """The detector's tflite-int8 flatbuffer (see the module docstring); ``detector`` (its
    head and class count) gains notes for the artifact: what stayed float and the measured
    box error. ``recipe``: a diagnosis recipe's extra float layers and weight damage."""
    import tensorflow as tf

    from quantmark.sut.tflite.recipe import convert_excluding, damage_weights

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_dir),
                                                         signature_keys=["serving_default"])

    def representative() -> Any:
        for sample in calibration:  # as given: the model's layout and input type
            yield [np.ascontiguousarray(sample[None])]

    fp32 = converter.convert()  # no quantization options yet: the plain float graph
    head, kinds = float_head(fp32)
    if not head:
        raise UserError("tflite-int8: the detector has no reshape from feature maps to anchors "
                        "whose decode could stay float; run it as tflite-int8dyn")
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    exclude = tuple(recipe.exclude) if recipe is not None else ()
    flatbuffer = convert_excluding(converter, representative, (*head, *exclude),
                                   fully_quantize=False, ops=tuple(kinds))
    if recipe is not None and recipe.damage:
        flatbuffer = damage_weights(flatbuffer, recipe.damage)
    detector.update(float_head_tensors=len(head), float_head_starts_at=head[0],
                    float_head_op_types=kinds, head_integer_ops=integer_head_ops(flatbuffer),
                    int8_vs_fp32=box_error(fp32, flatbuffer, calibration,
                                           SimpleNamespace(**detector)))
    return flatbuffer


def _run(flatbuffer: bytes, x: np.ndarray, spec: Any) -> np.ndarray:
    """The model's output for float NHWC ``x``, in the ONNX layout."""
    from quantmark.sut.tflite.inspection import open_interpreter

    interpreter = open_interpreter(None, model_content=flatbuffer, num_threads=1)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.resize_tensor_input(int(inp["index"]), list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(int(inp["index"]), x.astype(np.float32))
    interpreter.invoke()
    y = interpreter.get_tensor(int(out["index"]))
    transposed = detector_layout([None, *y.shape[1:]], spec)
    return y.transpose(0, 2, 1) if transposed else y


def _paired(got: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nms rows of each image paired with the other model's row of the same class whose box is
    nearest, where that is mutual: ranks follow the scores, and scores a hair apart swap
    places, so row k of one model need not be row k of the other."""
    pairs_got, pairs_ref = [], []
    for one, two in zip(got, reference, strict=True):
        distance = np.abs(one[:, None, :4] - two[None, :, :4]).max(-1)
        distance[one[:, None, 5] != two[None, :, 5]] = np.inf
        near, back = distance.argmin(1), distance.argmin(0)
        mutual = [(i, j) for i, j in enumerate(near) if back[j] == i and np.isfinite(
            distance[i, j])]
        pairs_got += [one[i] for i, _ in mutual]
        pairs_ref += [two[j] for _, j in mutual]
    return np.reshape(pairs_got, (-1, 6)), np.reshape(pairs_ref, (-1, 6))


def box_error(fp32: bytes, int8: bytes, samples: np.ndarray, spec: Any) -> dict[str, Any]:
    """The int8 model's box and score error against its fp32 twin on calibration samples."""
    x = np.ascontiguousarray(samples[:ERROR_SAMPLES])
    reference, got = _run(fp32, x, spec), _run(int8, x, spec)
    result: dict[str, Any] = {"samples": int(len(x)),
                              "reference": "fp32 .tflite of the same SavedModel"}
    if spec.head == "raw":  # rows: cx, cy, w, h, class scores; one column per anchor
        boxes, scores = np.abs(got[:, :4] - reference[:, :4]), np.abs(got[:, 4:] - reference[:, 4:])
    else:  # [N, K, 6]: x1, y1, x2, y2, score, class
        scores = np.abs(got[..., 4] - reference[..., 4])  # rank by rank: both sorted
        got, reference = _paired(got, reference)
        boxes = np.abs(got[:, :4] - reference[:, :4])
        result.update(rows_paired=int(len(got)), rows=int(scores.size),
                      pairing="same class, mutually nearest box")
    for what, reduce in (("max", np.max), ("mean", np.mean), ("median", np.median)):
        result[f"box_{what}_abs_px"] = float(reduce(boxes)) if boxes.size else None
    result["score_max_abs"] = float(scores.max())
    log.info("tflite-int8 detector vs fp32 on %d calibration samples: box error max %s px, "
             "mean %s px; score error max %.3g", len(x), result["box_max_abs_px"],
             result["box_mean_abs_px"], result["score_max_abs"])
    return result
