"""Top-1 accuracy from LoadGen's ``mlperf_log_accuracy.json``, the official script's way.

Each entry's ``data`` is the response bytes in hex: one float32, the predicted class. The same
``qsl_idx`` may appear more than once; the first response counts. The label of ``qsl_idx`` is
line ``qsl_idx`` of the run's val_map (the QSL's order).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class AccuracyResult:
    good: int
    total: int
    duplicates: int

    @property
    def percent(self) -> float:
        return 100.0 * self.good / self.total if self.total else 0.0

    def line(self) -> str:
        """The first line of accuracy.txt, in the official script's form."""
        return f"accuracy={self.percent:.3f}%, good={self.good}, total={self.total}"


def decode_predictions(log_path: str | Path) -> tuple[dict[int, float], int]:
    """qsl_idx -> predicted class (float32), and how many duplicate entries were dropped."""
    entries = json.loads(Path(log_path).read_text() or "[]")
    predictions: dict[int, float] = {}
    duplicates = 0
    for entry in entries:
        index = int(entry["qsl_idx"])
        if index in predictions:
            duplicates += 1
            continue
        raw = bytes.fromhex(entry["data"])
        predictions[index] = float(np.frombuffer(raw[:4], dtype=np.float32)[0]) if raw else -1.0
    return predictions, duplicates


def compute_accuracy(log_path: str | Path, labels: np.ndarray | list[int]) -> AccuracyResult:
    """Compare each logged prediction with ``labels[qsl_idx]``."""
    predictions, duplicates = decode_predictions(log_path)
    label_array = np.asarray(labels)
    good = sum(
        1 for index, predicted in predictions.items()
        if 0 <= index < len(label_array) and int(predicted) == int(label_array[index])
    )
    return AccuracyResult(good=good, total=len(predictions), duplicates=duplicates)
