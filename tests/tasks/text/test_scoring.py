"""The text task's figures: cosine and retrieval agreement against the FP32 reference, the
99%-of-FP32 verdict, and intervals whose coverage is checked by seeded simulation."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.tasks.text import scoring


def test_cosines_and_nearest_neighbours() -> None:
    want = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]], np.float32)
    assert np.allclose(scoring.cosines(want * 3, want), 1.0)
    assert np.isclose(scoring.cosines(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]))[0], 0.0)
    assert scoring.nearest_neighbours(want).tolist() == [2, 2, 0]


def test_retrieval_agreement_sees_a_swapped_neighbour() -> None:
    reference = np.array([[1.0, 0.0, 0.0], [0.95, 0.3, 0.0], [0.0, 1.0, 0.0], [0.0, 0.9, 0.4]])
    got = reference.copy()
    got[1] = [0.3, 0.95, 0.0]  # sentence 1 now sits nearer sentence 2
    found = scoring.embedding_outcomes(got, reference)
    assert found["retrieval_agrees"].tolist()[:2] == [1.0, 0.0]
    assert found["cosine"][0] == pytest.approx(1.0) and found["cosine"][1] < 0.9


@pytest.mark.parametrize(("low", "high", "verdict"), [
    (99.2, 99.6, "met"), (98.0, 98.9, "not met"), (98.5, 99.5, "not resolved")])
def test_the_99_percent_rule_is_judged_by_the_interval(low: float, high: float,
                                                       verdict: str) -> None:
    figure = scoring.Figure((low + high) / 2, low, high)
    assert scoring.target_line(figure, 100.0, "cosine")["verdict"] == verdict


def test_classifier_outcomes() -> None:
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    found = scoring.classifier_outcomes(np.array([0.0, 0.0, 0.0]), logits, np.array([0, 1, 1]))
    assert found["agrees"].tolist() == [1.0, 0.0, 1.0]
    assert found["correct"].tolist() == [1.0, 0.0, 0.0]
    assert found["reference_correct"].tolist() == [1.0, 1.0, 0.0]


def test_the_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    """Seeded simulation: per-sentence agreement draws (Bernoulli 0.9, 300 sentences, as a
    retrieval agreement) and cosine-like draws (Beta near 1); the bootstrap interval holds the
    true mean in 90-99% of 200 trials each."""
    rng = np.random.default_rng(7)
    draws = {"bernoulli": (lambda: (rng.random(300) < 0.9).astype(float), 0.9),
             "beta": (lambda: rng.beta(200, 2, 300), 200 / 202)}
    for name, (draw, truth) in draws.items():
        covered = 0
        for _ in range(200):
            figure = scoring.mean_interval(draw())
            covered += figure.low <= 100 * truth <= figure.high
        assert 0.90 <= covered / 200 <= 0.99, (name, covered)


def test_a_paired_difference_of_equal_runs_is_zero() -> None:
    values = np.linspace(0.9, 1.0, 50)
    change = scoring.paired_difference(values, values)
    assert (change.value, change.low, change.high) == (0.0, 0.0, 0.0)
