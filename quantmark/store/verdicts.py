"""Did the newest job of each series regress? A test against the machine's measured noise,
with the false discovery rate controlled across series.

For each series the newest job's mean of log runs is compared with the mean of its history's
job means (``regress_baseline`` says which jobs form the history). The difference's variance
is the between-job noise plus the runs' share (``regress_noise``: the series' own spread, the
machine's pooled one, or a stated fallback), and its Student t gives a two-sided p-value.
Across series, Benjamini-Hochberg (``scipy.stats.false_discovery_control``) at ``fdr``
decides which differences are changes: on identical jobs the chance of any false alarm in a
run of ``regress`` is at most ``fdr``. The effect is the ratio new/old of the figure with its
interval: at level ``1 - R*q/m`` for the R series of m judged that were called a change (the
false-coverage-rate adjustment that matches Benjamini-Hochberg), ``1 - q`` for the others.

A series of fewer than three earlier clean jobs whose noise rests on an assumption reads "too
little history" unless its change is beyond any plausible drift (``regress_history``), and
is judged on the assumption only when asked (``assume_drift``).

Disturbed and INVALID jobs never enter a history. A newest job that is disturbed is still
judged, with that said on its line; one with no VALID run cannot be judged, and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats

from quantmark.store.changes import Change, what_changed
from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_baseline import Baseline
from quantmark.store.regress_history import (
    DRIFT_BOUND,
    TOO_LITTLE,
    beyond_drift_p,
    run_noise,
    too_little,
)
from quantmark.store.regress_history import reason as too_little_reason
from quantmark.store.regress_noise import (
    JobSummary,
    Noise,
    Spread,
    choose,
    clean,
    difference_variance,
    pool,
    spread,
    summarise,
)

REGRESSED, IMPROVED, NO_CHANGE, CANNOT_JUDGE = ("regressed", "improved",
                                                "no measurable change", "cannot judge")
ORDER = (REGRESSED, IMPROVED, TOO_LITTLE, CANNOT_JUDGE, NO_CHANGE)  # how they are listed
DEFAULT_FDR = 0.05
# where a job's machine is read from when the store gives no name (the first key a job has)
MACHINE_KEYS = ("machine.id", "machine.hostname", "machine.system_id")
UNITS = {"latency_ms": "ms", "samples_per_s": "samples/s"}


@dataclass(frozen=True)
class Verdict:
    """One series' newest job against its history."""

    series: SeriesKey
    outcome: str  # REGRESSED | IMPROVED | NO_CHANGE | CANNOT_JUDGE
    newest: Point | None
    history: tuple[Point, ...] = ()  # the clean jobs it was compared with
    reason: str = ""  # why it cannot be judged
    baseline_figure: float | None = None  # geometric mean of the history's job means
    ratio: float | None = None  # newest / baseline figure
    low: float | None = None
    high: float | None = None
    confidence: float | None = None  # the ratio interval's level
    p_value: float | None = None
    adjusted_p: float | None = None  # Benjamini-Hochberg
    noise: Noise | None = None
    notes: tuple[str, ...] = ()
    changes: tuple[Change, ...] = field(default_factory=tuple)

    def figure_text(self) -> str:
        point, unit = self.newest, UNITS.get(self.series.metric, "")
        if point is None or point.value is None:
            return "no VALID figure"
        if point.low is None or point.high is None:
            return f"{point.value:.4g} {unit} (n={max(len(point.runs), 1)})"
        return f"{point.value:.4g} [{point.low:.4g}, {point.high:.4g}] {unit}"

    def text(self) -> str:
        """The verdict's line: verdict, series, new figure, baseline, ratio, noise."""
        head = f"{self.outcome}: {self.series.label()}: {self.figure_text()}"
        if self.outcome == CANNOT_JUDGE:
            return f"{head}; {self.reason}" + "".join(f"; {n}" for n in self.notes)
        assert self.ratio is not None and self.noise is not None and self.confidence
        unit = UNITS.get(self.series.metric, "")
        if self.outcome == TOO_LITTLE:
            return (f"{head} vs {self.baseline_figure:.4g} {unit} ({len(self.history)} jobs): "
                    f"{self.ratio:.3f}x; {self.reason}"
                    + "".join(f"; {n}" for n in self.notes))
        return (f"{head} vs {self.baseline_figure:.4g} {unit} ({len(self.history)} jobs): "
                f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}] "
                f"({100 * self.confidence:.4g}%); noise: {self.noise.text()}"
                + "".join(f"; {n}" for n in self.notes))

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain data (``run.py regress --json``)."""
        return {"series": vars(self.series) | {"label": self.series.label()},
                "verdict": self.outcome, "reason": self.reason,
                "newest": None if self.newest is None else
                {"job_id": self.newest.job_id, "when": self.newest.when,
                 "value": self.newest.value, "low": self.newest.low,
                 "high": self.newest.high, "run_dir": self.newest.run_dir,
                 "disturbed": self.newest.disturbed},
                "history_jobs": [p.job_id for p in self.history],
                "baseline": self.baseline_figure, "ratio": self.ratio,
                "ratio_low": self.low, "ratio_high": self.high,
                "confidence": self.confidence, "p_value": self.p_value,
                "adjusted_p": self.adjusted_p,
                "noise": None if self.noise is None else vars(self.noise) | {
                    "text": self.noise.text()},
                "notes": list(self.notes), "changes": [c.to_dict() for c in self.changes],
                "text": self.text()}


@dataclass(frozen=True)
class _Pending:
    """A series that can be tested: the log difference, its variance and degrees of freedom."""

    series: SeriesKey
    newest: Point
    history: tuple[Point, ...]
    difference: float
    variance: float
    noise: Noise
    baseline_mean: float
    notes: tuple[str, ...]
    few: tuple[float, int] | None = None  # too little history: the runs' own (variance, df)

    @property
    def p_value(self) -> float:
        """The t test against the noise; with too little history, the test of a change
        beyond any plausible drift (``regress_history``)."""
        if self.few is not None:
            return beyond_drift_p(self.difference, *self.few)
        t = abs(self.difference) / math.sqrt(self.variance)
        return float(2 * stats.t.sf(t, self.noise.df))


def machine_of(point: Point) -> str:
    """The machine a job ran on: the store's name for it, else its environment's ("" where
    neither says)."""
    return point.machine or next((str(point.environment[k]) for k in MACHINE_KEYS
                 if point.environment.get(k) not in (None, "")), "")


def by_series(points: Sequence[Point]) -> dict[SeriesKey, list[Point]]:
    """Every series' jobs, oldest first."""
    grouped: dict[SeriesKey, list[Point]] = {}
    for point in sorted(points, key=lambda p: (p.series, p.when, p.job_id)):
        grouped.setdefault(point.series, []).append(point)
    return grouped


def _history(jobs: list[Point], baseline: Baseline) -> tuple[list[Point], list[str]]:
    """The clean jobs before the newest that the baseline selects, and notes on those
    left out."""
    earlier = [p for p in jobs[:-1] if baseline.selects(p) and p.job_id != jobs[-1].job_id]
    history = [p for p in earlier if clean(p)]
    disturbed = sum(p.disturbed for p in earlier)
    invalid = sum(not p.disturbed and not clean(p) for p in earlier)
    notes = [f"{n} {what} earlier job{'s' * (n > 1)} left out"
             for n, what in ((disturbed, "disturbed"), (invalid, "INVALID")) if n]
    return history, notes


def _machine_spreads(grouped: dict[SeriesKey, list[Point]],
                     baseline: Baseline) -> Callable[[str], Spread]:
    """The pooled spread of every series' history on a machine (computed when first asked)."""
    histories = {key: _history(jobs, baseline)[0] for key, jobs in grouped.items()}
    cache: dict[str, Spread] = {}

    def of(machine: str) -> Spread:
        if machine not in cache:
            cache[machine] = pool([_spread([p for p in h if machine_of(p) == machine])
                                   for h in histories.values()])
        return cache[machine]

    return of


def _summaries(points: Sequence[Point]) -> list[JobSummary]:
    return [s for s in map(summarise, points) if s is not None]


def _spread(points: Sequence[Point]) -> Spread:
    """The spread of these jobs, named by their job ids (all have a summary: clean)."""
    return spread(_summaries(points), [p.job_id for p in points])


def _newest_notes(newest: Point) -> list[str]:
    notes = []
    if newest.disturbed:
        notes.append("the newest job was disturbed (other processes took the CPU during it): "
                     "its figure may be theirs; rerun it on a quiet machine")
    if newest.invalid_runs:
        notes.append(f"{newest.invalid_runs} INVALID run{'s' * (newest.invalid_runs > 1)} "
                     "of the newest job left out")
    return notes


def _prepare(key: SeriesKey, jobs: list[Point], baseline: Baseline,
             machine_spread: Callable[[str], Spread], assume_drift: bool) -> _Pending | Verdict:
    """The test's inputs for one series, or the reason it cannot be judged."""
    newest = jobs[-1]
    history, notes = _history(jobs, baseline)
    notes = _newest_notes(newest) + notes
    latest = summarise(newest) if newest.valid else None
    if latest is None:
        return Verdict(key, CANNOT_JUDGE, newest, reason="the newest job has no VALID run",
                       notes=tuple(notes))
    if not history:
        earlier = len(jobs) - 1
        reason = (f"no earlier job in the baseline ({baseline.text()})" if not earlier else
                  "no earlier job has a clean VALID figure (disturbed or INVALID)")
        return Verdict(key, CANNOT_JUDGE, newest, reason=reason, notes=tuple(notes))
    summaries = _summaries(history)
    own = spread(summaries)
    own = replace(own, within_ss=own.within_ss + latest.within_ss,
                  within_df=own.within_df + latest.within_df)
    chosen = choose(own, machine_spread(machine_of(newest)))
    if chosen is None:
        return Verdict(key, CANNOT_JUDGE, newest, tuple(history),
                       reason="one earlier job of one run: no noise can be measured; record "
                              "repeats (--repeats 3) or more jobs", notes=tuple(notes))
    variance, noise = difference_variance(summaries, latest, *chosen)
    if not variance > 0:
        return Verdict(key, CANNOT_JUDGE, newest, tuple(history),
                       reason="every earlier job gave the same figure: no noise to test "
                              "against", notes=tuple(notes))
    baseline_mean = float(np.mean([s.mean for s in summaries]))
    few = None if assume_drift or not too_little(len(history), noise) else \
        run_noise(summaries, latest, chosen[0])
    if few is not None and not few[0] > 0:
        few = (variance, noise.df)  # runs without spread: the assumed noise's own test
    return _Pending(key, newest, tuple(history), latest.mean - baseline_mean, variance, noise,
                    baseline_mean, tuple(notes), few)


def _judged(test: _Pending, adjusted_p: float, changed: bool, confidence: float) -> Verdict:
    half = stats.t.ppf(0.5 + confidence / 2, test.noise.df) * math.sqrt(test.variance)
    worse = (test.difference < 0) if test.series.higher_is_better else (test.difference > 0)
    outcome = (REGRESSED if worse else IMPROVED) if changed else NO_CHANGE
    changes = tuple(what_changed(test.newest, test.history)) if changed else ()
    notes, reason = test.notes, ""
    if test.few is not None and not changed:
        outcome, reason = TOO_LITTLE, too_little_reason(len(test.history))
    elif test.few is not None:
        notes = (f"beyond the {DRIFT_BOUND:g}x that drift between jobs may explain, with "
                 f"only {len(test.history)} earlier clean job(s)",) + notes
    return Verdict(test.series, outcome, test.newest, test.history, reason=reason,
                   baseline_figure=math.exp(test.baseline_mean),
                   ratio=math.exp(test.difference), low=math.exp(test.difference - half),
                   high=math.exp(test.difference + half), confidence=confidence,
                   p_value=test.p_value, adjusted_p=adjusted_p, noise=test.noise,
                   notes=notes, changes=changes)


def regress(points: Sequence[Point], baseline: Baseline | None = None,
            fdr: float = DEFAULT_FDR,
            selected: Callable[[SeriesKey], bool] | None = None,
            assume_drift: bool = False) -> list[Verdict]:
    """Every selected series' verdict (all series where ``selected`` is None), listed
    regressions first. Series not selected still lend their spread to the machine's pool.
    ``assume_drift``: judge series of too little history on the assumed between-job spread
    (``regress_noise``) rather than only beyond any plausible drift."""
    if not 0 < fdr < 1:
        raise ValueError(f"fdr must be in (0, 1), not {fdr}")
    baseline = baseline or Baseline()
    grouped = by_series(points)
    machine_spread = _machine_spreads(grouped, baseline)
    prepared = [_prepare(key, jobs, baseline, machine_spread, assume_drift)
                for key, jobs in grouped.items() if selected is None or selected(key)]
    tests = [p for p in prepared if isinstance(p, _Pending)]
    verdicts = [p for p in prepared if isinstance(p, Verdict)]
    if tests:
        adjusted = stats.false_discovery_control([t.p_value for t in tests], method="bh")
        changed = [bool(a <= fdr) for a in adjusted]
        called = sum(changed)
        for test, adjusted_p, is_change in zip(tests, adjusted, changed, strict=True):
            level = 1 - called * fdr / len(tests) if is_change else 1 - fdr
            verdicts.append(_judged(test, float(adjusted_p), is_change, level))
    return sorted(verdicts, key=lambda v: (ORDER.index(v.outcome), v.series))
