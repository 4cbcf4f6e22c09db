"""Intervals for figures measured over repeats, for speedups, and for paired accuracy changes.

One LoadGen run is one draw: a busy machine makes it slow, a quiet one fast. So a figure is
the median over repeats with a 95% interval, a speedup is a ratio with its interval (and "no
measurable difference" when that interval holds 1.0), and an accuracy change of two SUTs that
saw the same samples is a paired comparison (McNemar) with an interval that resamples whole
source images when several samples are crops of one image.

Methods, all from scipy.stats:
- fewer than BOOTSTRAP_MIN_N repeats (the usual 3-5): Student's t on the logarithms of the
  values (a speed is a ratio scale; its noise is multiplicative). A bootstrap of three values
  can only return their range, which holds the true figure far less often than 95%.
- BOOTSTRAP_MIN_N repeats or more: ``scipy.stats.bootstrap`` (BCa) of the median.
- accuracy: ``scipy.stats.binomtest`` on the discordant pairs (exact McNemar) and
  ``scipy.stats.bootstrap`` over source images (clusters) for the interval of the change.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_MIN_N = 10  # from here on the bootstrap's coverage is close to its nominal 95%
BOOTSTRAP_RESAMPLES = 4000
SEED = 0  # the same data gives the same interval on every report


@dataclass(frozen=True)
class Interval:
    """One figure over repeats: the median, and a 95% interval when there are 2+ repeats."""

    point: float
    low: float | None
    high: float | None
    n: int
    method: str  # "t-log" | "t" | "bootstrap-bca" | "single"

    def text(self, fmt: str = "{:.2f}") -> str:
        if self.low is None or self.high is None:
            return f"{fmt.format(self.point)} (n={self.n})"
        return f"{fmt.format(self.point)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"

    @property
    def half_width(self) -> float | None:
        """Half the interval's width relative to the point: what ``--until-stable`` watches."""
        if self.low is None or self.high is None or not self.point:
            return None
        return (self.high - self.low) / 2 / abs(self.point)


@dataclass(frozen=True)
class Ratio:
    """A speedup: above 1 the candidate is faster than the baseline."""

    point: float
    low: float | None
    high: float | None
    n_baseline: int
    n_candidate: int
    paired: bool
    method: str

    @property
    def significant(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 1 or self.high < 1)

    @property
    def verdict(self) -> str:
        if self.low is None or self.high is None:
            return "no interval (n=1)"
        if not self.significant:
            return "no measurable difference"
        return "faster" if self.point > 1 else "slower"

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.point:.2f}x (n=1, no interval)"
        figure = f"{self.point:.2f}x [{self.low:.2f}, {self.high:.2f}]"
        return figure if self.significant else f"no measurable difference ({figure})"


@dataclass(frozen=True)
class AccuracyChange:
    """Candidate top-1 minus baseline top-1 on the same samples, in percentage points."""

    delta_points: float
    low: float
    high: float
    n_samples: int
    n_groups: int
    only_baseline_right: int
    only_candidate_right: int
    p_value: float  # exact McNemar: binomial test on the discordant pairs

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def verdict(self) -> str:
        if not self.significant:
            return "no measurable change"
        return "better" if self.delta_points > 0 else "worse"

    def text(self) -> str:
        groups = (f" over {self.n_groups} source images" if self.n_groups < self.n_samples
                  else "")
        return (f"{self.delta_points:+.2f} pt [{self.low:+.2f}, {self.high:+.2f}]{groups}, "
                f"McNemar p={self.p_value:.2g}: {self.verdict}")


def _checked(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or not len(array):
        raise ValueError(f"{what}: need at least one value")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: values must be finite, got {list(values)}")
    return array


def _t_interval(sample: np.ndarray) -> tuple[float, float]:
    """The 95% Student-t interval of the mean; a point when every value is the same."""
    if _constant(sample):
        mean = float(np.mean(sample))
        return mean, mean
    ci = stats.ttest_1samp(sample, 0.0).confidence_interval(CONFIDENCE)
    return float(ci.low), float(ci.high)


def _constant(sample: np.ndarray) -> bool:
    """All values equal up to rounding (a t statistic of them would be noise over noise)."""
    return bool(np.ptp(sample) <= 1e-12 * max(1.0, float(np.max(np.abs(sample)))))


def _bootstrap(data: tuple[np.ndarray, ...], statistic, paired: bool = False,
               method: str = "BCa") -> tuple[float, float]:
    """scipy's bootstrap; falls back to the percentile method when BCa is degenerate."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DegenerateDataWarning: handled below
        result = stats.bootstrap(data, statistic, paired=paired, vectorized=True,
                                 confidence_level=CONFIDENCE, n_resamples=BOOTSTRAP_RESAMPLES,
                                 method=method, random_state=SEED)
        low, high = result.confidence_interval
        if method == "BCa" and not (math.isfinite(low) and math.isfinite(high)):
            result = stats.bootstrap(data, statistic, paired=paired, vectorized=True,
                                     confidence_level=CONFIDENCE,
                                     n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                                     random_state=SEED)
            low, high = result.confidence_interval
    return float(low), float(high)


def figure_interval(values: Sequence[float]) -> Interval:
    """The median of ``values`` (one per repeat) with its 95% interval."""
    array = _checked(values, "figure_interval")
    point = float(np.median(array))
    if len(array) == 1:
        return Interval(point, None, None, 1, "single")
    if len(array) >= BOOTSTRAP_MIN_N:
        low, high = _bootstrap((array,), lambda x, axis: np.median(x, axis=axis))
        return Interval(point, min(low, point), max(high, point), len(array), "bootstrap-bca")
    if np.all(array > 0):
        low, high = _t_interval(np.log(array))
        low, high, method = math.exp(low), math.exp(high), "t-log"
    else:
        (low, high), method = _t_interval(array), "t"
    # the point is the median, the interval the (log-)mean's: never let it fall outside
    return Interval(point, min(low, point), max(high, point), len(array), method)


def speedup(baseline: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
            paired: bool = False) -> Ratio:
    """How many times faster ``candidate`` is than ``baseline`` (values: one metric per repeat,
    samples/s with ``higher_is_better`` or a latency without). ``paired`` when the lists are
    repeat-aligned (run i of each was run side by side, interleaved), so drift cancels."""
    base, cand = _checked(baseline, "baseline"), _checked(candidate, "candidate")
    if np.any(base <= 0) or np.any(cand <= 0):
        raise ValueError("speedup: metrics must be positive")
    if paired and len(base) != len(cand):
        raise ValueError(f"paired speedup needs as many baseline runs as candidate runs, got "
                         f"{len(base)} and {len(cand)}")
    sign = 1.0 if higher_is_better else -1.0
    gain = sign * np.log(cand)  # log speed of each run: >0 is faster
    loss = sign * np.log(base)
    n = (len(base), len(cand))
    if paired:
        diffs = gain - loss
        point = math.exp(float(np.median(diffs)))
        if len(diffs) < 2:
            return Ratio(point, None, None, *n, True, "single")
        if len(diffs) >= BOOTSTRAP_MIN_N:
            low, high = _bootstrap((diffs,), lambda x, axis: np.median(x, axis=axis))
            method = "bootstrap-bca"
        else:
            (low, high), method = _t_interval(diffs), "t-log paired"
    else:
        point = math.exp(float(np.median(gain) - np.median(loss)))
        if min(n) < 2:
            return Ratio(point, None, None, *n, False, "single")
        if min(n) >= BOOTSTRAP_MIN_N:
            low, high = _bootstrap((gain, loss), lambda g, b, axis:
                                   np.median(g, axis=axis) - np.median(b, axis=axis))
            method = "bootstrap-bca"
        else:
            (low, high), method = _welch(gain, loss), "t-log welch"
    low, high = math.exp(low), math.exp(high)
    return Ratio(point, min(low, point), max(high, point), *n, paired, method)


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The 95% Welch interval of mean(a) - mean(b); a point when neither side varies."""
    if _constant(a) and _constant(b):
        diff = float(a[0] - b[0])
        return diff, diff
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(CONFIDENCE)
    return float(ci.low), float(ci.high)


def accuracy_change(baseline_correct: Sequence[bool], candidate_correct: Sequence[bool],
                    groups: Sequence[object] | None = None) -> AccuracyChange:
    """The paired change in top-1 of two SUTs that answered the same samples.

    ``groups`` names the source image of each sample: crops of one photo are not independent
    draws, so the interval resamples whole groups (a cluster bootstrap). Without groups every
    sample is its own.
    """
    base = np.asarray(baseline_correct, dtype=bool)
    cand = np.asarray(candidate_correct, dtype=bool)
    if base.shape != cand.shape or base.ndim != 1 or not len(base):
        raise ValueError(f"accuracy_change: need two equal, non-empty lists of per-sample "
                         f"results, got {base.shape} and {cand.shape}")
    diff = cand.astype(float) - base.astype(float)
    only_base, only_cand = int(np.sum(base & ~cand)), int(np.sum(~base & cand))
    p_value = (stats.binomtest(only_cand, only_base + only_cand, 0.5).pvalue
               if only_base + only_cand else 1.0)
    labels = np.arange(len(diff)) if groups is None else np.asarray(list(groups), dtype=object)
    if len(labels) != len(diff):
        raise ValueError(f"accuracy_change: {len(labels)} groups for {len(diff)} samples")
    _, index = np.unique(labels.astype(str), return_inverse=True)
    sums = np.bincount(index, weights=diff)
    counts = np.bincount(index).astype(float)
    delta = 100 * float(diff.mean())
    if len(sums) < 2 or not np.any(sums):
        low = high = delta  # one group, or no sample changed: nothing to resample
    else:
        method = "BCa" if len(sums) >= 20 else "percentile"  # BCa is erratic on few clusters
        low, high = _bootstrap((sums, counts), lambda s, c, axis:
                               100 * s.sum(axis=axis) / c.sum(axis=axis),
                               paired=True, method=method)
    return AccuracyChange(delta, min(low, delta), max(high, delta), len(diff), len(sums),
                          only_base, only_cand, float(p_value))
