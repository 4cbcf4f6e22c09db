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
    # a run that scores is read again too, and its predictions say there is no shift
    rng = np.random.default_rng(4)
    right = np.where(rng.random(N) < 0.7, labels, rng.integers(0, 1000, N))
    write_log(tmp_path / "mlperf_log_accuracy.json", list(_predictions(labels, right).items()))
    fine = {"top1": 71.0, "good": 355, "total": N}
    note_shift(fine, tmp_path, {"label_offset": 1, "num_classes": 1001})
    assert "hint" not in fine


def _mostly_one_off(labels: np.ndarray, right: float, seed: int) -> dict[int, float]:
    """Predictions as a background-first 1001-class model read one off gives them: ``right``
    of the samples on their label, 60% one class below it, the rest a random class."""
    rng = np.random.default_rng(seed)
    draw = rng.random(len(labels))
    values = np.where(draw < right, labels,
                      np.where(draw < right + 0.6, labels - 1,
                               rng.integers(0, 1000, len(labels))))
    return {i: float(v) for i, v in enumerate(values)}


def test_a_shift_is_named_whatever_top1_is(tmp_path) -> None:
    """Issue 43 item 7: 1.1% top-1 (above the old 1% threshold), 60% one class off: the
    shifted reading scores far better, so the hint is given and recorded."""
    labels = _labels()
    predictions = _mostly_one_off(labels, 0.011, seed=5)
    top1 = 100 * np.mean([predictions[i] == labels[i] for i in range(N)])
    assert 1.0 <= top1 < 3.0  # the figure the campaign saw, not near 0
    hint = shift_hint(predictions, labels, label_offset=1, num_classes=1001)
    assert hint is not None and "one class below the label" in hint
    assert f"top-1 {top1:.3f}%" in hint
    write_log(tmp_path / "mlperf_log_accuracy.json", list(predictions.items()))
    write_val_map(tmp_path / "val_map.txt", labels.tolist())
    accuracy = {"top1": float(top1), "good": int(top1 * N / 100), "total": N}
    note_shift(accuracy, tmp_path, {"label_offset": 1, "num_classes": 1001})
    assert "one class below" in accuracy.get("hint", "")


def test_no_false_shift_on_chance_or_on_a_ten_class_model() -> None:
    """Seeded: random predictions over 10 classes (each reading hits ~10%) and a weak 10-class
    model that confuses neighbours less than it is right never get a shift named."""
    rng = np.random.default_rng(6)
    for _ in range(200):
        labels = rng.integers(0, 10, 60)
        guesses = rng.integers(0, 10, 60)
        assert shift_hint({i: float(v) for i, v in enumerate(guesses)}, labels, 0, 10) is None
    labels = rng.integers(0, 10, 2000)
    draw = rng.random(2000)
    weak = np.where(draw < 0.3, labels, np.where(draw < 0.5, (labels + 1) % 10,
                                                 rng.integers(0, 10, 2000)))
    assert shift_hint({i: float(v) for i, v in enumerate(weak)}, labels, 0, 10) is None
