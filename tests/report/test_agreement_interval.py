"""Top-1 agreement's interval holds its 95% by seeded simulation, independent or clustered."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.report.agreement_interval import agreement_interval
from quantmark.report.stats import MIN_VERDICT_GROUPS

TRIALS = 1000


def _coverage(groups: int, per_group: int, truth: float, concentration: float,
              seed: int) -> float:
    """Share of trials whose interval holds ``truth``: each source image agrees at its own
    rate (Beta around ``truth``), its crops by coin flips at that rate."""
    rng = np.random.default_rng(seed)
    index = np.repeat(np.arange(groups), per_group)
    covered = 0
    for _ in range(TRIALS):
        rates = rng.beta(truth * concentration, (1 - truth) * concentration, groups)
        same = rng.random((groups, per_group)) < rates[:, None]
        found = agreement_interval(same.ravel(), index if per_group > 1 else None)
        covered += found.low / 100 <= truth <= found.high / 100
    return covered / TRIALS


@pytest.mark.parametrize("truth", [0.8, 0.95, 0.99])
def test_independent_images_are_covered(truth: float) -> None:
    assert _coverage(300, 1, truth, 1e6, seed=1) >= 0.93


@pytest.mark.parametrize(("groups", "truth"), [(50, 0.8), (50, 0.95), (200, 0.95), (200, 0.99)])
def test_crops_of_source_images_are_covered(groups: int, truth: float) -> None:
    # photos that differ moderately (Beta concentration 50), 1536 crops in all as the
    # built-in set has; treating the crops as independent would cover far less
    assert _coverage(groups, 1536 // groups, truth, 50.0, seed=groups) >= 0.93


def test_treating_crops_as_images_would_not_hold() -> None:
    # the same data read as independent images: why the groups matter
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(300):
        rates = rng.beta(0.95 * 10, 0.05 * 10, 50)
        same = (rng.random((50, 30)) < rates[:, None]).ravel()
        found = agreement_interval(same)
        covered += found.low / 100 <= 0.95 <= found.high / 100
    assert covered / 300 < 0.8


def test_too_few_sources_give_no_interval_and_say_so() -> None:
    same = [True] * 200 + [False] * 10
    found = agreement_interval(same, [i % 7 for i in range(210)])
    assert found.low is None and found.n_groups == 7 < MIN_VERDICT_GROUPS
    assert "no interval" in found.text("ort-fp32") and "7 source images" in found.text()
    assert found.cell() == "95.2 (7 sources: no interval)"


def test_every_sample_agreeing_counts_each_source_once() -> None:
    grouped = agreement_interval([True] * 600, [i % 60 for i in range(600)])
    alone = agreement_interval([True] * 60)
    assert grouped.percent == 100.0 and grouped.high == 100.0
    # no spread to measure the design effect: 60 sources weigh as 60 images, not 600
    assert grouped.low == pytest.approx(alone.low, abs=2.0) and grouped.low < 96.0
    assert "[" in grouped.cell() and "600 crops of 60 source images" in grouped.text()


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        agreement_interval([])
    with pytest.raises(ValueError, match="groups"):
        agreement_interval([True, False], ["a"])
