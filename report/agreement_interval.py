"""How often a quantized model picks the FP32 model's class, with an interval that knows which
samples are not independent.

Top-1 agreement needs no labels: it says what quantization changed even where the labels are
few or the weights random. Its interval is Wilson's score interval of a proportion, on the
samples when each is its own image. Crops of one source photo agree or disagree together, so
when samples are grouped the interval is taken on the *effective* sample size: the samples
divided by the design effect (the cluster-robust variance of the mean over the binomial one),
never more than the samples, with Student's quantile on G - 1 degrees of freedom. Where every
sample agrees (or none does) the spread says nothing, and each source image counts once.

With fewer than ``MIN_VERDICT_GROUPS`` source images no interval is given, as no accuracy
verdict is. Seeded simulation (``python -m quantmark.bench.rate_claims --only h``; BENCHMARKS.md at
ab1032b, "Issue 43 closed") finds it covering 94.9-96.9% on 300 independent images and 94.8-95.5%
from 50 source photos up when the photos differ moderately, but 87.6% at 50 photos and 93.0% at 200
when a few photos disagree wholesale and the rest never do (true agreement 99%); the same crops read
as independent images cover 69%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from quantmark.report.stats import CONFIDENCE, MIN_VERDICT_GROUPS, group_index


@dataclass(frozen=True)
class AgreementFigure:
    """Percent of samples whose class equals the reference's, with its interval (None where
    the samples are crops of too few source images to give one)."""

    percent: float
    low: float | None
    high: float | None
    n_samples: int
    n_groups: int  # source images; n_samples when every sample is its own

    @property
    def clustered(self) -> bool:
        return self.n_groups < self.n_samples

    def cell(self) -> str:
        """``99.2 [98.1, 99.7]``: a table cell."""
        if self.low is None or self.high is None:
            return f"{self.percent:.1f} ({self.n_groups} sources: no interval)"
        return f"{self.percent:.1f} [{self.low:.1f}, {self.high:.1f}]"

    def text(self, reference: str = "FP32") -> str:
        """``top-1 agreement with ort-fp32 97.4% [95.1, 98.6] over 1536 images``."""
        over = (f"{self.n_samples} crops of {self.n_groups} source images" if self.clustered
                else f"{self.n_samples} images")
        if self.low is None or self.high is None:
            return (f"top-1 agreement with {reference} {self.percent:.1f}% over {over} (fewer "
                    f"than {MIN_VERDICT_GROUPS} sources: no interval holds)")
        return (f"top-1 agreement with {reference} {self.percent:.1f}% "
                f"[{self.low:.1f}, {self.high:.1f}] over {over}")


def agreement_interval(same: Sequence[bool], groups: Sequence[object] | None = None,
                       confidence: float = CONFIDENCE) -> AgreementFigure:
    """The agreement of ``same`` (one flag per sample: its class equals the reference's),
    grouped by source image where ``groups`` names one per sample."""
    flags = np.asarray(same, dtype=float)
    if flags.ndim != 1 or not len(flags):
        raise ValueError("agreement_interval: need a non-empty list of per-sample flags")
    index = group_index(groups, len(flags))
    n, n_groups = len(flags), int(index.max()) + 1
    share = float(flags.mean())
    if n_groups == n:
        low, high = _wilson(share, n, float(stats.norm.ppf(0.5 + confidence / 2)))
    elif n_groups < MIN_VERDICT_GROUPS:
        return AgreementFigure(100 * share, None, None, n, n_groups)
    else:
        quantile = float(stats.t.ppf(0.5 + confidence / 2, n_groups - 1))
        low, high = _wilson(share, _effective_size(flags, index, share), quantile)
    return AgreementFigure(100 * share, 100 * low, 100 * high, n, n_groups)


def _effective_size(flags: np.ndarray, index: np.ndarray, share: float) -> float:
    """The samples over the design effect; the source images where no sample disagrees (or
    every one does), where the spread cannot measure it."""
    n = len(flags)
    n_groups = int(index.max()) + 1
    sums = np.bincount(index, weights=flags)
    counts = np.bincount(index).astype(float)
    robust = n_groups / (n_groups - 1) * float(np.sum((sums - share * counts) ** 2)) / n ** 2
    binomial = share * (1 - share) / n
    if binomial <= 0 or robust <= 0:
        return float(n_groups)
    return min(float(n), max(1.0, n * binomial / robust))


def _wilson(share: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion observed on ``n`` (possibly effective)
    samples."""
    scale = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / scale
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)

