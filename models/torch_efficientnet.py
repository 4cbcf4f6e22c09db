"""EfficientNet-B0 written out in plain torch, with torchvision's module names.

``features.0`` is the stem, ``features.1..7`` the seven MBConv stages (``features.S.B.block.K``),
``features.8`` the 1x1 head conv, ``classifier.1`` the Linear: a torchvision
``efficientnet_b0`` state_dict loads with ``strict=True``. Stochastic depth only acts in
training, so it is left out (it has no parameters). torchvision is not imported: its wheels
here are CUDA builds.
"""

from __future__ import annotations

import torch
from torch import nn

from quantmark.models.torch_nets import _init_weights


class ConvBNAct(nn.Sequential):
    """conv (no bias), BN, optional SiLU as indices 0/1/2 (torchvision's Conv2dNormActivation)."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int = 1, stride: int = 1,
                 groups: int = 1, act: bool = True) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups=groups,
                      bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        if act:
            layers.append(nn.SiLU())
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """Channel gating: global pool, 1x1 conv ``fc1`` (SiLU), 1x1 conv ``fc2`` (sigmoid), scale."""

    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(s))))
        return x * s


class MBConv(nn.Module):
    """Inverted bottleneck: [1x1 expand], depthwise kxk (stride), SE, linear 1x1 project.

    ``block`` holds those as indices 0.. (no expand conv when the ratio is 1, as torchvision);
    the residual is added when the block keeps the shape.
    """

    def __init__(self, in_ch: int, out_ch: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        layers: list[nn.Module] = []
        if hidden != in_ch:
            layers.append(ConvBNAct(in_ch, hidden))
        layers += [
            ConvBNAct(hidden, hidden, kernel, stride, groups=hidden),
            SqueezeExcite(hidden, max(1, in_ch // 4)),  # squeeze from the block INPUT width
            ConvBNAct(hidden, out_ch, act=False),
        ]
        self.block = nn.Sequential(*layers)
        self.use_res_connect = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res_connect else y


class EfficientNetB0(nn.Module):
    """EfficientNet-B0 (width and depth 1.0), 5,288,548 parameters with 1000 classes.

    BN keeps torch's default eps (1e-5), as torchvision's B0 does (its B5+ and V2 use 1e-3).
    """

    # (expand ratio, kernel, first stride, output channels, repeats): the paper's Table 1
    STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        in_ch, last = 32, 1280
        features: list[nn.Module] = [ConvBNAct(3, in_ch, 3, stride=2)]
        for expand, kernel, stride, out_ch, repeats in self.STAGES:
            stage = []
            for i in range(repeats):
                stage.append(MBConv(in_ch, out_ch, expand, kernel, stride if i == 0 else 1))
                in_ch = out_ch
            features.append(nn.Sequential(*stage))
        features.append(ConvBNAct(in_ch, last))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))
        _init_weights(self, linear_std=None)
        head = self.classifier[1]
        bound = 1.0 / num_classes**0.5  # torchvision: uniform(+-1/sqrt(out)), zero bias
        nn.init.uniform_(head.weight, -bound, bound)
        nn.init.zeros_(head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def efficientnet_b0(num_classes: int = 1000) -> EfficientNetB0:
    """EfficientNet-B0 as torchvision's ``efficientnet_b0`` (dropout 0.2 before the head)."""
    return EfficientNetB0(num_classes)
