"""A trainer module for the torch SUTs' text tests, standing in for quantmark.tasks.text.minilm:
``encoder_module()`` is the tiny random BERT of ``tests/tasks/text/tiny_encoder.py`` with the
weights ``tiny_encoder_folder(folder, labels=0, seed=SEED)`` exports, so a spec naming this
module runs the same model as that ONNX file, in seconds instead of MiniLM's minutes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.tasks.text.tiny_encoder import HIDDEN, _Pooled

SEED = 0
SOURCE = "the tiny random test BERT (tests/tasks/text/tiny_encoder.py)"


def encoder_module() -> nn.Module:
    """The embedding model (mean pooling + L2 norm), eval mode, seeded as the export is."""
    torch.manual_seed(SEED)
    return _Pooled(0).eval()


def describe() -> dict[str, Any]:
    """Where the weights come from, as minilm.describe() says it."""
    return {"model": "tiny-encoder", "source": SOURCE, "seed": SEED, "embedding_dim": HIDDEN}
