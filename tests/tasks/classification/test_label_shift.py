"""The hint for an accuracy run at ~0% whose predictions are one class off the labels."""

from __future__ import annotations

import numpy as np

from quantmark.tasks.classification.label_shift import note_shift, shift_hint
from tests.report.test_accuracy import write_log, write_val_map

N = 500


def _labels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1000, N)


def _predictions(labels: np.ndarray, correct: np.ndarray, seed: int = 1) -> dict[int, float]:
    """``correct`` where it holds a value, a random class elsewhere (10% of samples)."""
    rng = np.random.default_rng(seed)
    noise = rng.random(N) < 0.1
    values = np.where(noise, rng.integers(0, 1000, N), correct)
    return {i: float(v) for i, v in enumerate(values)}


def test_an_extra_class_last_read_as_first_is_named() -> None:
    labels = _labels()
    hint = shift_hint(_predictions(labels, labels - 1), labels, label_offset=1,
                      num_classes=1001)
    assert hint is not None and "\n" not in hint
    assert "one class below the label" in hint and "label_offset 1" in hint
    assert "extra class is probably last" in hint and "Label conventions" in hint


def test_a_shift_the_other_way_is_named_too() -> None:
    labels = _labels()
    hint = shift_hint(_predictions(labels, labels + 1), labels, num_classes=1000)
    assert hint is not None and "one class above the label" in hint
    assert "probably last" not in hint


def test_a_model_that_scores_gets_no_hint() -> None:
    labels = _labels()
    rng = np.random.default_rng(2)
    right = np.where(rng.random(N) < 0.7, labels, rng.integers(0, 1000, N))
    assert shift_hint(_predictions(labels, right), labels, 1, 1001) is None


def test_chance_level_needs_1001_outputs_for_a_hint() -> None:
    labels = _labels()
    guesses = np.random.default_rng(3).integers(0, 1000, N)
    assert shift_hint(_predictions(labels, guesses), labels, 0, 1000) is None
    hint = shift_hint(_predictions(labels, guesses), labels, 1, 1001)
    assert hint is not None and "1001-class model" in hint and "label_offset 1" in hint


def test_note_shift_reads_the_run_folder_and_records_the_hint(tmp_path, caplog) -> None:
    labels = _labels()
    predictions = _predictions(labels, labels - 1)
    write_log(tmp_path / "mlperf_log_accuracy.json", list(predictions.items()))
    write_val_map(tmp_path / "val_map.txt", labels.tolist())
    accuracy = {"top1": 0.0, "good": 0, "total": N}
    note_shift(accuracy, tmp_path, {"label_offset": 1, "num_classes": 1001})
    assert "one class below" in accuracy["hint"]
    assert any("one class below" in r.getMessage() for r in caplog.records)
    fine = {"top1": 71.0, "good": 355, "total": N}
    note_shift(fine, tmp_path, {"label_offset": 1, "num_classes": 1001})
    assert "hint" not in fine
