"""Did a set's runs drift while they ran? A trend test over the order the runs ran in.

Every interval of ``report.stats`` is of the figure the runs were drawn from while they ran.
A machine that warms, throttles or fills up during a set moves that figure: the interval then
describes the set's own time window, not the machine's long-run figure. Where the runs show
a drift, this says so: Mann-Kendall's S (concordant minus discordant pairs of runs against
their order), summed over independent sequences (each SUT of a comparison: its own level
never enters), with its exact null distribution: every order of each sequence's runs equally
likely when nothing drifts (the counts of permutations by inversions, convolved).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from quantmark.report.stats import CONFIDENCE

ALPHA = 1 - CONFIDENCE


@dataclass(frozen=True)
class Trend:
    """The runs' S against their order, its largest possible value and its p-value."""

    s: int
    most: int  # S when every run is above the one before, in every sequence
    p_value: float
    runs: int

    @property
    def tau(self) -> float:
        return self.s / self.most

    @property
    def drifting(self) -> bool:
        """The runs trend over time beyond what their noise explains (a 5% test)."""
        return self.p_value < ALPHA

    def text(self) -> str:
        way = "up" if self.s > 0 else "down"
        return (f"the {self.runs} runs trend {way} in the order they ran (Kendall tau "
                f"{self.tau:+.2f}, p={self.p_value:.2g})")


@functools.lru_cache(maxsize=64)
def _by_inversions(n: int) -> tuple[int, ...]:
    """How many orders of n distinct runs have k inversions, k = 0 .. n(n-1)/2."""
    counts = [1]
    for size in range(2, n + 1):  # insert the size-th run at each of its positions
        grown = [0] * (len(counts) + size - 1)
        for k, count in enumerate(counts):
            for extra in range(size):
                grown[k + extra] += count
        counts = grown
    return tuple(counts)


def _null(lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The exact null distribution of the summed S: (values, probabilities)."""
    total = np.array([1.0])
    for n in lengths:
        counts = np.array(_by_inversions(n), dtype=float)
        total = np.convolve(total, counts / counts.sum())
    most = sum(n * (n - 1) // 2 for n in lengths)
    inversions = np.arange(len(total))
    return most - 2 * inversions, total


def _s(values: np.ndarray) -> int:
    """Pairs in order minus pairs out of order (ties count neither)."""
    later = np.sign(values[None, :] - values[:, None])
    return int(np.triu(later, k=1).sum())


def trend(*sequences: Sequence[float]) -> Trend | None:
    """Do the runs drift? Each sequence holds one set's figures in the order they ran (the
    sets of a comparison are independent sequences: their levels may differ). None when no
    order of this many runs could reach p < 0.05 (fewer than 5 in one sequence, or 4 + 4)."""
    arrays = [np.asarray(s, dtype=float) for s in sequences]
    arrays = [a[np.isfinite(a)] for a in arrays if a.ndim == 1]
    arrays = [a for a in arrays if len(a) >= 2]
    if not arrays:
        return None
    values, probabilities = _null([len(a) for a in arrays])
    most = int(values.max())
    if 2 * probabilities[values == most].sum() >= ALPHA:
        return None  # even a perfectly monotone set would not be significant
    s = sum(_s(a) for a in arrays)
    p_value = float(min(1.0, probabilities[np.abs(values) >= abs(s)].sum()))
    return Trend(s, most, p_value, sum(len(a) for a in arrays))
