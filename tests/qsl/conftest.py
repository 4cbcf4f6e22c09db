"""Fixtures: a private cache per test, a shared built-in dataset, a tiny ImageNet-format folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own QUANTMARK_CACHE: no test sees another's cache (or the user's)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("QUANTMARK_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session")
def builtin_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in dataset, generated once per session (about 5 s) in a session cache."""
    from quantmark.qsl.builtin import builtin_dataset_root

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUANTMARK_CACHE", str(tmp_path_factory.mktemp("builtin-cache")))
        return builtin_dataset_root()


def write_image(path: Path, width: int, height: int, seed: int, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).convert(mode).save(path)


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    """12 images of assorted sizes/modes (JPEG and PNG) listed in val_map.txt."""
    root = tmp_path / "imagenet"
    lines = []
    for i in range(12):
        rel = f"val/img_{i:02d}.{'jpg' if i % 2 else 'png'}"
        mode = ("RGB", "L", "RGB", "P")[i % 4] if rel.endswith("png") else "RGB"
        write_image(root / rel, 200 + 17 * i, 300 - 9 * i, seed=i, mode=mode)
        lines.append(f"{rel} {i * 7}")
    (root / "val_map.txt").write_text("\n".join(lines) + "\n")
    return root
