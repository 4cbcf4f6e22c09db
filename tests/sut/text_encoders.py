"""What the TensorFlow and TFLite text tests share: the tiny random BERT's spec at a short
sequence, token samples of unequal lengths, ONNX Runtime's FP32 answers on them, and the
calibration a text run hands a static INT8 SUT."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.models.text_graph import TOKEN_INPUTS
from quantmark.models.zoo import ModelSpec
from tests.tasks.text.tiny_encoder import HIDDEN

SEQ_LEN = 16
#: the test sentences' lengths (unequal: one full, the rest padded)
LENGTHS = (5, SEQ_LEN, 9, 3)
SPEC = ModelSpec(name="tiny-text", mean=(0.0,), std=(1.0,), builder=lambda n: None,
                 input_size=SEQ_LEN, num_classes=HIDDEN, channels=3, input_dtype="int64",
                 task="text", head="embedding", seq_len=SEQ_LEN, padding="fixed")


def spec(**changes: Any) -> ModelSpec:
    return replace(SPEC, **changes)


def tokens(lengths: tuple[int, ...] = LENGTHS, seed: int = 0) -> np.ndarray:
    """Token samples ``[N, 3, SEQ_LEN]`` of the given lengths: [CLS] first, padded."""
    rng = np.random.default_rng(seed)
    found = np.zeros((len(lengths), 3, SEQ_LEN), np.int64)
    for row, length in enumerate(lengths):
        found[row, 0, :length] = rng.integers(1000, 30000, length)
        found[row, 0, 0] = 101
        found[row, 1, :length] = 1
    return found


def reference(model: Path, samples: np.ndarray) -> np.ndarray:
    """ONNX Runtime's FP32 answers for ``samples`` (the SUTs' reference)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: samples[:, TOKEN_INPUTS.index(n)] for n in names})[0]


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


class TokenCalibration:
    """The calibration provider as a text run hands it: held-out token samples."""

    def __init__(self) -> None:
        lengths = tuple(int(n) for n in np.random.default_rng(1).integers(3, SEQ_LEN + 1, 32))
        self.tokens = tokens(lengths, seed=2)
        self.asked: list[str] = []

    def arrays(self, layout: str) -> np.ndarray:
        self.asked.append(layout)
        return self.tokens

    def hash(self) -> str:
        return "tiny-text-calibration-v1"

    def describe(self) -> dict[str, Any]:
        return {"source": "test", "count": len(self.tokens), "hash": self.hash()}
