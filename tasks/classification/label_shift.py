"""A hint for an accuracy run whose model's classes are shifted by one from val_map.txt's: a
1001-class model whose extra class is last, read as background-first (label_offset 1: class =
argmax - 1), predicts label - 1 for nearly every image; a val_map.txt counted from 1 does the
same the other way. Such a run is measured right and scored right; the hint says why the figure
is what it is, and the fix.

Decided by evidence, not by the figure: the run's own predictions are scored against the labels
as given and shifted by one each way, and a shift that scores far better (at least twice the
hits, at least ``CLUSTER`` of the samples, and beyond chance by a sign test: the hits under
either reading of the same samples, Hoeffding's bound on the binomial tail below ``ALPHA``)
is named whatever top-1 is: a background-first model whose images are mostly read one off
scores 1.1% as readily as 0.1%."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

NEAR_ZERO_PCT = 1.0  # top-1 below this (chance is 0.1%) with 1001 outputs: the extra class
CLUSTER = 0.05  # at least this fraction one class off, and twice the hits, is a shift
RATIO = 2.0
ALPHA = 1e-4  # the sign test's bound: a shift this unlikely under "no shift" is named
MIN_SAMPLES = 20
FIX = ("export the model with its extra (background) class first, or with 1000 outputs "
       "(docs/topics/your-model.md, Label conventions)")


def sign_test_bound(better: int, worse: int) -> float:
    """An upper bound on P(``better`` or more of ``better + worse`` fair coin flips), by
    Hoeffding's inequality: how likely the shifted reading wins this often by chance."""
    flips = better + worse
    if flips == 0 or better <= flips / 2:
        return 1.0
    return math.exp(-2.0 * (better - flips / 2) ** 2 / flips)


def shifted_far_better(hits: dict[int, int], shift: int, total: int) -> bool:
    """The labels shifted by ``shift`` score far better than as given (see the docstring)."""
    own, moved = hits[0], hits[shift]
    return (moved >= CLUSTER * total and moved >= RATIO * own
            and sign_test_bound(moved, own) < ALPHA)


def shift_hint(predictions: dict[int, float], labels: np.ndarray | list[int],
               label_offset: int = 0, num_classes: int | None = None) -> str | None:
    """One line naming the shift, or None: when the predictions match the labels shifted by
    one far better than as given (whatever top-1 is), or top-1 is near 0% with a 1001-class
    model."""
    label_array = np.asarray(labels, dtype=np.int64)
    pairs = [(int(p), int(label_array[i])) for i, p in predictions.items()
             if 0 <= i < len(label_array) and np.isfinite(p)]
    if len(pairs) < MIN_SAMPLES:
        return None
    predicted, truth = np.asarray(pairs).T
    hits = {shift: int(np.sum(predicted == truth + shift)) for shift in (-1, 0, 1)}
    total = len(pairs)
    top1 = 100 * hits[0] / total
    shift = max((-1, 1), key=hits.__getitem__)
    read = (f"its {num_classes}-class output was read with label_offset {label_offset}"
            f"{' (class = argmax - 1)' if label_offset else ''}, as results.json "
            "model.meta.label_offset records")
    if shifted_far_better(hits, shift, total):
        side = "below" if shift < 0 else "above"
        extra_last = " so its extra class is probably last, not first;" \
            if num_classes == 1001 and shift < 0 and label_offset == 1 else ";"
        return (f"top-1 {top1:.3f}%, but {100 * hits[shift] / total:.1f}% of predictions are "
                f"one class {side} the label: the model's classes are shifted by one from "
                f"val_map.txt's ({read}){extra_last} {FIX}")
    if num_classes == 1001 and top1 < NEAR_ZERO_PCT:
        return (f"top-1 {top1:.3f}% with a 1001-class model: {read}; if its extra class is "
                f"last rather than first, {FIX}")
    return None


def note_shift(accuracy: dict[str, Any], work: Path, meta: dict[str, Any] | None) -> None:
    """Add ``hint`` to an accuracy record (and log it) when ``shift_hint`` finds one: the
    run's predictions are read again whatever its top-1."""
    from quantmark.tasks.classification.scoring import decode_predictions, read_val_map_labels

    if accuracy.get("top1") is None:
        return
    meta = meta or {}
    predictions, _ = decode_predictions(work / "mlperf_log_accuracy.json")
    hint = shift_hint(predictions, read_val_map_labels(work / "val_map.txt"),
                      int(meta.get("label_offset", 0) or 0), meta.get("num_classes"))
    if hint:
        accuracy["hint"] = hint
        log.warning("%s", hint)
