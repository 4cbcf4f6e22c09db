"""The text task's shared fixtures: the package's tokenizer, the encoder module and one
ONNX export of the built-in MiniLM per session (per worker; two workers racing on the shared
cache export once, the second waiting for the first's lock)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from quantmark.tasks.text import minilm


@pytest.fixture(scope="session")
def encoder_folder(quantmark_cache: Path) -> Path:
    """The sealed export in the session's test cache (never the user's)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTMARK_CACHE", str(quantmark_cache))
        folder = minilm.builtin_encoder_folder()
    assert quantmark_cache in folder.parents
    return folder


@pytest.fixture(scope="session")
def encoder():
    """The torch encoder (eval mode), loaded once."""
    return minilm.encoder_module()


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's tokenizer.json, copied out of its zip."""
    path = tmp_path_factory.mktemp("minilm-tokenizer") / "tokenizer.json"
    path.write_bytes(minilm.package_file("tokenizer.json"))
    return path


@pytest.fixture
def quantmark_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """caplog that sees quantmark's records even after a test in this worker installed
    quantmark's own handler (which stops propagation to the root)."""
    logger = logging.getLogger("quantmark")
    was = logger.propagate
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="quantmark"):
            yield caplog
    finally:
        logger.propagate = was
