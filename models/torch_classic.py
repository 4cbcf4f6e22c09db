"""VGG-16/19, MobileNetV1 and DenseNet-121/201 written out in plain torch.

VGG and DenseNet use torchvision's module names (``features.28.weight``, ``classifier.6.bias``,
``features.denseblock4.denselayer16.conv2.weight``, ``features.norm5.running_var`` ...), so a
torchvision state_dict loads with ``strict=True``; torchvision itself is not imported (its
wheels here are CUDA builds). torchvision has no MobileNetV1: its names are ours, see
``MobileNetV1``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from quantmark.models.torch_nets import ConvBNReLU6, _init_weights

# --------------------------------------------------------------------------- VGG

# conv output channels, "M" = 2x2 max pool (configurations "D" and "E" of the VGG paper)
VGG_CONFIGS: dict[int, tuple[int | str, ...]] = {
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
         512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"),
}


class VGG(nn.Module):
    """VGG without batch norm: ``features`` (conv, ReLU, ..., pool), ``avgpool``, ``classifier``.

    ``features`` is one flat Sequential, so conv indices (0, 2, 5, ...) match torchvision's;
    ``classifier`` is Linear/ReLU/Dropout x2 then Linear (indices 0, 3, 6 carry weights).
    """

    def __init__(self, depth: int = 16, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for item in VGG_CONFIGS[depth]:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                assert isinstance(item, int)
                layers += [nn.Conv2d(in_ch, item, 3, padding=1), nn.ReLU()]
                in_ch = item
        self.features = nn.Sequential(*layers)
        # identity at 224x224; kept so other input sizes still reach the 7x7x512 classifier
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
        _init_weights(self, linear_std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def vgg16(num_classes: int = 1000) -> VGG:
    """VGG-16 (138,357,544 parameters with 1000 classes)."""
    return VGG(16, num_classes)


def vgg19(num_classes: int = 1000) -> VGG:
    """VGG-19 (143,667,240 parameters with 1000 classes)."""
    return VGG(19, num_classes)


# --------------------------------------------------------------------------- MobileNetV1


class DepthwiseSeparable(nn.Module):
    """3x3 depthwise conv-BN-ReLU6 (stride here), then 1x1 pointwise conv-BN-ReLU6."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.depthwise = ConvBNReLU6(in_ch, in_ch, kernel=3, stride=stride, groups=in_ch)
        self.pointwise = ConvBNReLU6(in_ch, out_ch, kernel=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


class MobileNetV1(nn.Module):
    """MobileNetV1, width 1.0, 224x224 input, ReLU6 (as in TF-slim and Keras); 4,231,976 params.

    Names (torchvision has no MobileNetV1, so we follow its MobileNetV2 style), with the
    Keras ``MobileNet`` layer each one corresponds to, for porting weights:

    - ``features.0.0`` / ``features.0.1``: stem 3x3 conv / BN (``conv1``, ``conv1_bn``)
    - ``features.{i}.depthwise.0`` / ``.1``, i = 1..13: depthwise conv / BN
      (``conv_dw_{i}``, ``conv_dw_{i}_bn``)
    - ``features.{i}.pointwise.0`` / ``.1``: pointwise conv / BN (``conv_pw_{i}``,
      ``conv_pw_{i}_bn``)
    - ``classifier``: Linear 1024 -> classes (``conv_preds``, a 1x1 conv: squeeze its kernel)

    Convs have no bias. Stride-2 convs pad 1 on every side; TF pads bottom/right only, so
    ported TF weights are close but not bit-exact.
    """

    # (output channels, stride) of the 13 depthwise-separable blocks
    SETTINGS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        in_ch = 32
        features: list[nn.Module] = [ConvBNReLU6(3, in_ch, stride=2)]
        for out_ch, stride in self.SETTINGS:
            features.append(DepthwiseSeparable(in_ch, out_ch, stride))
            in_ch = out_ch
        self.features = nn.Sequential(*features)
        self.classifier = nn.Linear(in_ch, num_classes)
        _init_weights(self, linear_std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# --------------------------------------------------------------------------- DenseNet


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (to 4 x growth) then BN-ReLU-3x3 conv (to growth): new features only."""

    def __init__(self, in_ch: int, growth: int, bn_size: int = 4) -> None:
        super().__init__()
        mid = bn_size * growth
        self.norm1 = nn.BatchNorm2d(in_ch)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(in_ch, mid, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(mid)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(mid, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(y)))


class DenseBlock(nn.Module):
    """``denselayer1..n``: each layer sees the concatenation of the block input and all
    earlier layers' outputs; the block returns that concatenation plus the last output."""

    def __init__(self, layers: int, in_ch: int, growth: int) -> None:
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(in_ch + i * growth, growth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.children():
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """BN-ReLU-1x1 conv halving the channels, then 2x2 average pool (names norm/conv)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(OrderedDict([
            ("norm", nn.BatchNorm2d(in_ch)),
            ("relu", nn.ReLU()),
            ("conv", nn.Conv2d(in_ch, out_ch, 1, bias=False)),
            ("pool", nn.AvgPool2d(2, 2)),
        ]))


class DenseNet(nn.Module):
    """DenseNet-BC (growth 32, bottleneck 4x, compression 0.5), torchvision names.

    ``features``: conv0/norm0/relu0/pool0, denseblock1, transition1, ..., denseblock4, norm5;
    then ReLU, global average pool and ``classifier`` (Linear).
    """

    def __init__(self, block_layers: tuple[int, ...], num_classes: int = 1000,
                 growth: int = 32, init_ch: int = 64) -> None:
        super().__init__()
        parts: OrderedDict[str, nn.Module] = OrderedDict([
            ("conv0", nn.Conv2d(3, init_ch, 7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(init_ch)),
            ("relu0", nn.ReLU()),
            ("pool0", nn.MaxPool2d(3, stride=2, padding=1)),
        ])
        ch = init_ch
        for i, layers in enumerate(block_layers, start=1):
            parts[f"denseblock{i}"] = DenseBlock(layers, ch, growth)
            ch += layers * growth
            if i < len(block_layers):
                parts[f"transition{i}"] = Transition(ch, ch // 2)
                ch //= 2
        parts["norm5"] = nn.BatchNorm2d(ch)
        self.features = nn.Sequential(parts)
        self.classifier = nn.Linear(ch, num_classes)
        _init_weights(self, linear_std=None)  # torchvision keeps nn.Linear's default weight init
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.relu(self.features(x))
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.classifier(torch.flatten(x, 1))


def densenet121(num_classes: int = 1000) -> DenseNet:
    """DenseNet-121 (7,978,856 parameters with 1000 classes)."""
    return DenseNet((6, 12, 24, 16), num_classes)


def densenet201(num_classes: int = 1000) -> DenseNet:
    """DenseNet-201 (20,013,928 parameters with 1000 classes)."""
    return DenseNet((6, 12, 48, 32), num_classes)
