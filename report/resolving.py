"""What an evaluation set can resolve, and how large a set would decide a limit.

A paired accuracy change comes with an interval whose width is set by the set's independent
units (source photos, scans, sentences: ``n_groups``) and by how often the two models disagree
on them. Its half-width is the smallest change this set can tell from none; a limit whose bound
lies inside the interval cannot be judged on it. How many units would judge it follows from the
same standard error: the interval shrinks as one over the square root of the units, so deciding
a change ``d`` away from the bound, with the usual 80% power at the run's confidence, takes
``units * ((z_conf + z_power) * se / d) ** 2`` units (a normal approximation from the measured
discordance; a set of the same kind, its units as independent as these).
"""

from __future__ import annotations

import math

from scipy import stats

from quantmark.report.stats import CONFIDENCE

POWER = 0.8  # the chance a set of the suggested size decides, if the change is as measured


def half_width(low: float, high: float) -> float:
    """The interval's half-width in points: the change this set resolves from none."""
    return max(0.0, (high - low) / 2)


def units_to_decide(point: float, low: float, high: float, units: int, bound: float,
                    confidence: float = CONFIDENCE, power: float = POWER) -> int | None:
    """Independent units that would decide whether the change (``point`` [low, high] on
    ``units`` units) lies beyond ``bound``; None where no set can (the point on the bound, no
    spread, no units, or a value that is not a number)."""
    values = (point, low, high, bound)
    if units < 1 or not all(math.isfinite(v) for v in values):
        return None
    distance = abs(point - bound)
    half = half_width(low, high)
    if distance == 0 or half == 0:
        return None
    z_conf = stats.norm.ppf(0.5 + confidence / 2)
    se = half / z_conf
    return math.ceil(units * ((z_conf + stats.norm.ppf(power)) * se / distance) ** 2)


def resolving_text(low: float, high: float, units: int, what: str = "independent units") -> str:
    """``this set (7 independent units) resolves a paired change of about ±4.5 points``."""
    return (f"this set ({units} {what}) resolves a paired change of about "
            f"±{half_width(low, high):.2g} points")


def decide_text(point: float, low: float, high: float, units: int, bound: float,
                what: str = "independent units") -> str:
    """What would judge a change against ``bound``: a set size, or why none would."""
    needed = units_to_decide(point, low, high, units, bound)
    if needed is None:
        return "no set size decides a change measured on the bound itself"
    return (f"about {needed:,} {what} (now {units}) would decide it with {POWER:.0%} power if "
            "the change is as measured")
