"""TensorRT diagnosis (``sut.tensorrt.diagnose``): the parts that need no GPU run here (the
engine inspector's JSON read per ONNX node, the cache key of a recipe, FP32 exclusion and
output marking on stand-in networks, the layers chosen on the digits ONNX, the refusals); the
capture and rebuild themselves need TensorRT and an NVIDIA GPU and say why they skip."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.layers import Recipe
from quantmark.sut.tensorrt import build as trt_build
from quantmark.sut.tensorrt import diagnose
from quantmark.sut.tensorrt.build import BatchProfile, engine_cache_key, keep_fp32, layer_node
from tests.sut.tensorrt import gpu_skip_reason

# --------------------------------------------------------------------------- inspector JSON

FP32 = "Row major linear FP32 format"
HALF = "Channel major FP16 format where channel % 8 == 0"
INT8 = "Thirty-two wide channel vectorized row major Int8 format"


def _io(name: str, kind: str) -> list[dict]:
    return [{"Name": name, "Location": "Device", "Dimensions": [4, 16, 32, 32],
             "Format/Datatype": kind}]


def _engine_layer(name: str, layer_type: str, consumed: str, produced: str,
                  metadata: str | None, **extra) -> dict:
    layer = {"Name": name, "LayerType": layer_type, "Inputs": _io("in", consumed),
             "Outputs": _io("out", produced), "TacticValue": "0x0000000000000001",
             "StreamId": 0, **extra}
    if metadata is not None:
        layer["Metadata"] = metadata
    return layer


#: shaped like TensorRT 10's ``get_engine_information(LayerInformationFormat.JSON)`` of a
#: DETAILED engine: fused layers name their ONNX nodes in Metadata, joined by \x1f
INSPECTOR = {"Layers": [
    _engine_layer("Reformatting CopyNode for Input Tensor 0 to node_Conv_54 + node_relu",
                  "Reformat", FP32, HALF, "[ONNX Layer: node_Conv_54]", Origin="REFORMAT"),
    _engine_layer("node_Conv_54 + node_relu", "CaskConvolution", HALF, INT8,
                  "[ONNX Layer: node_Conv_54]\x1f[ONNX Layer: node_relu]",
                  ParameterType="Convolution", Kernel=[3, 3], HasReLU=1,
                  Weights={"Type": "Half", "Count": 432}),
    _engine_layer("node_max_pool2d", "CaskPooling", INT8, INT8,
                  "[ONNX Layer: node_max_pool2d]", ParameterType="Pooling"),
    _engine_layer("node_Conv_56 + node_relu_1", "CaskConvolution", INT8, INT8,
                  "[ONNX Layer: node_Conv_56]\x1e[ONNX Layer: node_relu_1]",
                  Weights={"Type": "Int8", "Count": 4608}),
    _engine_layer("node_mean", "CaskReduce", FP32, FP32, "[ONNX Layer: node_mean]"),
    _engine_layer("{ForeignNode[node_linear...node_softmax]}", "Myelin", HALF, FP32, None),
    _engine_layer("node_bias + PWN(PWN(node_sigmoid), node_mul)", "PointWiseV2", HALF, HALF,
                  ""),
    "a layer printed as a bare name",
], "Bindings": ["input", "logits"]}


def test_node_precisions_read_the_inspector_per_onnx_node():
    found = diagnose.node_precisions(json.dumps(INSPECTOR))
    assert found == {"node_Conv_54": "fp16", "node_relu": "fp16", "node_max_pool2d": "int8",
                     "node_Conv_56": "int8", "node_relu_1": "int8", "node_mean": "fp32",
                     "node_bias": "fp16", "node_sigmoid": "fp16", "node_mul": "fp16"}
    assert "node_linear" not in found  # a Myelin range names only its ends
    assert diagnose.node_precisions({}) == {} and diagnose.node_precisions({"Layers": 3}) == {}


def test_a_reformat_names_a_node_only_when_no_compute_layer_does():
    reformat_only = {"Layers": [INSPECTOR["Layers"][0]]}
    assert diagnose.node_precisions(reformat_only) == {"node_Conv_54": "fp32"}  # consumed
    int8_conv = _engine_layer("node_Conv_54", "CaskConvolution", INT8, INT8,
                              "[ONNX Layer: node_Conv_54]")
    both = {"Layers": [INSPECTOR["Layers"][0], int8_conv]}
    assert diagnose.node_precisions(both) == {"node_Conv_54": "int8"}


def test_engine_layer_nodes_and_the_precision_fallback():
    assert diagnose.engine_layer_nodes({"Name": "a + b", "Metadata": ""}) == ["a", "b"]
    assert diagnose.engine_layer_nodes({"Name": "x", "Metadata": "[ONNX Layer: /m/Conv]"}) \
        == ["/m/Conv"]
    assert diagnose.engine_layer_nodes({"Name": "{ForeignNode[a...b]}"}) == []
    assert diagnose.layer_precision("a", {"a": "int8"}, {"a": "fp16"}) == "int8"
    assert diagnose.layer_precision("a", {}, {"a": "fp16"}) == "fp16"
    assert diagnose.layer_precision("a", {}, {}) == "unknown"


# --------------------------------------------------------------------------- cache key

KEY_ARGS = dict(onnx_key="onnx0", precision="int8", profile=BatchProfile(1, 8, 8),
                trt_version="10.13.0.35", gpu_name="NVIDIA H100 80GB HBM3",
                compute_capability="sm_90", calibration_hash="calib0", route="calibrator")


def test_an_empty_recipe_keeps_the_engine_key():
    base = engine_cache_key(**KEY_ARGS)
    assert engine_cache_key(**KEY_ARGS, layer_recipe=Recipe().key()) == base
    assert engine_cache_key(**KEY_ARGS, layer_recipe=None) == base
    one = engine_cache_key(**KEY_ARGS, layer_recipe=Recipe(exclude=("b", "a")).key())
    assert one != base
    assert one == engine_cache_key(**KEY_ARGS, layer_recipe=Recipe(exclude=("a", "b")).key())
    assert one != engine_cache_key(**KEY_ARGS, layer_recipe=Recipe(exclude=("a",)).key())


# --------------------------------------------------------------------------- stand-in networks

FLOAT, HALF_T, INT32 = "float32", "float16", "int32"


class _Tensor:
    def __init__(self, name: str, dtype: str = FLOAT, output: bool = False) -> None:
        self.name, self.dtype, self.is_network_output = name, dtype, output


class _Layer:
    def __init__(self, name: str, kind: str, outputs: list[_Tensor], metadata: str = "") -> None:
        self.name, self.metadata, self.outputs = name, metadata, outputs
        self.type = types.SimpleNamespace(name=kind)
        self.precision = None
        self.output_types: dict[int, str] = {}

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def get_output(self, index: int) -> _Tensor:
        return self.outputs[index]

    def set_output_type(self, index: int, dtype: str) -> None:
        self.output_types[index] = dtype


class _Network:
    def __init__(self, layers: list[_Layer]) -> None:
        self.layers, self.marked = layers, []

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def get_layer(self, index: int) -> _Layer:
        return self.layers[index]

    def mark_output(self, tensor: _Tensor) -> None:
        tensor.is_network_output = True
        self.marked.append(tensor.name)


class _Config:
    def __init__(self) -> None:
        self.flags: set[str] = set()

    def set_flag(self, flag: str) -> None:
        self.flags.add(flag)


FAKE_TRT = types.SimpleNamespace(float32=FLOAT, float16=HALF_T,
                                 BuilderFlag=types.SimpleNamespace(
                                     OBEY_PRECISION_CONSTRAINTS="OBEY"))


def _network() -> _Network:
    """Layers as TensorRT's ONNX parser makes them: a Gemm is a matrix multiply and a bias add
    with the node's metadata; a shape computation yields int32."""
    return _Network([
        _Layer("node_Conv_54", "CONVOLUTION", [_Tensor("conv")],
               "[ONNX Layer: node_Conv_54]"),
        _Layer("node_relu", "ACTIVATION", [_Tensor("relu")], "[ONNX Layer: node_relu]"),
        _Layer("node_linear_weights", "CONSTANT", [_Tensor("w")], "[ONNX Layer: node_linear]"),
        _Layer("node_linear", "MATRIX_MULTIPLY", [_Tensor("mm", HALF_T)],
               "[ONNX Layer: node_linear]"),
        _Layer("node_linear_bias", "ELEMENTWISE", [_Tensor("logits", output=True)],
               "[ONNX Layer: node_linear]"),
        _Layer("shape_of", "SHAPE", [_Tensor("shape", INT32)]),
        _Layer("node_gather", "GATHER", [_Tensor("index", INT32)]),
    ])


def test_layer_node_prefers_metadata_over_the_layer_name():
    network = _network()
    assert layer_node(network.layers[4]) == "node_linear"
    assert layer_node(network.layers[5]) == "shape_of"


def test_keep_fp32_constrains_every_layer_of_the_node_and_obeys():
    network, config = _network(), _Config()
    forced = keep_fp32(FAKE_TRT, network, config, ("node_linear", "node_gather"))
    assert forced == {"node_linear": ["node_linear", "node_linear_bias"],
                      "node_gather": ["node_gather"]}
    by_name = {layer.name: layer for layer in network.layers}
    assert by_name["node_linear"].precision == FLOAT
    assert by_name["node_linear"].output_types == {0: FLOAT}  # fp16 output forced to fp32
    assert by_name["node_linear_bias"].output_types == {0: FLOAT}
    assert by_name["node_gather"].output_types == {}  # an int32 output keeps its type
    assert by_name["node_linear_weights"].precision is None  # constants are not constrained
    assert by_name["node_Conv_54"].precision is None and by_name["node_relu"].precision is None
    assert config.flags == {"OBEY"}


def test_keep_fp32_refuses_an_unknown_node():
    config = _Config()
    with pytest.raises(UserError, match="node_nowhere"):
        keep_fp32(FAKE_TRT, _network(), config, ("node_relu", "node_nowhere"))
    assert not config.flags


def test_mark_outputs_marks_float_tensors_and_lists_the_rest():
    network = _network()
    marked, missing = diagnose._mark_outputs(FAKE_TRT, network,
                                             ["relu", "mm", "logits", "shape", "folded"])
    assert marked == ["relu", "mm", "logits"] and missing == ["shape", "folded"]
    assert network.marked == ["relu", "mm"]  # the logits were an output already


# --------------------------------------------------------------------------- refusals

def _options(**extra) -> SutOptions:
    return SutOptions(model="digits-cnn", scenario="Offline", extra=extra)


@pytest.mark.parametrize(("name", "extra", "recipe", "message"), [
    ("trt-int8", {}, Recipe(damage=(("node_Conv_54", 4.0),)), "inject no faults"),
    ("trt-int8", {"trt_int8_route": "qdq"}, Recipe(exclude=("node_Conv_54",)), "calibrator"),
    ("trt-fp32", {}, Recipe(exclude=("node_Conv_54",)), "FP32 already"),
    ("trt-int8", {"trt_int8_route": "magic"}, Recipe(exclude=("x",)), "choose one of"),
])
def test_rebuild_refuses_before_any_build(name, extra, recipe, message):
    with pytest.raises(UserError, match=message):
        diagnose.rebuild(name, _options(**extra), None, None, recipe)


def test_contract_lines():
    assert diagnose.EXCLUSION == "layer.precision = FP32 with OBEY_PRECISION_CONSTRAINTS"
    assert diagnose.DAMAGE == ""
    trt_build.check_recipe("int8", "calibrator", Recipe(exclude=("a",)))
    trt_build.check_recipe("fp32", None, Recipe())


# --------------------------------------------------------------------------- the digits ONNX

def test_capture_layers_of_the_digits_onnx(digits_weights):
    pytest.importorskip("onnx")
    from quantmark.models.source import fp32_onnx
    from tests.digits_model import DIGITS_SPEC

    layers = diagnose.capture_layers(fp32_onnx(DIGITS_SPEC, str(digits_weights)).path)
    ops = [layer.op_type for layer in layers]
    assert ops == ["Conv", "MaxPool", "Conv", "MaxPool", "Conv", "ReduceMean", "Gemm"]
    names = [layer.name for layer in layers]
    assert len(set(names)) == len(names)
    for before, layer in zip(layers, layers[1:], strict=False):
        assert layer.inputs == (before.name,)  # a chain, through Flatten to the Gemm
    assert layers[0].tensor != layers[0].name  # the conv's value is its ReLU's output


# --------------------------------------------------------------------------- on a GPU

def _sqnr(ref: np.ndarray, test: np.ndarray) -> float:
    noise = float(np.sum((ref.astype(np.float64) - test) ** 2))
    return 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / max(noise, 1e-30))


def _create(name, digits_weights, digits_calibration, recipe=None):
    from quantmark.sut.tensorrt import backend as trt_sut
    from tests.digits_model import DIGITS_SPEC

    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=16,
                         model_path=str(digits_weights))
    if recipe is None:
        return trt_sut.create(name, options, DIGITS_SPEC, digits_calibration)
    return diagnose.rebuild(name, options, DIGITS_SPEC, digits_calibration, recipe)


@pytest.mark.gpu
@pytest.mark.skipif(gpu_skip_reason() is not None, reason=str(gpu_skip_reason()))
def test_capture_int8_against_fp32_on_the_gpu(digits_weights, digits_calibration, digits_data):
    fp32 = _create("trt-fp32", digits_weights, digits_calibration)
    int8 = _create("trt-int8", digits_weights, digits_calibration)
    samples = digits_data.eval_x[:4]
    ref, test = diagnose.capture(fp32, samples), diagnose.capture(int8, samples)
    names = [layer.name for layer in ref.layers]
    assert names == [layer.name for layer in test.layers] and len(names) == 7
    assert {layer.precision for layer in ref.layers} == {"fp32"}
    convs = [layer for layer in test.layers if layer.op_type == "Conv"]
    assert any(layer.precision == "int8" for layer in convs), test.layers
    for a, b in zip(ref.layers, test.layers, strict=True):
        assert a.value.shape == b.value.shape and a.value.shape[0] == 4
        assert a.value.dtype == np.float32 and np.isfinite(b.value).all()
        assert _sqnr(a.value, b.value) > 15, (a.name, _sqnr(a.value, b.value))
    assert [layer.value.shape[1] for layer in ref.layers if layer.op_type == "Conv"] == \
        [16, 32, 64]  # NCHW: channels second
    fp32.load()  # the last layer is the logits the SUT predicts, beyond one batch too
    many = digits_data.eval_x[:11]
    logits = diagnose.capture(fp32, many).layers[-1].value
    np.testing.assert_allclose(logits, fp32.predict(many), rtol=1e-3, atol=1e-3)
    fp32.close()


@pytest.mark.gpu
@pytest.mark.skipif(gpu_skip_reason() is not None, reason=str(gpu_skip_reason()))
def test_rebuild_keeps_an_excluded_layer_in_fp32_on_the_gpu(digits_weights, digits_calibration,
                                                            digits_data):
    from tests.digits_model import top1

    int8 = _create("trt-int8", digits_weights, digits_calibration)
    same = _create("trt-int8", digits_weights, digits_calibration, Recipe())
    assert same.artifact.key == int8.artifact.key
    samples = digits_data.eval_x[:4]
    before = {layer.name: layer.precision for layer in diagnose.capture(int8, samples).layers}
    excluded = next(name for name, precision in before.items() if precision == "int8")
    rebuilt = _create("trt-int8", digits_weights, digits_calibration,
                      Recipe(exclude=(excluded,)))
    assert rebuilt.artifact.key != int8.artifact.key
    after = {layer.name: layer.precision for layer in diagnose.capture(rebuilt, samples).layers}
    assert after[excluded] == "fp32"
    assert any(p == "int8" for name, p in after.items() if name != excluded), after
    rebuilt.load()
    int8.load()
    scores = top1(rebuilt.predict(digits_data.eval_x), digits_data.eval_y)
    assert abs(scores - top1(int8.predict(digits_data.eval_x), digits_data.eval_y)) <= 1.5
    rebuilt.close()
    int8.close()
