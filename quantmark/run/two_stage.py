"""The default job's two-stage plan for its INT8 speedup verdicts, fixed before any run.

Stage 1: ``first`` interleaved repeats of each test (3 by default). Where the speedup is then
undecided (its interval holds 1.00x), stage 2: more interleaved repeats of both SUTs of that
scenario up to ``MAX_REPEATS`` per side in total, and a second look. Looking twice and keeping
the second answer is optional stopping: at 95% per look, an INT8 exactly as fast as FP32 would
be called faster or slower more often than 5%. So each look's interval is at 1 - ALPHA/2
(Bonferroni over the two looks): the chance of a false verdict over both looks is at most
ALPHA, whatever the looks' correlation (the tests check it by seeded simulation). With
``first`` at ``MAX_REPEATS`` or more there is one look, at 1 - ALPHA.

Runs with the same repeat index ran side by side, so the ratio is paired over the indices where
both SUTs have a VALID run: the machine's drift between repeats cancels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy import stats

from quantmark.report.stats import CONFIDENCE, Ratio, speedup

MAX_REPEATS = 7  # per side, both stages together
ALPHA = 1 - CONFIDENCE  # the false-verdict rate the plan holds over its looks


def looks(first: int) -> int:
    """How many looks the plan takes when stage 1 runs ``first`` repeats."""
    return 2 if first < MAX_REPEATS else 1


def confidence(first: int) -> float:
    """The level of each look's interval."""
    return 1 - ALPHA / looks(first)


def undecided(ratio: Ratio | None) -> bool:
    """No verdict yet: no ratio, no interval (one run a side), or an interval holding 1.00x."""
    return ratio is None or not ratio.significant


def ratio_at(baseline: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
             paired: bool, level: float) -> Ratio:
    """``report.stats.speedup`` with its interval at ``level``: Student's t on the logarithms
    (paired: of the per-repeat ratios; else Welch) for a level other than 95%."""
    found = speedup(baseline, candidate, higher_is_better=higher_is_better, paired=paired)
    if level == CONFIDENCE or found.low is None:
        return found
    sign = 1.0 if higher_is_better else -1.0
    gain = sign * np.log(np.asarray(candidate, dtype=float))
    loss = sign * np.log(np.asarray(baseline, dtype=float))
    sample = gain - loss if paired else None
    if sample is not None and _constant(sample):
        low = high = float(sample[0])
    elif sample is not None:
        ci = stats.ttest_1samp(sample, 0.0).confidence_interval(level)
        low, high = float(ci.low), float(ci.high)
    elif _constant(gain) and _constant(loss):
        low = high = float(gain[0] - loss[0])
    else:
        ci = stats.ttest_ind(gain, loss, equal_var=False).confidence_interval(level)
        low, high = float(ci.low), float(ci.high)
    method = f"{'t-log paired' if paired else 't-log welch'}, {level:.1%} per look"
    return replace(found, low=min(float(np.exp(low)), found.point),
                   high=max(float(np.exp(high)), found.point), method=method)


def _constant(values: np.ndarray) -> bool:
    """Equal up to rounding: a t statistic of them would be rounding noise over noise."""
    return bool(np.ptp(values) <= 1e-12 * max(1.0, float(np.max(np.abs(values)))))


def paired_by_index(baseline: dict[int, float], candidate: dict[int, float],
                    baseline_all: list[float], candidate_all: list[float], *,
                    higher_is_better: bool, level: float) -> Ratio | None:
    """The speedup of ``candidate`` over ``baseline`` (VALID runs by repeat index): paired over
    the shared indices when there are two or more, else unpaired over every VALID run (the
    ``_all`` lists); None when a side has none."""
    shared = sorted(set(baseline) & set(candidate))
    if len(shared) >= 2:
        return ratio_at([baseline[i] for i in shared], [candidate[i] for i in shared],
                        higher_is_better=higher_is_better, paired=True, level=level)
    if baseline_all and candidate_all:
        return ratio_at(baseline_all, candidate_all, higher_is_better=higher_is_better,
                        paired=False, level=level)
    return None
