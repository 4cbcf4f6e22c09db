"""torch-int8 layer diagnosis on the trained digits CNN: hooks on the rebuilt FX graph match
the SUT's script, names pair with the FP32 capture, precisions are read from the model, and
rebuild() keeps excluded modules in FP32 (qconfig None) or damages a layer's weights."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.layers import LayerCapture, Recipe  # noqa: E402
from quantmark.sut.pytorch import diagnose  # noqa: E402
from quantmark.sut.pytorch.backend import create  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402

# conv+BN+ReLU fused (named after the conv), pools, the classifier; Flatten is bookkeeping
LAYERS = ["0", "3", "4", "7", "8", "11", "13"]
EXCLUDED = "4"


def _options(weights) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=8, threads=0,
                      model_path=str(weights))


def _sqnr(reference: np.ndarray, test: np.ndarray) -> float:
    return float(10 * np.log10((reference ** 2).sum() / ((reference - test) ** 2).sum()))


def _by_name(capture: LayerCapture) -> dict:
    return {layer.name: layer for layer in capture.layers}


@pytest.fixture(scope="module")
def built(digits_weights, digits_calibration, quantmark_cache):
    backends = {name: create(name, _options(digits_weights), DIGITS_SPEC, digits_calibration)
                for name in ("torch-int8", "torch-fp32")}
    for backend in backends.values():
        backend.load()
    yield backends
    for backend in backends.values():
        backend.close()


@pytest.fixture(scope="module")
def captures(built, digits_data):
    x = digits_data.eval_x[:4]
    return {name: diagnose.capture(backend, x) for name, backend in built.items()}


@pytest.fixture(scope="module")
def excluded(digits_weights, digits_calibration, quantmark_cache):
    backend = diagnose.rebuild("torch-int8", _options(digits_weights), DIGITS_SPEC,
                               digits_calibration, Recipe(exclude=(EXCLUDED,)))
    backend.load()
    yield backend
    backend.close()


def test_int8_and_fp32_layers_pair_by_name_with_nchw_values(captures):
    int8, fp32 = captures["torch-int8"], captures["torch-fp32"]
    assert [layer.name for layer in int8.layers] == LAYERS
    assert [layer.name for layer in fp32.layers] == LAYERS
    shapes = {"0": (4, 16, 32, 32), "3": (4, 16, 16, 16), "8": (4, 64, 8, 8), "13": (4, 10)}
    for capture in (int8, fp32):
        layers = _by_name(capture)
        for name, shape in shapes.items():
            assert layers[name].value.shape == shape and layers[name].value.dtype == np.float32
    assert _by_name(int8)["4"].op_type == "ConvReLU2d"
    assert _by_name(fp32)["4"].op_type == "Conv2d+BatchNorm2d+ReLU"  # read after the ReLU
    assert (_by_name(fp32)["4"].value >= 0).all()
    assert _by_name(int8)["4"].inputs == ("3",) and _by_name(fp32)["13"].inputs == ("11",)


def test_precision_is_read_from_the_outputs(captures):
    assert {layer.precision for layer in captures["torch-int8"].layers} == {"int8"}
    assert {layer.precision for layer in captures["torch-fp32"].layers} == {"fp32"}


def test_undamaged_int8_tracks_fp32_and_matches_the_script(built, captures, digits_data):
    fp32 = _by_name(captures["torch-fp32"])
    for layer in captures["torch-int8"].layers:
        assert 15 < _sqnr(fp32[layer.name].value, layer.value) < 80, layer.name
    # the hooked graph is the SUT's model: its last layer gives the SUT's logits
    logits = built["torch-int8"].predict(digits_data.eval_x[:4])
    np.testing.assert_allclose(captures["torch-int8"].layers[-1].value, logits, atol=1e-6)
    assert captures["torch-int8"].notes["script_max_logit_diff"] <= 1e-5
    reference = built["torch-fp32"].predict(digits_data.eval_x[:4])
    np.testing.assert_array_equal(captures["torch-fp32"].layers[-1].value, reference)


def test_exclusion_runs_that_module_in_fp32(built, excluded, digits_data):
    normal = built["torch-int8"].artifact
    assert excluded.artifact.key != normal.key and excluded.artifact.path != normal.path
    assert excluded.artifact.meta["layer_recipe"] == {"exclude": [EXCLUDED]}
    precisions = {layer.name: layer.precision
                  for layer in diagnose.capture(excluded, digits_data.eval_x[:4]).layers}
    assert precisions == {name: "fp32" if name == EXCLUDED else "int8" for name in LAYERS}
    info = excluded.describe()  # the SUT's own load-time proof accepts the mixed model
    assert info["executed_precision"] == "int8+fp32"
    assert info["evidence"] == {"quantized_compute_ops": 3, "float_compute_ops": 1}
    fp32_top1 = top1(built["torch-fp32"].predict(digits_data.eval_x), digits_data.eval_y)
    assert top1(excluded.predict(digits_data.eval_x), digits_data.eval_y) >= fp32_top1 - 1.0


def test_empty_recipe_is_the_normal_artifact(built, digits_weights, digits_calibration):
    again = diagnose.rebuild("torch-int8", _options(digits_weights), DIGITS_SPEC,
                             digits_calibration, Recipe())
    assert again.artifact.key == built["torch-int8"].artifact.key
    assert again.artifact.meta["cached"] is True


def test_damage_widens_the_weight_grid_of_that_layer_only(built, captures, digits_weights,
                                                          digits_calibration, digits_data):
    damaged = diagnose.rebuild("torch-int8", _options(digits_weights), DIGITS_SPEC,
                               digits_calibration, Recipe(damage=((EXCLUDED, 16.0),)))
    damaged.load()
    assert damaged.artifact.meta["damaged"] == {EXCLUDED: 16.0}
    levels = [len(torch.unique(diagnose.int8_graph(backend).get_submodule(EXCLUDED)
                               .weight().int_repr()))
              for backend in (built["torch-int8"], damaged)]
    assert levels[0] > 100 and levels[1] < 40  # a range 16x too wide uses few levels
    layers = _by_name(diagnose.capture(damaged, digits_data.eval_x[:4]))
    fp32, before = _by_name(captures["torch-fp32"]), _by_name(captures["torch-int8"])
    np.testing.assert_array_equal(layers["3"].value, before["3"].value)  # upstream unchanged
    assert _sqnr(fp32[EXCLUDED].value, layers[EXCLUDED].value) < \
        _sqnr(fp32[EXCLUDED].value, before[EXCLUDED].value) - 3
    damaged.close()


def test_unknown_layer_names_are_refused(digits_weights, digits_calibration):
    with pytest.raises(UserError, match="no module"):
        diagnose.rebuild("torch-int8", _options(digits_weights), DIGITS_SPEC,
                         digits_calibration, Recipe(exclude=("nope",)))
    with pytest.raises(UserError, match="torch-int8 only"):
        diagnose.rebuild("torch-fp32", _options(digits_weights), DIGITS_SPEC,
                         digits_calibration, Recipe(exclude=(EXCLUDED,)))


def test_a_relu6_only_consumer_is_read_as_part_of_its_layer():
    """conv+BN feeding only a ReLU6 is one layer in both graphs, read after the ReLU6 (the
    INT8 build quantizes that conv's output over the clamped range); so is a residual add
    (``add#0``, a layer of its own, read by the interpreter) and the ReLU6 after it, whose
    shared module runs its second call there."""
    from torch import nn
    from torch.ao.quantization.quantize_fx import fuse_fx

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.act = nn.ReLU6()
            self.conv2 = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            y = self.act(self.bn(self.conv(x)))
            return self.act(self.conv2(y) + y)

    model = Net().eval()
    layers = diagnose.graph_layers(fuse_fx(Net().eval()))
    assert [(layer.name, layer.op_type, layer.inputs) for layer in layers] == [
        ("conv", "Conv2d+ReLU6", ()), ("conv2", "Conv2d", ("conv",)),
        ("add#0", "add+ReLU6", ("conv2", "conv"))]
    plan, op_types = diagnose._fusion_plan(model)
    assert [(layer.name, layer.target, layer.call) for layer in plan] == [
        ("conv", "act", 0), ("conv2", "conv2", 0), ("add#0", "act", 1)]
    assert op_types["conv"] == "Conv2d+BatchNorm2d+ReLU6"
