"""ResNet-50 and MobileNetV2 written out in plain torch.

Module and parameter names follow torchvision's layout (``layer1.0.conv1.weight``,
``features.3.conv.1.0.weight``, ``classifier.1.bias`` ...) so that a torchvision state_dict
loads with ``strict=True``. We do not import torchvision: its wheels here are CUDA builds.
"""

from __future__ import annotations

import torch
from torch import nn


def _init_weights(module: nn.Module, linear_std: float | None) -> None:
    """torchvision-style init: He for convs, unit BN, small Linear.

    He (fan_out) init keeps activations from collapsing through 50 layers, so a random
    network still gives input-dependent logits (useful for latency and quantization tests).
    """
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0.0, linear_std)
            nn.init.zeros_(m.bias)


# --------------------------------------------------------------------------- ResNet-50


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride here, as in torchvision "v1.5"), 1x1 expand, plus shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + shortcut)


class ResNet50(nn.Module):
    """ResNet-50 v1.5 (the MLPerf reference network), torchvision names."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_ch = 64
        stages = []
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(in_ch, width, stride if i == 0 else 1))
                in_ch = width * Bottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        _init_weights(self, linear_std=None)  # torchvision keeps nn.Linear's default init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------- MobileNetV2


class ConvBNReLU6(nn.Sequential):
    """conv, BN, ReLU6 as indices 0/1/2 (torchvision's Conv2dNormActivation layout)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int = 3, stride: int = 1,
                 groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups,
                      bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise 3x3, linear project; residual when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvBNReLU6(in_ch, hidden, kernel=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, out_ch, 1, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return x + y if self.use_res_connect else y


class MobileNetV2(nn.Module):
    """MobileNetV2 width 1.0 (torchvision layout: ``features``, ``classifier``)."""

    # (expand ratio, output channels, repeats, first stride)
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        in_ch, last = 32, 1280
        features: list[nn.Module] = [ConvBNReLU6(3, in_ch, stride=2)]
        for expand, out_ch, repeats, stride in self.SETTINGS:
            for i in range(repeats):
                features.append(InvertedResidual(in_ch, out_ch, stride if i == 0 else 1, expand))
                in_ch = out_ch
        features.append(ConvBNReLU6(in_ch, last, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))
        _init_weights(self, linear_std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


@torch.no_grad()
def calibrate_random_init(model: nn.Module, images: torch.Tensor) -> nn.Module:
    """Make a randomly initialised network usable: data-free BN statistics and a centred head.

    With He init and default BN stats (mean 0, var 1) activations explode (ResNet-50) or vanish
    (MobileNetV2's depthwise convs), and every input gets the same top-1 class. One train-mode
    pass over ``images`` (already normalised) sets every BN's running stats to that batch's
    statistics, so each layer sees unit-scale activations; then the classifier bias is set to
    minus the mean logit, so the argmax follows the input instead of a fixed offset.
    Networks without BN (VGG) only get the centred head: under He init their ReLU activations
    shrink ~10x over the 16-19 layers but stay input-dependent (logits std ~0.03 on photos,
    argmax varies), so the train-mode pass would be wasted work.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if bns:
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average: one pass == exact batch statistics
        model.train()
        model(images)
        for bn in bns:
            bn.momentum = 0.1
    model.eval()
    head = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    head.bias -= model(images).mean(0)
    return model
