"""The default job's two-stage plan holds its false-verdict rate, checked by seeded simulation:
an INT8 exactly as fast as FP32 (A against A), runs drifting with the machine between repeats."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.report.stats import speedup
from quantmark.run import two_stage

SIMULATIONS = 2000


def false_verdicts(level: float, noise: float, heavy_tail: bool = False,
                   seed: int = 20240528) -> float:
    """Share of A-against-A jobs the plan calls faster or slower: 3 paired repeats, then, if
    undecided, 7, each look at ``level``. Each repeat's machine drifts (10%, shared by the
    pair); each run has its own lognormal noise, with ``heavy_tail`` one run in ten 40%
    slower as well."""
    rng = np.random.default_rng(seed)
    wrong = 0
    for _ in range(SIMULATIONS):
        logs = rng.normal(0.0, 0.10, 7) + rng.normal(0.0, noise, (2, 7))
        if heavy_tail:
            logs -= np.log(1.4) * (rng.random((2, 7)) < 0.1)
        base, cand = 100 * np.exp(logs[0]), 100 * np.exp(logs[1])
        for n in (3, two_stage.MAX_REPEATS):
            found = two_stage.ratio_at(base[:n], cand[:n], higher_is_better=True, paired=True,
                                       level=level)
            if not two_stage.undecided(found):
                wrong += 1
                break
    return wrong / SIMULATIONS


def test_the_plan_holds_five_percent_over_its_two_looks() -> None:
    level = two_stage.confidence(3)
    assert level == pytest.approx(0.975) and two_stage.looks(3) == 2
    assert false_verdicts(level, noise=0.05) <= 0.05
    # the same two looks at 95% each: optional stopping, more false verdicts than it says
    assert false_verdicts(0.95, noise=0.05) > 0.06


def test_the_plan_holds_on_a_noisier_machine_with_a_heavy_tail() -> None:
    assert false_verdicts(two_stage.confidence(3), noise=0.15, heavy_tail=True) <= 0.05


def test_one_look_when_the_first_stage_is_already_the_cap() -> None:
    assert two_stage.looks(two_stage.MAX_REPEATS) == 1
    assert two_stage.confidence(two_stage.MAX_REPEATS) == pytest.approx(0.95)


def test_intervals_at_the_per_look_level() -> None:
    base, cand = [100.0, 120.0, 90.0, 110.0], [150.0, 170.0, 140.0, 150.0]
    plain = speedup(base, cand, higher_is_better=True, paired=True)
    same = two_stage.ratio_at(base, cand, higher_is_better=True, paired=True, level=0.95)
    assert same == plain
    wider = two_stage.ratio_at(base, cand, higher_is_better=True, paired=True, level=0.975)
    assert wider.point == plain.point and wider.low < plain.low and wider.high > plain.high
    welch = two_stage.ratio_at(base, cand, higher_is_better=True, paired=False, level=0.975)
    assert not welch.paired and "welch" in welch.method
    assert two_stage.paired_by_index({1: 100.0}, {2: 150.0}, [100.0], [150.0],
                                     higher_is_better=True, level=0.975).paired is False
