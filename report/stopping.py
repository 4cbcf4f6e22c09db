"""``--until-stable``'s stopping rule, and the interval a set reports once the rule stopped it.

Stopping at the first look whose 95% interval is narrow enough picks the runs whose spread
happened to be small, so the interval it reports is too narrow: by seeded simulation, a 2%
target at 5% noise covered the true median 92% of the time, a 10% target at 15% noise 90%.

The rule here, a Pocock-style constant level (one level at every look):

- A look is taken after each run from the set's planned runs on (at least 3): Student's t on
  the logarithms of the runs so far, at ``STABLE_CONFIDENCE`` (96.5%) rather than 95%.
- The set is stable when ``LOOKS_IN_A_ROW`` (2) looks in a row have a half-width within the
  target; it stops there and reports that last look's interval.
- A set that reaches ``--max-repeats`` without being stable reports the plain 95% t-log
  interval of all its runs. For log-normal runs the mean of the logarithms is independent of
  every spread the rule looked at, so the rule only selects on the spread: stopping selects a
  small one (the interval covers less), running on selects a large one (it covers more).

The level and the two looks were set by seeded simulation (tests/report/test_stopping.py):
2%, 5% and 10% targets, log-normal noise of 5% and 15%, and a heavy tail where one run in
ten is 40% slower, 3 to 10 runs: the reported interval covers the true median 94-96% of the
time. It is t on the logarithms at every n (a geometric mean's interval): with a heavy tail and
many more than 10 runs it drifts towards that mean, away from the median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from quantmark.report.stats import CONFIDENCE, Interval, t_interval, t_quantile

STABLE_CONFIDENCE = 0.965  # each look's level; chosen by simulation for 95% at the stop
LOOKS_IN_A_ROW = 2  # looks in a row within the target: one narrow look is often luck
METHOD = f"t-log at {STABLE_CONFIDENCE:.1%} per look, stable on {LOOKS_IN_A_ROW} looks"
NOT_MET = "t-log, --until-stable target not met"
RULE_TEXT = (f"--until-stable looks after every run from the planned ones on and stops when "
             f"{LOOKS_IN_A_ROW} looks in a row have an interval within the target; each look's "
             f"interval is at {STABLE_CONFIDENCE:.1%} (Student's t on the logarithms), so the "
             f"one it stops on still covers the true median about 95% of the time; a set that "
             f"reaches --max-repeats first reports its plain 95% interval")


@dataclass(frozen=True)
class Look:
    """Where a set stands after its latest run under ``--until-stable``."""

    stable: bool  # the rule says stop
    width_pct: float | None  # this look's half-width, percent of the median (None: no look)
    values: tuple[float, ...]

    @property
    def interval(self) -> Interval:
        """What the set reports if it ends now: the stopping look's interval when stable,
        else the plain 95% interval of its runs (the cap was reached first)."""
        if self.stable:
            return t_interval(self.values, STABLE_CONFIDENCE, METHOD)
        return t_interval(self.values, CONFIDENCE, NOT_MET if len(self.values) > 1 else "")


def _width_pct(values: list[float]) -> float | None:
    """``t_interval(values, STABLE_CONFIDENCE).half_width`` in percent, in plain Python: a
    set's simulation asks for it tens of thousands of times, on a handful of values."""
    if min(values) <= 0:
        found = t_interval(values, STABLE_CONFIDENCE).half_width
        return None if found is None else 100 * found
    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    spread = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(STABLE_CONFIDENCE, n - 1) * spread / math.sqrt(n)
    point = statistics.median(values)
    low, high = min(math.exp(mean - half), point), max(math.exp(mean + half), point)
    return 100 * (high - low) / 2 / point


def look(values: Sequence[float], target_pct: float, first_look: int) -> Look:
    """The rule after the runs ``values`` (in run order) of a set that planned ``first_look``
    runs before its first look, with a half-width target of ``target_pct`` percent."""
    runs = [float(v) for v in values]
    n = len(runs)
    first = max(first_look, 2)  # t needs two runs
    widths = [_width_pct(runs[:k]) for k in range(max(first, n - LOOKS_IN_A_ROW + 1), n + 1)]
    stable = (len(widths) == LOOKS_IN_A_ROW
              and all(w is not None and w <= target_pct for w in widths))
    return Look(stable, widths[-1] if widths else None, tuple(runs))
