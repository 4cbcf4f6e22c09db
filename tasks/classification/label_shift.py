"""A hint for an accuracy run that scores near 0% because the model's classes are shifted by
one from val_map.txt's: a 1001-class model whose extra class is last, read as background-first
(label_offset 1: class = argmax - 1), predicts label - 1 for nearly every image. Such a run is
measured right and scored right; the hint says why the figure is what it is, and the fix."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

NEAR_ZERO_PCT = 1.0  # top-1 below this (chance is 0.1%) is "scores ~0%"
CLUSTER = 0.05  # at least this fraction one class off, and 10 times the hits, is a shift
MIN_SAMPLES = 20
FIX = ("export the model with its extra (background) class first, or with 1000 outputs "
       "(README, Label conventions)")


def shift_hint(predictions: dict[int, float], labels: np.ndarray | list[int],
               label_offset: int = 0, num_classes: int | None = None) -> str | None:
    """One line naming the shift, or None: when top-1 is near 0% and either the predictions
    cluster one class off the labels or the model has 1001 outputs."""
    label_array = np.asarray(labels, dtype=np.int64)
    pairs = [(int(p), int(label_array[i])) for i, p in predictions.items()
             if 0 <= i < len(label_array) and np.isfinite(p)]
    if len(pairs) < MIN_SAMPLES:
        return None
    predicted, truth = np.asarray(pairs).T
    hits = {shift: float(np.mean(predicted == truth + shift)) for shift in (-1, 0, 1)}
    top1 = 100 * hits[0]
    if top1 >= NEAR_ZERO_PCT:
        return None
    shift = max((-1, 1), key=hits.__getitem__)
    read = (f"its {num_classes}-class output was read with label_offset {label_offset}"
            f"{' (class = argmax - 1)' if label_offset else ''}, as results.json "
            "model.meta.label_offset records")
    if hits[shift] >= CLUSTER and hits[shift] >= 10 * hits[0]:
        side = "below" if shift < 0 else "above"
        extra_last = " so its extra class is probably last, not first;" \
            if num_classes == 1001 and shift < 0 and label_offset == 1 else ";"
        return (f"top-1 {top1:.3f}%, but {100 * hits[shift]:.1f}% of predictions are one class "
                f"{side} the label: the model's classes are shifted by one from val_map.txt's "
                f"({read}){extra_last} {FIX}")
    if num_classes == 1001:
        return (f"top-1 {top1:.3f}% with a 1001-class model: {read}; if its extra class is "
                f"last rather than first, {FIX}")
    return None


def note_shift(accuracy: dict[str, Any], work: Path, meta: dict[str, Any] | None) -> None:
    """Add ``hint`` to an accuracy record (and log it) when ``shift_hint`` finds one; a run
    that scores 1% or more is not read again."""
    from quantmark.tasks.classification.scoring import decode_predictions, read_val_map_labels

    if accuracy.get("top1") is None or accuracy["top1"] >= NEAR_ZERO_PCT:
        return
    meta = meta or {}
    predictions, _ = decode_predictions(work / "mlperf_log_accuracy.json")
    hint = shift_hint(predictions, read_val_map_labels(work / "val_map.txt"),
                      int(meta.get("label_offset", 0) or 0), meta.get("num_classes"))
    if hint:
        accuracy["hint"] = hint
        log.warning("%s", hint)
