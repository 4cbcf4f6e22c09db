"""The combination rules: the mean of softmax probabilities, and a majority vote."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.sut.ensemble.combine import combine_mean, combine_vote, probabilities


def test_logits_get_a_softmax_and_probabilities_are_kept() -> None:
    logits = np.array([[2.0, 1.0, 0.0]], dtype=np.float32)
    found = probabilities(logits, classes=3)
    expected = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(found, expected, rtol=1e-6)
    probs = np.array([[0.2, 0.5, 0.3]], dtype=np.float32)
    np.testing.assert_array_equal(probabilities(probs, classes=3), probs)


def test_a_background_class_is_dropped_before_the_softmax() -> None:
    scores = np.array([[9.0, 0.0, 3.0, 1.0]], dtype=np.float32)  # class 0: background
    found = probabilities(scores, label_offset=1, classes=3)
    assert found.shape == (1, 3)
    assert found.argmax() == 1
    np.testing.assert_allclose(found.sum(), 1.0, rtol=1e-6)


def test_class_indices_or_too_few_scores_are_refused() -> None:
    with pytest.raises(ValueError, match="scores"):
        probabilities(np.array([3, 4]), classes=3)
    with pytest.raises(ValueError, match="expected 4"):
        probabilities(np.zeros((1, 3)), label_offset=1, classes=3)


def test_mean_follows_the_confident_member() -> None:
    a = np.array([[0.4, 0.6, 0.0]])  # a leans to class 1
    b = np.array([[0.9, 0.05, 0.05]])  # b is sure of class 0
    assert combine_mean([a, b]).tolist() == [0]


def test_vote_takes_the_majority_and_breaks_ties_by_the_mean() -> None:
    a = np.array([[0.1, 0.9, 0.0], [0.6, 0.3, 0.1]])
    b = np.array([[0.2, 0.8, 0.0], [0.2, 0.7, 0.1]])
    c = np.array([[0.99, 0.01, 0.0], [0.1, 0.2, 0.7]])
    # sample 0: two votes for class 1 beat c's confident class 0 (the mean would pick 1 too,
    # so check a case where they differ); sample 1: three different votes -> highest mean
    assert combine_vote([a, b, c]).tolist() == [1, 1]
    d = np.array([[0.55, 0.45, 0.0]])
    e = np.array([[0.55, 0.45, 0.0]])
    f = np.array([[0.0, 1.0, 0.0]])
    assert combine_mean([d, e, f]).tolist() == [1]
    assert combine_vote([d, e, f]).tolist() == [0]
