"""What an ensemble run adds to results.json: member agreement and the members' own logs."""

from __future__ import annotations

import numpy as np

from quantmark.report.accuracy import compute_accuracy, read_val_map_labels
from quantmark.run.ensemble_fields import agreement, write_member_logs


def test_agreement_counts_samples_where_all_and_each_pair_agree() -> None:
    found = agreement({"a": np.array([1, 2, 3, 4]), "b": np.array([1, 2, 0, 4]),
                       "c": np.array([1, 0, 3, 4])})
    assert found["all"] == 50.0
    assert found["pairs"] == {"a vs b": 75.0, "a vs c": 75.0, "b vs c": 50.0}


def test_member_logs_are_scored_by_the_accuracy_tool(tmp_path) -> None:
    (tmp_path / "val_map.txt").write_text("a.jpg 2\nb.jpg 0\nc.jpg 1\n")
    probs = np.array([[0.1, 0.2, 0.7], [0.3, 0.6, 0.1], [0.2, 0.5, 0.3]], np.float32)
    folder = tmp_path / "members" / "m@s"
    write_member_logs(folder, np.array([0, 1, 2]), probs, tmp_path)
    result = compute_accuracy(folder / "mlperf_log_accuracy.json",
                              read_val_map_labels(folder / "val_map.txt"), expected_count=3)
    assert (result.good, result.total) == (2, 3)  # sample 1 answered 1, labelled 0
    saved = np.load(folder / "probabilities.npz")
    np.testing.assert_array_equal(saved["probabilities"], probs)
    assert saved["qsl_idx"].tolist() == [0, 1, 2]
