"""Top-1 accuracy from LoadGen's ``mlperf_log_accuracy.json``, the official script's way.

Each entry's ``data`` is the response bytes in hex: one float32, the predicted class. The same
``qsl_idx`` may appear more than once; the first response counts. The label of ``qsl_idx`` is
line ``qsl_idx`` of the val_map the QSL was built from (the run folder keeps a copy of it in QSL
order, so calibration images held out of a folder never shift the lines).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file
from quantmark.tasks.accuracy_log import read_log_entries, response_bytes, sample_index


@dataclass(frozen=True)
class AccuracyResult:
    good: int
    total: int
    duplicates: int
    missing: int = 0  # expected qsl indices with no response (only when the count is known)

    @property
    def percent(self) -> float:
        return 100.0 * self.good / self.total if self.total else 0.0

    def line(self) -> str:
        """The first line of accuracy.txt, in the official script's form."""
        return f"accuracy={self.percent:.3f}%, good={self.good}, total={self.total}"


def decode_value(hex_data: object, where: str = "response") -> float:
    """A response's first float32 (the predicted class); an empty response is -1. ``data`` that
    is not LoadGen's hex is a one-line UserError."""
    raw = response_bytes(hex_data, where)
    return float(np.frombuffer(raw[:4], dtype=np.float32)[0]) if len(raw) >= 4 else -1.0


def decode_predictions(log_path: str | Path) -> tuple[dict[int, float], int]:
    """qsl_idx -> predicted class (float32), and how many duplicate entries were dropped."""
    predictions: dict[int, float] = {}
    duplicates = 0
    for number, entry in enumerate(read_log_entries(log_path)):
        where = f"{log_path}: entry {number}"
        index = sample_index(entry, where)
        value = decode_value(entry["data"], where)  # a malformed duplicate is still malformed
        if index in predictions:
            duplicates += 1
            continue
        predictions[index] = value
    return predictions, duplicates


def score(predictions: dict[int, float], labels: np.ndarray | list[int], duplicates: int = 0,
          expected_count: int | None = None) -> AccuracyResult:
    """Compare each prediction with ``labels[qsl_idx]``; an index beyond the labels is wrong."""
    label_array = np.asarray(labels)
    good = sum(  # a NaN or infinite class (a broken SUT's bytes) is simply wrong
        1 for index, predicted in predictions.items()
        if 0 <= index < len(label_array) and math.isfinite(predicted)
        and int(predicted) == int(label_array[index])
    )
    missing = 0
    if expected_count is not None:
        missing = sum(1 for i in range(expected_count) if i not in predictions)
    return AccuracyResult(good=good, total=len(predictions), duplicates=duplicates,
                          missing=missing)


def compute_accuracy(log_path: str | Path, labels: np.ndarray | list[int],
                     expected_count: int | None = None) -> AccuracyResult:
    """Decode the log and score it against ``labels`` (index = qsl_idx)."""
    predictions, duplicates = decode_predictions(log_path)
    return score(predictions, labels, duplicates, expected_count)


def read_val_map_labels(path: str | Path) -> list[int]:
    """Labels in line order of a ``<relative path> <label>`` file (the official script's input)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"val_map {file} does not exist; pass the val_map.txt the run used")
    return [label for _, label in read_val_map(file)]


def read_classes(folder: str | Path) -> list[str] | None:
    """The class names a run scored against (``classes.txt`` beside its val_map.txt, written
    when the dataset named its classes), in label order; None when it has none."""
    from quantmark.qsl.label_space import CLASSES_FILE, read_class_names

    file = Path(folder) / CLASSES_FILE
    return read_class_names(file) if file.is_file() else None


def read_val_map(file: Path) -> list[tuple[str, int]]:
    """A run's val_map items. Its labels are any integer >= 0, each named when classes.txt lies
    beside it (a class-folder dataset of 10 classes is labelled 0..9); a bare val_map keeps
    ImageNet's refusal of 1-based labels (top label 1000)."""
    from quantmark.qsl.imagenet import parse_val_map
    from quantmark.qsl.label_space import CLASSES_FILE

    classes = read_classes(file.parent)
    items, _ = parse_val_map(file.read_bytes(), file, None if classes is None else len(classes),
                             file.parent / CLASSES_FILE)
    return items


def accuracy_text(result: AccuracyResult, log_path: str | Path | None = None) -> str:
    """accuracy.txt: the official first line, then (submission form) the full log's sha256."""
    lines = [result.line()]
    if log_path is not None:
        lines.append(f"hash={hash_file(log_path, length=64)}")
    return "\n".join(lines) + "\n"
