"""How the search (``search``) judges what it measured: each candidate's figures with their
intervals, the limits, the drops after a round, and the final verdict.

The rules, which ``search`` and ``brute_force`` share:

* A figure is the median of a candidate's VALID runs with its interval
  (``report.stats.figure_interval``; Student's t on the logarithms at another confidence). An
  INVALID run never enters a figure.
* Disturbed runs are kept in the evidence and counted in the notes, but they do not count
  toward a drop: once a candidate has ``min_runs`` VALID undisturbed runs its figures come from
  those alone (a disturbed run is slower than the SUT's quiet speed, and would drop it
  unfairly); until then its figures come from all its VALID runs and it cannot be dropped on
  them, unless the run-to-run noise is pooled across candidates (``pooling``): then a
  candidate with 1+ quiet runs has an interval on the pooled spread, which may drop it, make
  it the leader, and judges it in the verdict alike.
* A limit is judged by the interval, never by the point alone (``limit_state``): met when the
  whole interval lies within it, broken when the whole interval lies beyond it, else "cannot
  tell" on this evidence (accuracy: the paired interval of its change, on the set's
  independent units; model size: the artifact's size, a single number; a run-measured limit
  needs ``min_runs`` quiet runs, or the pool, before it is met or broken). A candidate is
  recommended, or leads, only when it meets every limit; one broken is dropped; one that
  cannot be told against a limit measured once (accuracy, size) stops racing, since more runs
  cannot tell it, and the answer lists it with what would (``report.resolving``).
* It is dropped on the objective only when its interval is wholly worse than the leader's: the
  best candidate meeting every limit, itself with ``min_runs`` undisturbed VALID runs (or 1+
  with a pooled interval).

Each function taking ``pools`` (``pools_of``: metric -> pooled spread) judges by them; without
them (None) every candidate is judged by its own runs alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quantmark.recommend.candidates import Evidence, Measurement
from quantmark.recommend.pooling import Pool, metric_values, pool, pooled_interval, quiet_runs
from quantmark.report.stats import CONFIDENCE, Interval, figure_interval, t_interval

if TYPE_CHECKING:
    from quantmark.recommend.candidates import SearchConfig

#: each ``Limits`` field, and +1 when the figure must stay at or under it, -1 at or above
LIMIT_SIGNS = {"max_accuracy_drop": 1, "latency_ms": 1, "min_throughput": -1,
               "max_memory_mb": 1, "max_model_size_mb": 1}
#: the start of the ``dropped`` reason of a candidate clearly worse than the leader
OBJECTIVE_DROP = "clearly "
#: limits judged on a figure measured once per artifact (accuracy, size): a candidate whose
#: figure breaks one can never meet it, so it stops racing (its runs would decide nothing),
#: though its interval may reach inside (it is then not excluded *by* the limit's interval)
MEASURED_ONCE = ("max_accuracy_drop", "max_model_size_mb")
#: the start of the ``dropped`` reason of a candidate a once-measured limit cannot judge
UNDECIDABLE = "stopped racing: cannot tell"
#: a limit's state on a candidate's evidence (``limit_state``)
MET, BROKEN, CANNOT_TELL = "met", "broken", "cannot tell"
#: the ``Measurement`` field behind a run-measured limit
LIMIT_METRICS = {"latency_ms": "latency_ms", "min_throughput": "samples_per_s",
                 "max_memory_mb": "memory_mb"}


Pools = dict[str, Pool]


@dataclass(frozen=True)
class Span:
    """A figure for a limit: its point and interval (equal for a single number), and whether
    it may drop the candidate (enough undisturbed runs, or a once-measured number)."""

    point: float
    low: float
    high: float
    can_drop: bool


def valid_runs(evidence: Evidence) -> list[Measurement]:
    return [run for run in evidence.runs if run.valid]


def decision_runs(evidence: Evidence, min_runs: int) -> tuple[list[Measurement], bool]:
    """The runs its figures come from, and whether those figures may drop it (see above)."""
    valid = valid_runs(evidence)
    quiet = [run for run in valid if not run.disturbed]
    if len(quiet) >= min_runs:
        return quiet, True
    return valid, False


@functools.lru_cache(maxsize=8192)
def _interval(values: tuple[float, ...], confidence: float) -> Interval:
    """Cached: a candidate's figures are judged after every round, most of them unchanged."""
    if confidence == CONFIDENCE or len(values) < 2:
        return figure_interval(values)
    return t_interval(values, confidence)


def pools_of(evidence: Sequence[Evidence], config: SearchConfig) -> Pools:
    """The pooled spread of each metric the search judges (the objective and the run-measured
    limits), where enough candidates have 2+ quiet runs."""
    metrics = {config.objective, *(LIMIT_METRICS[name] for name in set_limits(config)
                                   if name in LIMIT_METRICS)}
    found = {metric: pool(evidence, metric) for metric in sorted(metrics)}
    return {metric: value for metric, value in found.items() if value is not None}


def pooled(evidence: Evidence, metric: str, config: SearchConfig, pools: Pools | None) -> bool:
    """Whether the candidate's ``metric`` is judged on the pooled spread: fewer than
    ``min_runs`` quiet runs, but 1+ of them, and a pool for the metric."""
    if not pools or metric not in pools or decision_runs(evidence, config.min_runs)[1]:
        return False
    return bool(metric_values(quiet_runs(evidence), metric))


def figure(evidence: Evidence, metric: str, config: SearchConfig, pools: Pools | None = None
           ) -> Interval | None:
    """The candidate's figure for ``metric`` (a ``Measurement`` field) over its decision
    runs (its quiet ones on the pooled spread, see ``pooled``); None without one VALID run
    that measured it."""
    if pooled(evidence, metric, config, pools):
        values = metric_values(quiet_runs(evidence), metric)
        return pooled_interval(values, pools[metric], config.confidence)  # type: ignore[index]
    runs, _ = decision_runs(evidence, config.min_runs)
    values = metric_values(runs, metric)
    return _interval(tuple(values), config.confidence) if values else None


def may_drop(evidence: Evidence, metric: str, config: SearchConfig, pools: Pools | None
             ) -> bool:
    """Whether the figure for ``metric`` may drop the candidate (or lead the race)."""
    return decision_runs(evidence, config.min_runs)[1] or pooled(evidence, metric, config,
                                                                 pools)


def span(evidence: Evidence, limit: str, config: SearchConfig, pools: Pools | None = None
         ) -> Span | None:
    """The candidate's figure for ``limit``; None while it is unknown."""
    if limit in LIMIT_METRICS:
        metric = LIMIT_METRICS[limit]
        found = figure(evidence, metric, config, pools)
        if found is None:
            return None
        low = found.point if found.low is None else found.low
        high = found.point if found.high is None else found.high
        return Span(found.point, low, high,
                    may_drop(evidence, metric, config, pools) and found.low is not None)
    accuracy = evidence.accuracy
    if accuracy is None:
        return None
    if limit == "max_model_size_mb":
        size = accuracy.model_size_mb
        return None if size is None else Span(size, size, size, True)
    if not all(math.isfinite(x) for x in (accuracy.change_points, accuracy.low, accuracy.high)):
        return None
    # a drop in points: the change's interval turned around; one resting on too few
    # independent units judges no limit
    return Span(0.0 - accuracy.change_points, 0.0 - accuracy.high, 0.0 - accuracy.low,
                accuracy.decides)


def limit_state(found: Span | None, limit: str, bound: float) -> str | None:
    """``MET`` when the whole interval lies within ``bound``, ``BROKEN`` when it lies wholly
    beyond (a figure that may drop: enough quiet runs, the pool, or measured once), else
    ``CANNOT_TELL``; None while unmeasured."""
    if found is None:
        return None
    near, far = ((found.low, found.high) if LIMIT_SIGNS[limit] > 0
                 else (found.high, found.low))
    if not found.can_drop:
        return CANNOT_TELL
    if margin(far, limit, bound) <= 0:
        return MET
    return BROKEN if margin(near, limit, bound) > 0 else CANNOT_TELL


def undecided_limits(evidence: Evidence, config: SearchConfig, pools: Pools | None = None
                     ) -> dict[str, Span]:
    """The limits the candidate's evidence cannot judge (its interval holds the bound)."""
    found = {}
    for limit, bound in set_limits(config).items():
        own = span(evidence, limit, config, pools)
        if limit_state(own, limit, bound) == CANNOT_TELL:
            found[limit] = own  # type: ignore[assignment]
    return found


def broken_limits(evidence: Evidence, config: SearchConfig, pools: Pools | None = None
                  ) -> list[str]:
    """The limits the candidate's evidence shows broken."""
    return [limit for limit, bound in set_limits(config).items()
            if limit_state(span(evidence, limit, config, pools), limit, bound) == BROKEN]


def what_would_tell(evidence: Evidence, limit: str, bound: float, found: Span) -> str:
    """How the evidence could judge ``limit``: a larger set (accuracy), more runs (a
    run-measured limit), or nothing (a size is one number)."""
    from quantmark.report.resolving import decide_text, resolving_text
    from quantmark.report.stats import MIN_VERDICT_GROUPS

    accuracy = evidence.accuracy
    if limit == "max_accuracy_drop" and accuracy is not None and not accuracy.decides:
        return (f"its interval rests on {accuracy.units} independent sources, too few for it "
                f"to hold (a verdict needs {MIN_VERDICT_GROUPS} or more): a set of "
                f"{MIN_VERDICT_GROUPS}+ independent images or sources would tell it")
    if limit == "max_accuracy_drop" and accuracy is not None and accuracy.units:
        return (f"{resolving_text(found.low, found.high, accuracy.units)}; "
                + decide_text(found.point, found.low, found.high, accuracy.units, bound))
    if limit == "max_accuracy_drop":
        return "a larger evaluation set would"
    return "more runs would narrow its interval"


def uncertain_limits(evidence: Evidence, config: SearchConfig, pools: Pools | None = None
                     ) -> list[str]:
    """One line per limit the candidate's evidence cannot judge: its figure, its interval
    and what would tell it."""
    bounds = set_limits(config)
    return [f"{evidence.candidate.key}: cannot tell whether it meets {limit} {bounds[limit]:g}: "
            f"{own.point:.4g} [{own.low:.4g}, {own.high:.4g}] holds the limit; "
            + what_would_tell(evidence, limit, bounds[limit], own)
            for limit, own in undecided_limits(evidence, config, pools).items()]


def margin(value: float, limit: str, bound: float) -> float:
    """How far ``value`` lies beyond ``bound`` (positive: it breaks the limit)."""
    return (value - bound) * LIMIT_SIGNS[limit]


def set_limits(config: SearchConfig) -> dict[str, float]:
    return {name: getattr(config.limits, name) for name in LIMIT_SIGNS
            if getattr(config.limits, name) is not None}


def meets(evidence: Evidence, config: SearchConfig, pools: Pools | None = None) -> bool:
    """Meets every limit by its intervals (``limit_state``), and has an objective figure. An
    unknown accuracy (not measured, or its run failed) does not meet an accuracy limit; an
    unmeasured memory figure is not judged."""
    if figure(evidence, config.objective, config, pools) is None:
        return False
    for limit, bound in set_limits(config).items():
        found = span(evidence, limit, config, pools)
        if found is None:
            if limit in MEASURED_ONCE:
                return False
            continue
        if limit_state(found, limit, bound) != MET:
            return False
    return True


def better(a: float, b: float, higher_is_better: bool) -> bool:
    return a > b if higher_is_better else a < b


def clearly_worse(this: Interval, best: Interval, higher_is_better: bool) -> bool:
    """``this``'s whole interval lies on the worse side of ``best``'s: no overlap."""
    if this.low is None or best.low is None or this.high is None or best.high is None:
        return False
    return this.high < best.low if higher_is_better else this.low > best.high


def limit_drop(evidence: Evidence, config: SearchConfig, pools: Pools | None = None) -> str:
    """Why the candidate must leave the race on its own figures ("" while it may stay)."""
    accuracy = evidence.accuracy
    if accuracy is not None and accuracy.why and config.limits.max_accuracy_drop is not None:
        return f"its accuracy run failed: {accuracy.why}"
    for limit, bound in set_limits(config).items():
        found = span(evidence, limit, config, pools)
        state = limit_state(found, limit, bound)
        if found is None or state == MET:
            continue
        figures = f"{found.point:.4g} [{found.low:.4g}, {found.high:.4g}]"
        if state == BROKEN:
            return f"breaks {limit} {bound:g}: {figures}"
        if limit in MEASURED_ONCE:
            return (f"{UNDECIDABLE} whether it meets {limit} {bound:g}: {figures} holds the "
                    "limit, and is measured once (more runs cannot tell it)")
    if len(evidence.runs) >= config.min_runs and not valid_runs(evidence):
        why = next((run.why for run in reversed(evidence.runs) if run.why), "")
        return f"no VALID run in {len(evidence.runs)}" + (f" ({why})" if why else "")
    return ""


def leader(evidence: Sequence[Evidence], config: SearchConfig, pools: Pools | None = None
           ) -> Evidence | None:
    """The best racing candidate meeting every limit whose figure may drop others."""
    best, best_point = None, 0.0
    for item in evidence:
        if item.dropped or not meets(item, config, pools):
            continue
        if not may_drop(item, config.objective, config, pools):
            continue
        found = figure(item, config.objective, config, pools)
        if found is not None and found.low is not None and (
                best is None or better(found.point, best_point, config.higher_is_better)):
            best, best_point = item, found.point
    return best


def judge(evidence: Sequence[Evidence], config: SearchConfig, round_: int) -> Evidence | None:
    """Drops the candidates that can no longer win: beyond a limit, or clearly worse than
    the leader on the objective; returns the leader (None while there is none)."""
    pools = pools_of(evidence, config)
    for item in evidence:
        if not item.dropped:
            why = limit_drop(item, config, pools)
            if why:
                item.dropped, item.dropped_round = why, round_
    top = leader(evidence, config, pools)
    if top is None:
        return None
    top_figure = figure(top, config.objective, config, pools)
    for item in evidence:
        if item.dropped or item is top or not may_drop(item, config.objective, config, pools):
            continue
        found = figure(item, config.objective, config, pools)
        if found is not None and top_figure is not None and clearly_worse(
                found, top_figure, config.higher_is_better):
            item.dropped = (f"{OBJECTIVE_DROP}{'below' if config.higher_is_better else 'above'} "
                            f"{top.candidate.key}: {found.text()} against {top_figure.text()}")
            item.dropped_round = round_
    return top


def ranked(evidence: Sequence[Evidence], config: SearchConfig, pools: Pools | None = None
           ) -> list[Evidence]:
    """The candidates meeting every limit, best objective figure first."""
    found = [item for item in evidence if meets(item, config, pools)]
    sign = -1.0 if config.higher_is_better else 1.0
    return sorted(found, key=lambda item: sign * figure(item, config.objective, config,
                                                        pools).point)
