"""The verbs' shared fixtures: a tiny text encoder folder (``tests.tasks.text.tiny_encoder``,
random 2-layer BERT, seconds to export) that profile and diagnose run on as a user's model."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<folder>/model.onnx`` of the tiny encoder (with its tokenizer.json and config.json):
    ``--model-path`` names it, and its runs go by the folder's name, ``tiny``."""
    pytest.importorskip("transformers")
    from tests.tasks.text.tiny_encoder import tiny_encoder_folder

    return tiny_encoder_folder(tmp_path_factory.mktemp("encoders") / "tiny")
