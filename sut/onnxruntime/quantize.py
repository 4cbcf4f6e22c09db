"""Static INT8 quantization with ONNX Runtime (QDQ format), cached like every artifact.

Recipe, measured on this 2-core AVX-512 VNNI box (EfficientNet-Lite0, batch 8, 2 threads):

* ``quant_pre_process`` first: it fuses BN/activations and infers shapes, so more ops get
  quantized and fewer Q/DQ pairs remain (INT8/FP32 time 0.40 with it vs 0.57 without).
* activations **uint8**, weights **int8 per-channel** (U8S8): the form MLAS's VNNI kernels
  run natively. S8S8 was 2x slower here (ratio ~0.80) with identical top-1 agreement.
* **MinMax** calibration: same top-1 agreement as Percentile on our checks (0.875 of 48
  crops for Lite0) at half the calibration time; Entropy is slower still.

A detector (its fp32 meta's ``task``) keeps its head's post-processing float in every INT8
model, static and dynamic (``detection``: the nodes, found by structure, go to
``nodes_to_exclude``); its task and head join every artifact key made from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnxruntime.quantization import (
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.detector_graph import is_detector, task_key
from quantmark.models.qdq import ArrayReader, check_nchw_calibration, count_qdq_nodes
from quantmark.models.text_graph import is_text, token_feeds
from quantmark.sut.layers import Recipe

#: the INT8 calibration table ONNX Runtime's TensorRT provider reads (ort-trt-int8)
TABLE_RECIPE: dict[str, Any] = {"calibrator": "onnxruntime MinMax", "symmetric": True,
                                "table": "write_calibration_table (flatbuffers)",
                                "calibration_batch": 8, "version": 1}
#: ONNX Runtime's graph optimizers that would undo ``nodes_to_exclude``: WeightBiasQuantization
#: quantizes the FP32 weights of a node whose neighbours' Q/DQ pairs surround it, and the node
#: then runs QLinearConv after all (seen in the profiler). Sessions of a model with excluded
#: nodes are created without them (``OnnxRuntimeBackend`` reads the artifact's meta).
KEEP_FP32_DISABLED_OPTIMIZERS = ("WeightBiasQuantization",)
#: bump when what ``nodes_to_exclude`` or ``damage_weights`` make changes
CHANGES_VERSION = 3
QUANT_RECIPE: dict[str, Any] = {
    "format": "QDQ", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
    "calibrate_method": "MinMax", "pre_process": True, "calibration_batch": 8, "version": 1,
}


class ModelInputReader(ArrayReader):
    """Calibration batches exactly as given: already in the model's layout and input type (the
    provider's ``arrays(layout)``: float32, or a raw-pixel model's uint8), so neither
    transposed nor cast."""

    def _batches(self) -> Iterator[np.ndarray]:
        for i in range(0, len(self.data), self.batch):
            yield np.ascontiguousarray(self.data[i:i + self.batch])


class TokenInputReader(ArrayReader):
    """A text model's calibration: token samples ``[N, 3, L]`` fed as its named inputs, each
    batch cut to its longest sequence (as the run feeds dynamic batches)."""

    def __init__(self, data: np.ndarray, inputs: tuple[str, ...], batch: int = 8) -> None:
        super().__init__(data, inputs[0], batch=batch)
        self.inputs = inputs

    def get_next(self) -> dict[str, np.ndarray] | None:
        chunk = next(self._it, None)
        if chunk is None:
            self.exhausted_at = self.exhausted_at or time.perf_counter()
            return None
        return {name: np.ascontiguousarray(value)
                for name, value in token_feeds(chunk, self.inputs, dynamic=True).items()}

    def _batches(self) -> Iterator[np.ndarray]:
        for i in range(0, len(self.data), self.batch):
            yield self.data[i:i + self.batch]


def _reader(fp32: Artifact, calibration: np.ndarray) -> ArrayReader:
    """The calibration reader for ``fp32``'s inputs: token rows for a text model, else the
    one image input."""
    if is_text(fp32.meta):
        return TokenInputReader(calibration, tuple(fp32.meta["inputs"]),
                                batch=QUANT_RECIPE["calibration_batch"])
    return ModelInputReader(calibration, fp32.meta.get("input_name", "input"),
                            batch=QUANT_RECIPE["calibration_batch"])


#: what a transformer's static INT8 quantizes: the MatMul/Gemm layers with a weight (the
#: projections and the feed-forward), as dynamic INT8 does, and nothing else. Measured on
#: MiniLM (2026-11-29, cosine to FP32 over 1,891 sentences): every op quantized, the image
#: recipe (the attention mask's Add, near float32's minimum, on an int8 grid), 34.7%; every
#: MatMul/Gemm, attention's two activation products included, 93.4%; these alone 93.5% (93.7%
#: with Percentile calibration on fixed-length batches: the loss is per-tensor activation
#: quantization of a transformer's outlier channels, which SmoothQuant, not installed here
#: (ORT's needs neural-compressor), addresses; NNCF's transformer scheme in ov-int8 does).
TEXT_RULE = "MatMul/Gemm with a weight input only"


def text_quantize_options(fp32: Artifact, model: Path | None = None) -> dict[str, Any]:
    """quantize_static's ``nodes_to_quantize`` for a text model (``model``: the graph being
    quantized; without it, only the rule, for the cache key). Nothing for an image model: its
    recipe, and so its cache keys, stay as they were."""
    if not is_text(fp32.meta):
        return {}
    if model is None:
        return {"text_rule": TEXT_RULE}
    graph = onnx.load(str(model), load_external_data=False).graph
    weights = {init.name for init in graph.initializer}
    return {"nodes_to_quantize": [node.name for node in graph.node
                                  if node.op_type in ("MatMul", "Gemm")
                                  and any(name in weights for name in node.input)]}


def pre_process_options(fp32: Artifact) -> dict[str, Any]:
    """quant_pre_process's options for ``fp32``: a transformer's symbolic shapes (sequence
    arithmetic) defeat ORT's symbolic inference, so a text model gets ONNX's own only."""
    return {"skip_symbolic_shape": True} if is_text(fp32.meta) else {}


def check_calibration(calibration: np.ndarray, layout: str) -> None:
    """A non-empty 4-D batch of 1- or 3-channel images in ``layout``, or of token samples
    ``[N, 3, L]`` for a text model."""
    if layout == "tokens":
        if calibration.ndim != 3 or calibration.shape[1] != 3 or len(calibration) == 0:
            raise ValueError(f"calibration must be a non-empty [N, 3, L] batch of token "
                             f"samples, got {calibration.shape}")
        return
    channels = calibration.shape[1 if layout == "NCHW" else -1] if calibration.ndim == 4 else 0
    if calibration.ndim != 4 or channels not in (1, 3) or len(calibration) == 0:
        raise ValueError(f"calibration must be a non-empty {layout} batch of 1- or 3-channel "
                         f"images, got {calibration.shape}")


def quantize_key(fp32: Artifact, calibration_hash: str, changes: Recipe | None = None) -> str:
    key: dict[str, Any] = {"what": "ort-static-int8", "fp32": fp32.key,
                           "calibration": calibration_hash, "recipe": QUANT_RECIPE,
                           "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__}
    if changes is not None and changes.key():  # an unchanged recipe keeps its key
        key["changes"] = {**changes.key(), "version": CHANGES_VERSION}
    return hash_json({**key, **task_key(fp32.meta), **text_quantize_options(fp32)})


def quantize_static_int8(fp32: Artifact, calibration: np.ndarray, calibration_hash: str,
                         changes: Recipe | None = None) -> Artifact:
    """INT8 QDQ copy of ``fp32``, calibrated on ``calibration``: samples as the model takes
    them (its layout, channels, size and input type; the provider's ``arrays(layout)``).

    ``calibration_hash`` identifies the calibration set (the caller knows how it was made);
    the cache key combines it with the fp32 key and the recipe. ``changes`` (``run.py
    diagnose``): nodes kept in FP32 (``nodes_to_exclude``) and injected weight faults.
    """
    changes = changes or Recipe()
    check_calibration(calibration, fp32.meta.get("layout", "NCHW"))
    key = quantize_key(fp32, calibration_hash, changes)
    model = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        progress(f"quantizing {model} to INT8 on {len(calibration)} calibration samples"
                 f"{describe_changes(changes)} ...")
        pre = folder / "pre.onnx"
        t0 = time.perf_counter()
        quant_pre_process(str(fp32.path), str(pre), **pre_process_options(fp32))
        pre_s = time.perf_counter() - t0
        head, head_meta = _float_head(fp32, pre)
        reader = _reader(fp32, calibration)
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-int8.onnx"
        t1 = time.perf_counter()
        quantize_static(
            str(pre), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=True,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=[*changes.exclude, *head] or None,
            **text_quantize_options(fp32, pre),
        )
        damaged = {name: factor for name, factor in changes.damage
                   if name not in changes.exclude}  # a layer kept in FP32 has no INT8 fault
        if damaged:
            damage_weights(out, damaged)
        total_s = time.perf_counter() - t1
        calib_s = (reader.exhausted_at or time.perf_counter()) - t1
        pre.unlink()
        progress(f"quantized {model} in {total_s:.1f} s")
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "recipe")}
        meta.update({
            "quant_recipe": {**QUANT_RECIPE, **text_quantize_options(fp32)},
            "calibration_hash": calibration_hash,
            "calibration_samples": int(len(calibration)), "fp32_key": fp32.key,
            "onnxruntime": onnxruntime.__version__, "sha256": hash_file(out),
            "qdq": count_qdq_nodes(out), **({"changes": changes.key()} if changes.key() else {}),
        })
        if changes.exclude or head:
            meta["session_disabled_optimizers"] = list(KEEP_FP32_DISABLED_OPTIMIZERS)
        meta.update(head_meta)
        # calibration_s: quantize_static start until the calibration data ran out (augmented
        # model inference); quantize_s: everything, pre-processing included.
        return Artifact(
            path=out, format="onnx", precision="int8", key=key, weights=fp32.weights,
            source_hash=fp32.meta.get("sha256") or hash_file(fp32.path),
            times={"pre_process_s": round(pre_s, 3), "calibration_s": round(calib_s, 3),
                   "quantize_s": round(pre_s + total_s, 3)},
            meta=meta,
        )

    return cached_build(model, key, build)


def _float_head(fp32: Artifact, pre: Path) -> tuple[list[str], dict[str, Any]]:
    """A detector's head post-processing nodes in the pre-processed model (the names the
    quantizer reads), kept float, and what the artifact records of them; none for a
    classifier."""
    if not is_detector(fp32.meta):
        return [], {}
    from quantmark.sut.onnxruntime.detection import float_head_meta, head_nodes

    head, stops = head_nodes(pre, f"model {fp32.meta.get('model', fp32.path.stem)}")
    return head, float_head_meta(head, stops)


def describe_changes(changes: Recipe) -> str:
    """", 2 nodes kept in FP32, 1 weight fault injected" (empty for the normal recipe)."""
    parts = [f"{len(changes.exclude)} node(s) kept in FP32"] if changes.exclude else []
    parts += [f"{len(changes.damage)} weight fault(s) injected"] if changes.damage else []
    return f" ({', '.join(parts)})" if parts else ""


def damage_weights(path: Path, factors: dict[str, float]) -> None:
    """Inject a fault for testing diagnosis: each named node's quantized weights re-quantized
    over a range ``factor`` times too wide (scale x factor, integers divided and rounded), as
    a recipe with a broken weight range would make them. The node's int32 bias follows (its
    scale must stay input scale x weight scale, or ORT would not fuse the node into an integer
    kernel). Rewrites the QDQ model in place."""
    proto = onnx.load(str(path))
    init = {tensor.name: tensor for tensor in proto.graph.initializer}
    dequantizers = {node.output[0]: node for node in proto.graph.node
                    if node.op_type == "DequantizeLinear"}
    nodes = {node.name: node for node in proto.graph.node}
    for name, factor in factors.items():
        node = nodes.get(name)
        quantized = [dequantizers.get(tensor) for tensor in (node.input[1:3] if node else [])]
        if not quantized or quantized[0] is None or any(
                dq is not None and (dq.input[0] not in init or dq.input[1] not in init)
                for dq in quantized):
            raise UserError(f"--damage {name}: no node of that name with quantized weights in "
                            f"the INT8 model of {path.stem}; name a Conv/Gemm/MatMul node (a "
                            "diagnosis' layers.csv lists them)")
        for dq in quantized:  # the weights, then the bias when it is quantized too
            if dq is not None:
                _widen(init[dq.input[0]], init[dq.input[1]], factor)
    onnx.save(proto, str(path))


def _widen(values: onnx.TensorProto, scale: onnx.TensorProto, factor: float) -> None:
    """Integers divided by ``factor`` (rounded, clipped), their scale multiplied by it."""
    from onnx import numpy_helper

    array = numpy_helper.to_array(values)
    info = np.iinfo(array.dtype)
    wider = np.clip(np.round(array / factor), info.min, info.max).astype(array.dtype)
    values.CopyFrom(numpy_helper.from_array(wider, values.name))
    scaled = (numpy_helper.to_array(scale) * factor).astype(np.float32)
    scale.CopyFrom(numpy_helper.from_array(scaled, scale.name))


# --------------------------------------------------------------------------- dynamic INT8

DYNAMIC_RECIPE: dict[str, Any] = {"weight_type": "QInt8", "per_channel": True,
                                  "pre_process": True, "op_types": "default",
                                  "exclude": "depthwise Conv (group > 1)", "version": 2}


def quantize_dynamic_int8(fp32: Artifact) -> Artifact:
    """Dynamic INT8: weights quantized offline, activations quantized per call from their
    observed range (no calibration). ORT runs convolutions as ConvInteger, which MLAS does not
    accelerate like QLinearConv: on CNNs it is expected to be slower than FP32 (see BENCHMARKS.md at
    ab1032b, "Every CPU SUT: Offline throughput"); the SUT reports it rather than hiding it.

    Depthwise convolutions stay FP32: dynamic per-tensor activation quantization of them cost
    EfficientNet-Lite0 12 points of top-1 on the built-in photos (55.7% vs 67.6%; 69.3% with
    them excluded), whatever the weight type or per-channel setting."""
    from onnxruntime.quantization import quantize_dynamic

    key = hash_json({"what": "ort-dynamic-int8", "fp32": fp32.key, "recipe": DYNAMIC_RECIPE,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
                     **task_key(fp32.meta)})
    model = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        progress(f"dynamic INT8 quantization of {model} ...")
        pre = folder / "pre.onnx"
        started = time.perf_counter()
        # shape inference first: the dynamo export carries value_info that quantize_dynamic's
        # own inference contradicts (classifier dims) unless pre-processed
        quant_pre_process(str(fp32.path), str(pre), **pre_process_options(fp32))
        head, head_meta = _float_head(fp32, pre)
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-int8dyn.onnx"
        quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_exclude=[*_depthwise_convs(pre), *head])
        seconds = time.perf_counter() - started
        pre.unlink()
        progress(f"quantized {model} in {seconds:.1f} s")
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "recipe")}
        meta.update({"quant_recipe": DYNAMIC_RECIPE, "fp32_key": fp32.key,
                     "onnxruntime": onnxruntime.__version__, "sha256": hash_file(out),
                     "qdq": count_qdq_nodes(out), **head_meta})
        return Artifact(path=out, format="onnx", precision="int8-dynamic", key=key,
                        weights=fp32.weights,
                        source_hash=fp32.meta.get("sha256") or hash_file(fp32.path),
                        times={"quantize_s": round(seconds, 3)}, meta=meta)

    return cached_build(model, key, build)


def _depthwise_convs(path: Path) -> list[str]:
    """Names of the grouped (depthwise) Conv nodes, which dynamic quantization leaves FP32."""
    proto = onnx.load(str(path), load_external_data=False)
    return [node.name for node in proto.graph.node if node.op_type == "Conv"
            and any(a.name == "group" and a.i > 1 for a in node.attribute)]


# --------------------------------------------------------------------------- FP16

FP16_RECIPE: dict[str, Any] = {"converter": "onnxruntime.transformers.float16",
                               "keep_io_types": True, "version": 1}


def convert_fp16(fp32: Artifact) -> Artifact:
    """FP16 weights and activations, float32 inputs and outputs (casts at the edges only)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    key = hash_json({"what": "ort-fp16", "fp32": fp32.key, "recipe": FP16_RECIPE,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
                     **task_key(fp32.meta)})
    model = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        started = time.perf_counter()
        proto = convert_float_to_float16(onnx.load(str(fp32.path)), keep_io_types=True)
        out = folder / f"{fp32.path.stem.removesuffix('-fp32')}-fp16.onnx"
        onnx.save(proto, str(out))
        seconds = time.perf_counter() - started
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "recipe")}
        meta.update({"fp16_recipe": FP16_RECIPE, "fp32_key": fp32.key,
                     "onnxruntime": onnxruntime.__version__, "sha256": hash_file(out)})
        return Artifact(path=out, format="onnx", precision="fp16", key=key,
                        weights=fp32.weights,
                        source_hash=fp32.meta.get("sha256") or hash_file(fp32.path),
                        times={"convert_s": round(seconds, 3)}, meta=meta)

    return cached_build(model, key, build)


def tensorrt_calibration_table(fp32: Artifact, calibration: np.ndarray,
                               calibration_hash: str) -> Artifact:
    """ONNX Runtime's INT8 calibration table for the TensorRT provider, cached as an artifact:
    MinMax ranges (symmetric) of every float tensor of ``fp32`` over ``calibration`` (NCHW,
    transposed for an NHWC model; the model's input type), written by
    ``write_calibration_table`` (``calibration.flatbuffers``)."""
    from onnxruntime.quantization.calibrate import create_calibrator
    from onnxruntime.quantization.quant_utils import write_calibration_table

    check_nchw_calibration(calibration)
    key = hash_json({"what": "ort-trt-calibration-table", "fp32": fp32.key,
                     "calibration": calibration_hash, "recipe": TABLE_RECIPE,
                     "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__})
    model = fp32.meta.get("model", fp32.path.stem)

    def build(folder: Path) -> Artifact:
        progress(f"calibrating {model} for the TensorRT provider on {len(calibration)} "
                 "samples ...")
        started = time.perf_counter()
        augmented = folder / "augmented.onnx"
        calibrator = create_calibrator(str(fp32.path), augmented_model_path=str(augmented),
                                       calibrate_method=CalibrationMethod.MinMax,
                                       providers=["CPUExecutionProvider"],
                                       extra_options={"symmetric": True})
        nchw = fp32.meta.get("layout", "NCHW") == "NCHW"
        samples = calibration if nchw else calibration.transpose(0, 2, 3, 1)
        calibrator.collect_data(ModelInputReader(samples, fp32.meta.get("input_name", "input"),
                                                 batch=TABLE_RECIPE["calibration_batch"]))
        ranges = calibrator.compute_data()
        write_calibration_table(ranges, dir=str(folder))
        augmented.unlink(missing_ok=True)
        table = folder / "calibration.flatbuffers"
        seconds = time.perf_counter() - started
        meta = {"model": model, "table_recipe": TABLE_RECIPE, "fp32_key": fp32.key,
                "calibration_hash": calibration_hash,
                "calibration_samples": int(len(calibration)),
                "tensors": len(list(ranges.keys())), "onnxruntime": onnxruntime.__version__,
                "sha256": hash_file(table)}
        return Artifact(path=table, format="ort-trt-calibration-table", precision="int8",
                        key=key, weights=fp32.weights,
                        source_hash=fp32.meta.get("sha256") or hash_file(fp32.path),
                        times={"calibration_s": round(seconds, 3)}, meta=meta)

    return cached_build(model, key, build)
