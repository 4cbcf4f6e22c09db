"""Intervals for figures measured over repeats, for speedups, and for paired accuracy changes.

One LoadGen run is one draw: a busy machine makes it slow, a quiet one fast. So a figure is
the median over repeats with a 95% interval, a speedup is a ratio with its interval (and "no
measurable difference" when that interval holds 1.0), and an accuracy change of two SUTs that
saw the same samples is a paired comparison: per sample (McNemar) when the samples are
independent, per source image (cluster t) when several samples are crops of one image.

Every interval is of the figure the repeats were drawn from while they ran: a machine that
drifts during a set moves that figure, and the interval then describes the set's own time
window, not the machine's long-run figure (``report.drift`` flags a drift the runs show).

Methods, all from scipy.stats:
- fewer than ORDER_STAT_MIN_N repeats (the usual 3-7): Student's t on the logarithms of the
  values (a speed is a ratio scale; its noise is multiplicative). A bootstrap of three values
  can only return their range, which holds the true figure far less often than 95%.
- ORDER_STAT_MIN_N repeats or more: the distribution-free interval of the median, two order
  statistics of the runs (the sign test inverted, ``scipy.stats.binom``): at least 95% for any
  noise, heavy-tailed or skewed. The BCa bootstrap used here before covered 93% at 10-15 runs
  and the t on logarithms 88% at 30 runs with one run in ten 40% slower.
- speedups: paired, the same two methods on the per-repeat log ratios; unpaired, Welch's t on
  the logarithms at every n.
- accuracy, every sample its own source: the Bonett-Price adjusted Wald interval of a paired
  difference, and the p-value of that same test, so the verdict and the p never disagree.
- accuracy, samples grouped by source image: a cluster-robust t on the G source images
  (G - 1 degrees of freedom, ``scipy.stats.t``), for the interval and the p-value alike. A
  percentile bootstrap over 6 clusters covered the true change 86% of the time. With fewer
  than MIN_VERDICT_GROUPS images no method holds when images differ unevenly (skewed photo
  effects: the t covered 85-90% at 6 photos and 86-92% at 20, a sign-flip test and a
  bootstrap-t no better), so the verdict there is "cannot tell". From 50 on the t covers
  95% for symmetric photo effects, 94% for exponentially skewed ones, 92% for log-normal
  ones (``bench/rate_claims``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from quantmark.ground.metric import PointsChange

CONFIDENCE = 0.95
ORDER_STAT_MIN_N = 10  # from here on the median's interval is two of the runs (any noise)
MIN_VERDICT_GROUPS = 50  # source images a clustered accuracy verdict needs (see the module)
CANNOT_TELL = "cannot tell"


@dataclass(frozen=True)
class Interval:
    """One figure over repeats: the median, and a 95% interval when there are 2+ repeats."""

    point: float
    low: float | None
    high: float | None
    n: int
    method: str  # "t-log" | "t" | "order-stat" | "single"

    def text(self, fmt: str = "{:.2f}") -> str:
        """``43.90 [41.40, 46.40]``; ``43.90 (n=1)`` without an interval; ``5.00 (all 3 runs
        equal)`` when the runs do not differ: a zero-width bracket would read as certainty."""
        if self.low is None or self.high is None:
            return f"{fmt.format(self.point)} (n={self.n})"
        if self.zero_width:
            return f"{fmt.format(self.point)} (all {self.n} runs equal)"
        return f"{fmt.format(self.point)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"

    @property
    def zero_width(self) -> bool:
        """Every run gave the same value: the interval is a point, not a measured spread."""
        return (self.low is not None and self.high is not None
                and self.high - self.low <= 1e-12 * max(1.0, abs(self.point)))

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
    confidence: float = CONFIDENCE  # each interval's level: above 95% when a report corrects for
    # its many verdicts (``family_confidence``)

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
        figure = f"{self.point:.2f}x [{bound_text(self.low)}, {bound_text(self.high)}]"
        if self.high - self.low <= 1e-12 * self.point:  # no spread: say so, not [2.00, 2.00]
            figure = f"{self.point:.2f}x, every run of each side equal"
        return figure if self.significant else f"no measurable difference ({figure})"


def bound_text(value: float) -> str:
    """A ratio's interval bound: ``1.23``, or ``>1000`` / ``<0.001`` where few runs at a
    corrected level leave the interval effectively unbounded."""
    if value >= 1000:
        return ">1000"
    if value < 0.001:
        return "<0.001"
    return f"{value:.2f}"


@dataclass(frozen=True)
class AccuracyChange(PointsChange):
    """Candidate top-1 minus baseline top-1 on the same samples, in percentage points."""

    delta_points: float
    low: float
    high: float
    n_samples: int  # compared: the samples both runs answered
    n_groups: int  # source images; n_samples when every sample is its own
    only_baseline_right: int
    only_candidate_right: int
    p_value: float  # the test the interval inverts (``method``): p < 0.05 iff it excludes 0
    method: str = "mcnemar"  # "mcnemar" (independent samples: Bonett-Price) | "cluster-t"
    left_out: int = 0  # samples only one of the two runs held: not compared

    @property
    def too_few_groups(self) -> bool:
        """Crops of fewer than MIN_VERDICT_GROUPS source images: no verdict holds."""
        return self.method == "cluster-t" and self.n_groups < MIN_VERDICT_GROUPS

    @property
    def significant(self) -> bool:
        return not self.too_few_groups and (self.low > 0 or self.high < 0)

    @property
    def verdict(self) -> str:
        return CANNOT_TELL if self.too_few_groups else super().verdict

    def text(self) -> str:
        """``+1.20 pt [-0.40, +2.80] over 40 source images, cluster t p=0.12: no measurable
        change``: the p-value is always the clustered test's when the samples are grouped,
        and with too few source images the verdict says it cannot tell."""
        matched = (f" on the {self.n_samples} images both runs saw ({self.left_out} in only "
                   "one)" if self.left_out else "")
        if self.method == "cluster-t" and self.n_groups < 2:
            return (f"{self.delta_points:+.2f} pt{matched}, all crops of one source image: "
                    f"no interval, {CANNOT_TELL}")
        figure = f"{self.delta_points:+.2f} pt [{self.low:+.2f}, {self.high:+.2f}]"
        if self.method == "cluster-t":
            why = (f" (fewer than {MIN_VERDICT_GROUPS} source images: a change cannot be told "
                   "from how the photos differ)" if self.too_few_groups else "")
            return (f"{figure} over {self.n_groups} source images{matched}, cluster t "
                    f"p={self.p_value:.2g}: {self.verdict}{why}; {self.resolving_text()}")
        return (f"{figure}{matched}, Bonett-Price p={self.p_value:.2g}: {self.verdict}; "
                f"{self.resolving_text()}")


def _checked(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or not len(array):
        raise ValueError(f"{what}: need at least one value")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: values must be finite, got {list(values)}")
    return array


def family_confidence(verdicts: int) -> float:
    """Each interval's level when ``verdicts`` speedups are judged in one report: Bonferroni,
    1 - 0.05 / m, so that the chance of any false "faster"/"slower" among them is at most 5%
    whatever their correlation (they often share one FP32 baseline)."""
    return 1 - (1 - CONFIDENCE) / max(verdicts, 1)


def _t_interval(sample: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Student-t interval of the mean; a point when every value is the same."""
    mean = float(np.mean(sample))
    if _constant(sample):
        return mean, mean
    half = t_quantile(confidence, len(sample) - 1) * float(np.std(sample, ddof=1)) / math.sqrt(
        len(sample))
    return mean - half, mean + half


@functools.lru_cache(maxsize=256)
def t_quantile(confidence: float, df: int) -> float:
    """Student's two-sided t quantile; cached: ``--until-stable`` and its simulation ask for
    the same few thousands of times."""
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def _constant(sample: np.ndarray) -> bool:
    """All values equal up to rounding (a t statistic of them would be noise over noise)."""
    return bool(np.ptp(sample) <= 1e-12 * max(1.0, float(np.max(np.abs(sample)))))


@functools.lru_cache(maxsize=512)
def order_rank(n: int, confidence: float = CONFIDENCE) -> int | None:
    """The 1-based rank j such that [x(j), x(n+1-j)] of n sorted runs holds their median with
    probability at least ``confidence`` whatever the noise (the sign test inverted): the
    largest j with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2. None when n runs cannot
    reach that level (their range covers 1 - 2^(1-n))."""
    tail = (1 - confidence) / 2
    if stats.binom.cdf(0, n, 0.5) > tail:
        return None
    rank = 1
    while rank < n // 2 and stats.binom.cdf(rank, n, 0.5) <= tail:
        rank += 1
    return rank


def _order_interval(sample: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free interval of the median of ``sample``; unbounded when its size
    cannot reach ``confidence`` (a family-corrected level with few runs)."""
    rank = order_rank(len(sample), confidence)
    if rank is None:
        return -math.inf, math.inf
    ordered = np.sort(sample)
    return float(ordered[rank - 1]), float(ordered[len(sample) - rank])


def figure_interval(values: Sequence[float]) -> Interval:
    """The median of ``values`` (one per repeat) with its 95% interval."""
    array = _checked(values, "figure_interval")
    point = float(np.median(array))
    if len(array) == 1:
        return Interval(point, None, None, 1, "single")
    if len(array) >= ORDER_STAT_MIN_N:
        low, high = _order_interval(array)
        return Interval(point, min(low, point), max(high, point), len(array), "order-stat")
    return t_interval(array)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE,
               method: str = "") -> Interval:
    """The median of ``values`` (2 or more) with Student's t interval at ``confidence``: of
    the logarithms when every value is positive ("t-log"), else of the values ("t");
    ``method`` names it otherwise."""
    array = _checked(values, "t_interval")
    point = float(np.median(array))
    if len(array) < 2:
        return Interval(point, None, None, len(array), "single")
    if np.all(array > 0):
        low, high = _t_interval(np.log(array), confidence)
        low, high, method = math.exp(low), math.exp(high), method or "t-log"
    else:
        (low, high), method = _t_interval(array, confidence), method or "t"
    # the point is the median, the interval the (log-)mean's: never let it fall outside
    return Interval(point, min(low, point), max(high, point), len(array), method)


def speedup(baseline: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool,
            paired: bool = False, confidence: float = CONFIDENCE) -> Ratio:
    """How many times faster ``candidate`` is than ``baseline`` (values: one metric per repeat,
    samples/s with ``higher_is_better`` or a latency without). ``paired`` when the lists are
    repeat-aligned (run i of each was run side by side, interleaved), so drift cancels.
    ``confidence``: the interval's level (``family_confidence`` in a report of many)."""
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
            return Ratio(point, None, None, *n, True, "single", confidence)
        if len(diffs) >= ORDER_STAT_MIN_N:
            (low, high), method = _order_interval(diffs, confidence), "order-stat paired"
        else:
            (low, high), method = _t_interval(diffs, confidence), "t-log paired"
    else:
        point = math.exp(float(np.median(gain) - np.median(loss)))
        if min(n) < 2:
            return Ratio(point, None, None, *n, False, "single", confidence)
        (low, high), method = _welch(gain, loss, confidence), "t-log welch"
    low, high = _exp(low), _exp(high)
    return Ratio(point, min(low, point), max(high, point), *n, paired, method, confidence)


def _exp(x: float) -> float:
    """exp that saturates: a t quantile with 1 degree of freedom at a family-corrected level
    can be in the thousands, and its interval is then [0, inf), not an overflow."""
    if x == -math.inf:
        return 0.0
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _welch(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE
           ) -> tuple[float, float]:
    """The Welch interval of mean(a) - mean(b); a point when neither side varies."""
    if _constant(a) and _constant(b):
        diff = float(a[0] - b[0])
        return diff, diff
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def accuracy_change(baseline_correct: Sequence[bool], candidate_correct: Sequence[bool],
                    groups: Sequence[object] | None = None) -> AccuracyChange:
    """The paired change in top-1 of two SUTs that answered the same samples.

    ``groups`` names the source image of each sample: crops of one photo are not independent
    draws, so with groups the interval and the p-value come from the source images (cluster
    t), never from the crops. Without groups, or when every group holds one sample, each
    sample is its own source: the Bonett-Price interval and its own p.
    """
    base = np.asarray(baseline_correct, dtype=bool)
    cand = np.asarray(candidate_correct, dtype=bool)
    if base.shape != cand.shape or base.ndim != 1 or not len(base):
        raise ValueError(f"accuracy_change: need two equal, non-empty lists of per-sample "
                         f"results, got {base.shape} and {cand.shape}")
    diff = cand.astype(float) - base.astype(float)
    only_base, only_cand = int(np.sum(base & ~cand)), int(np.sum(~base & cand))
    index = group_index(groups, len(diff))
    n_groups = int(index.max()) + 1
    delta = 100 * float(diff.mean())
    method = "cluster-t" if n_groups < len(diff) else "mcnemar"
    low, high, p_value = (_cluster_t(diff, index) if method == "cluster-t" else
                          _mcnemar(only_base, only_cand, len(diff)))
    low, high = max(-100.0, min(low, delta)), min(100.0, max(high, delta))
    return AccuracyChange(delta, low, high, len(diff), n_groups, only_base, only_cand,
                          float(p_value), method)


def group_index(groups: Sequence[object] | None, n: int) -> np.ndarray:
    """Each sample's group as 0..G-1; every sample its own without ``groups``."""
    if groups is None:
        return np.arange(n)
    labels = np.asarray(groups)
    if labels.ndim != 1 or labels.dtype.kind not in "biuUS":  # mixed objects: by their text
        labels = np.asarray([str(g) for g in groups])
    if len(labels) != n:
        raise ValueError(f"accuracy_change: {len(labels)} groups for {n} samples")
    return np.unique(labels, return_inverse=True)[1].reshape(-1)


def _mcnemar(only_base: int, only_cand: int, n: int) -> tuple[float, float, float]:
    """Independent samples: (low, high) in points and the p-value of the same test. The
    interval is Bonett and Price's (2012) adjusted Wald interval of a paired difference of
    proportions, which holds its 95% even with few discordant pairs (a plain Wald or a
    bootstrap of the samples collapses to a point when only a handful changed); the p is that
    adjusted Wald test's, so p < 0.05 exactly when the interval excludes 0 (the exact McNemar
    p printed before came from another test: "p=0.052: worse" on 1-3% of lines). Its false
    verdicts stay under 5% from 20 to 1536 samples (seeded simulation, ``tests``)."""
    discordant = only_base + only_cand
    if not discordant:
        return 0.0, 0.0, 1.0
    p_base, p_cand = (only_base + 1) / (n + 2), (only_cand + 1) / (n + 2)
    adjusted = p_cand - p_base
    se = math.sqrt((p_base + p_cand - adjusted ** 2) / (n + 2))
    half = stats.norm.ppf(0.5 + CONFIDENCE / 2) * se
    p_value = float(2 * stats.norm.sf(abs(adjusted) / se))
    return 100 * (adjusted - half), 100 * (adjusted + half), p_value


def _cluster_t(diff: np.ndarray, index: np.ndarray) -> tuple[float, float, float]:
    """Samples grouped by source image: (low, high) in points and the two-sided p of a t test
    with G - 1 degrees of freedom on the cluster-robust (CR1) standard error of the change.
    With equal group sizes this is Student's t on the G per-image mean changes. A single
    group gives no interval at all."""
    sums = np.bincount(index, weights=diff)
    counts = np.bincount(index).astype(float)
    groups, total = len(sums), float(counts.sum())
    delta = float(sums.sum()) / total
    if groups < 2:
        return -100.0, 100.0, 1.0
    residuals = sums - delta * counts
    se = math.sqrt(groups / (groups - 1) * float(np.sum(residuals ** 2))) / total
    if se <= 1e-12:  # every image changed by exactly the same share: fall back to the
        se = float(np.std(diff, ddof=1)) / math.sqrt(total)  # samples' own spread
    if se <= 1e-12:  # nothing changed anywhere
        return 100 * delta, 100 * delta, 1.0
    quantile = stats.t.ppf(0.5 + CONFIDENCE / 2, groups - 1)
    p_value = 2 * stats.t.sf(abs(delta) / se, groups - 1)
    return 100 * (delta - quantile * se), 100 * (delta + quantile * se), float(p_value)

