"""Shared fixtures: a private model cache per test session, exported models reused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from quantmark.models.artifacts import Artifact
from quantmark.models.zoo import get_model


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Tests never read or write the user's cache."""
    root = tmp_path_factory.mktemp("quantmark-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUANTMARK_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def mobilenet_onnx(private_cache: Path) -> Artifact:
    """Exported into this folder's private cache, whichever folder's session cache another
    test on this worker set last (tests/sut's has the same fixture name)."""
    from quantmark.models.onnx_export import export_onnx

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTMARK_CACHE", str(private_cache))
        return export_onnx(get_model("mobilenetv2"))


@pytest.fixture(scope="session")
def mobilenet_torch() -> torch.nn.Module:
    """The seeded random MobileNetV2, built once (building costs seconds on 2 cores)."""
    from quantmark.models.zoo import build_torch_model

    return build_torch_model(get_model("mobilenetv2"))[0]
