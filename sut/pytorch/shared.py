"""What the CPU torch SUTs on images (``backend``) and on text encoders (``text``) share: how a
SUT is run, the settings that would let "fp32" compute at lower precision, and dynamo's graph
counter. A module of its own so that neither backend imports the other."""

from __future__ import annotations

from typing import Any

import torch

from quantmark.sut.info import SutInfo

COMPILE_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}  # inductor reorders float sums


def mode_of(sut: SutInfo) -> str:
    """How a torch SUT is loaded and run: its precision key, or "compile" for the compiled
    variant (FP32 through torch.compile)."""
    return "compile" if sut.variant == "compile" else sut.precision_key


def fp32_settings() -> dict[str, Any]:
    """Settings that would let oneDNN run an "fp32" model at lower internal precision."""
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "mkldnn_conv_fp32_precision": str(getattr(getattr(torch.backends.mkldnn, "conv",
                                                              None), "fp32_precision", "n/a"))}


def unique_graphs() -> int:
    """Graphs dynamo has compiled in this process (a compile after load shows here)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
