"""The seed-study architectures: published sizes, torchvision names, random weights, ONNX."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from quantmark.models import torch_classic, torch_efficientnet
from quantmark.models.onnx_export import export_onnx
from quantmark.models.zoo import (
    MODEL_NAMES,
    TORCHVISION_MEAN,
    TORCHVISION_STD,
    architecture_sources,
    build_torch_model,
    get_model,
    weights_identity,
)
from tests.conftest import run_python
from tests.models.helpers import photo_crops

# name -> (architecture class/factory, parameter count published by torchvision / Keras)
ARCHITECTURES: dict[str, tuple[Callable[[], nn.Module], int]] = {
    "vgg16": (torch_classic.vgg16, 138_357_544),
    "vgg19": (torch_classic.vgg19, 143_667_240),
    # Keras MobileNet(alpha=1.0) trainable params: BN gamma/beta count, moving stats do not
    "mobilenetv1": (torch_classic.MobileNetV1, 4_231_976),
    "densenet121": (torch_classic.densenet121, 7_978_856),
    "densenet201": (torch_classic.densenet201, 20_013_928),
    "efficientnetb0": (torch_efficientnet.efficientnet_b0, 5_288_548),
}
# VGG (0.5 GB of weights) and DenseNet-201 take tens of seconds to build and calibrate on 2 cores
HEAVY = {"vgg16", "vgg19", "densenet201"}


def _heavy_marked(names: list[str]) -> list:
    return [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in names]


@cache
def random_net(name: str) -> nn.Module:
    """The zoo's seeded random network, built once per test session."""
    return build_torch_model(get_model(name))[0]


def test_seed_study_model_set_and_order() -> None:
    assert MODEL_NAMES == ("vgg16", "vgg19", "resnet50", "mobilenetv1", "mobilenetv2",
                           "densenet121", "densenet201", "digits-cnn", "efficientnetb0",
                           "efficientnet-lite1", "efficientnet-lite2", "efficientnet-lite0")


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_preprocessing_conventions(name: str) -> None:
    spec = get_model(name)
    assert (spec.input_size, spec.resize_short, spec.num_classes) == (224, 256, 1000)
    assert spec.label_offset == 0 and spec.pretrained_source is None
    if name == "mobilenetv1":  # TF/Keras weights: [-1, 1]
        assert spec.mean == spec.std == (127.5, 127.5, 127.5)
    else:  # torchvision weights: ImageNet mean/std
        assert spec.mean == TORCHVISION_MEAN == (123.675, 116.28, 103.53)
        assert spec.std == TORCHVISION_STD == (58.395, 57.12, 57.375)


def _on_meta(name: str) -> nn.Module:
    """The bare architecture with shape-only tensors: instant even for VGG's 0.5 GB."""
    with torch.device("meta"):
        return ARCHITECTURES[name][0]().eval()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_parameter_count_and_output_shape(name: str) -> None:
    model = _on_meta(name)
    assert sum(p.numel() for p in model.parameters()) == ARCHITECTURES[name][1]
    with torch.no_grad():  # shapes only here; real forwards are checked below
        assert model(torch.zeros(2, 3, 224, 224, device="meta")).shape == (2, 1000)


# key -> shape, for keys that pin torchvision's layout (indices, nesting, naming)
TORCHVISION_KEYS: dict[str, dict[str, tuple[int, ...]]] = {
    "vgg16": {"features.0.weight": (64, 3, 3, 3), "features.28.weight": (512, 512, 3, 3),
              "classifier.0.weight": (4096, 25088), "classifier.3.bias": (4096,),
              "classifier.6.weight": (1000, 4096)},
    "vgg19": {"features.34.weight": (512, 512, 3, 3), "classifier.6.bias": (1000,)},
    "densenet121": {
        "features.conv0.weight": (64, 3, 7, 7), "features.norm0.running_var": (64,),
        "features.denseblock1.denselayer1.norm1.weight": (64,),
        "features.denseblock1.denselayer1.conv1.weight": (128, 64, 1, 1),
        "features.denseblock1.denselayer6.norm2.bias": (128,),
        "features.transition1.norm.weight": (256,),
        "features.transition1.conv.weight": (128, 256, 1, 1),
        "features.transition3.conv.weight": (512, 1024, 1, 1),
        "features.denseblock4.denselayer16.conv2.weight": (32, 128, 3, 3),
        "features.norm5.weight": (1024,), "classifier.weight": (1000, 1024)},
    "densenet201": {"features.denseblock3.denselayer48.conv1.weight": (128, 1760, 1, 1),
                    "features.norm5.running_mean": (1920,), "classifier.weight": (1000, 1920)},
    "efficientnetb0": {
        "features.0.0.weight": (32, 3, 3, 3), "features.0.1.running_mean": (32,),
        "features.1.0.block.0.0.weight": (32, 1, 3, 3),  # no expand conv at ratio 1
        "features.1.0.block.1.fc1.weight": (8, 32, 1, 1),
        "features.1.0.block.2.0.weight": (16, 32, 1, 1),
        "features.2.0.block.0.0.weight": (96, 16, 1, 1),
        "features.2.0.block.2.fc2.bias": (96,),
        "features.6.3.block.1.0.weight": (1152, 1, 5, 5),
        "features.7.0.block.3.1.weight": (320,),
        "features.8.0.weight": (1280, 320, 1, 1), "features.8.1.running_var": (1280,),
        "classifier.1.weight": (1000, 1280)},
    "mobilenetv1": {  # our own names (no torchvision model), documented on MobileNetV1
        "features.0.0.weight": (32, 3, 3, 3), "features.1.depthwise.0.weight": (32, 1, 3, 3),
        "features.1.pointwise.0.weight": (64, 32, 1, 1),
        "features.13.pointwise.1.running_var": (1024,), "classifier.weight": (1000, 1024)},
}


@pytest.mark.parametrize("name", sorted(TORCHVISION_KEYS))
def test_state_dict_names(name: str) -> None:
    state = _on_meta(name).state_dict()
    shapes = {k: tuple(state[k].shape) for k in TORCHVISION_KEYS[name] if k in state}
    assert shapes == TORCHVISION_KEYS[name]


def _torchvision_models() -> ModuleType:
    try:
        import torchvision.models as tvm
    except Exception:  # absent, or a CUDA build next to CPU torch: fails beyond ImportError
        pytest.skip("torchvision not importable")
    return tvm


@pytest.mark.parametrize("name,tv_name", [("vgg16", "vgg16"), ("densenet121", "densenet121"),
                                          ("efficientnetb0", "efficientnet_b0")])
def test_matches_torchvision_when_available(name: str, tv_name: str) -> None:
    """Same keys, order and shapes as torchvision, and the same function once loaded."""
    tvm = _torchvision_models()
    theirs = getattr(tvm, tv_name)().eval()
    mine = ARCHITECTURES[name][0]().eval()
    state = theirs.state_dict()
    assert [(k, v.shape) for k, v in mine.state_dict().items()] == \
        [(k, v.shape) for k, v in state.items()]
    mine.load_state_dict(state, strict=True)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), theirs(x))


@pytest.mark.parametrize("name", _heavy_marked(sorted(ARCHITECTURES)))
def test_random_weights_not_degenerate(name: str) -> None:
    model = random_net(name)
    assert not model.training
    x = torch.from_numpy(photo_crops(get_model(name), 8, seed=0))
    with torch.no_grad():
        y = model(x)
    assert torch.isfinite(y).all()
    assert (y.std(0) > 0).all(), "some logit does not depend on the input"
    assert len(set(y.argmax(1).tolist())) >= 2, "random net predicts one class for everything"


def test_weights_identity_covers_architecture_files() -> None:
    files = {p.name for p in architecture_sources(get_model("densenet121"))}
    assert files == {"zoo.py", "torch_classic.py", "torch_nets.py"}  # torch_nets: calibration
    code = weights_identity(get_model("efficientnetb0"))["code"]
    assert set(code) == {"zoo.py", "torch_efficientnet.py", "torch_nets.py"}
    assert weights_identity(get_model("resnet50"))["code"].keys() == {"zoo.py", "torch_nets.py"}


def test_weights_identity_does_not_import_torch() -> None:
    """Cache keys are computed on every run: they must not pay torch's import (the pretrained
    Lites' weights packages are found and hashed without it too)."""
    code = ("import sys; from models.zoo import MODELS, weights_identity\n"
            "[weights_identity(s) for s in MODELS.values()]\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input": x})[0]


# float32 through deep nets with differently ordered reductions: ~1e-5 relative is typical;
# EfficientNet-B0's random net grows activations ~100x over its 16 residual SE blocks, so its
# rounding reaches ~1e-4 of the largest logit
RTOL = {"efficientnetb0": 3e-4}


@pytest.mark.parametrize("name", ["mobilenetv1", "densenet121", "efficientnetb0",
                                  pytest.param("vgg16", marks=pytest.mark.slow)])
def test_onnx_export_matches_torch(name: str) -> None:
    spec = get_model(name)
    art = export_onnx(spec)
    assert art.meta["model"] == name and art.weights == "random (seed 0)"
    x = photo_crops(spec, 3, seed=3)  # batch 3: the batch dimension must stay dynamic
    with torch.no_grad():
        ref = random_net(name)(torch.from_numpy(x)).numpy()
    got = _ort_logits(art.path, x)
    assert got.shape == (3, 1000)
    tol = RTOL.get(name, 1e-4) * max(1.0, float(np.abs(ref).max()))
    assert np.abs(got - ref).max() <= tol
    assert (got.argmax(1) == ref.argmax(1)).all()
