"""Shared SUT fixtures: a private artifact cache (the digits model is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """SUT tests never read or write the user's cache."""
    root = tmp_path_factory.mktemp("quantmark-sut-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUANTMARK_CACHE", str(root))
        yield root
