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
* A candidate meets a limit by its figure (the point); it is dropped for a limit only when its
  whole interval lies beyond it (accuracy: the paired interval of its change; model size: the
  artifact's size, a single number).
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

from quantmark.recommend.candidates import Evidence, Excluded, Measurement, Outcome
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
OUT_OF_REACH = "stopped racing: cannot meet"
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
    # a drop in points: the change's interval turned around
    return Span(0.0 - accuracy.change_points, 0.0 - accuracy.high, 0.0 - accuracy.low, True)


def uncertain_limits(evidence: Evidence, config: SearchConfig, pools: Pools | None = None
                     ) -> list[str]:
    """The limits the candidate meets by its figure while its interval reaches beyond them:
    the answer says so rather than claim them met for certain."""
    found = []
    for limit, bound in set_limits(config).items():
        own = span(evidence, limit, config, pools)
        far = None if own is None else (own.high if LIMIT_SIGNS[limit] > 0 else own.low)
        if own is not None and margin(own.point, limit, bound) <= 0 < margin(far, limit, bound):
            found.append(f"{evidence.candidate.key} meets {limit} {bound:g} by its figure "
                         f"{own.point:.4g}, but its interval [{own.low:.4g}, {own.high:.4g}] "
                         "reaches beyond it")
    return found


def margin(value: float, limit: str, bound: float) -> float:
    """How far ``value`` lies beyond ``bound`` (positive: it breaks the limit)."""
    return (value - bound) * LIMIT_SIGNS[limit]


def set_limits(config: SearchConfig) -> dict[str, float]:
    return {name: getattr(config.limits, name) for name in LIMIT_SIGNS
            if getattr(config.limits, name) is not None}


def meets(evidence: Evidence, config: SearchConfig, pools: Pools | None = None) -> bool:
    """Meets every limit by its figures, and has an objective figure. An unknown accuracy
    (not measured, or its run failed) does not meet an accuracy limit; an unmeasured memory
    figure is not judged."""
    if figure(evidence, config.objective, config, pools) is None:
        return False
    for limit, bound in set_limits(config).items():
        found = span(evidence, limit, config, pools)
        if found is None:
            if limit in ("max_accuracy_drop", "max_model_size_mb"):
                return False
            continue
        if margin(found.point, limit, bound) > 0:
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
        if found is not None and found.can_drop and margin(found.low if LIMIT_SIGNS[limit] > 0
                                                           else found.high, limit, bound) > 0:
            return (f"breaks {limit} {bound:g}: {found.point:.4g} "
                    f"[{found.low:.4g}, {found.high:.4g}]")
        if found is not None and limit in MEASURED_ONCE and margin(found.point, limit,
                                                                   bound) > 0:
            return (f"{OUT_OF_REACH} {limit} {bound:g}: its figure {found.point:.4g} (its "
                    f"interval [{found.low:.4g}, {found.high:.4g}] reaches inside) is measured "
                    "once, and more runs cannot change it")
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


def verdict(evidence: Sequence[Evidence], config: SearchConfig, out_of_budget: bool
            ) -> Outcome:
    """The answer from the evidence: winner, tied, undecided or infeasible (see ``Outcome``),
    with each limit's cost. ``out_of_budget``: the search stopped for its budget."""
    pools = pools_of(evidence, config)
    pool = ranked(evidence, config, pools)
    outcome = Outcome(verdict="infeasible", objective=config.objective,
                      higher_is_better=config.higher_is_better, limits=config.limits,
                      recommended=None, tied=[], excluded=[], evidence=list(evidence),
                      budget_s=config.budget_s)
    unjudged = _unjudged(evidence, config, pools)
    if not pool and out_of_budget and unjudged:  # none known to fit, none known not to
        outcome.verdict, outcome.tied = "undecided", unjudged
    elif not pool:
        outcome.binding, outcome.closest = binding(evidence, config), closest(evidence, config)
    else:
        best = figure(pool[0], config.objective, config, pools)
        rivals = [item for item in pool[1:] if _rival(item, best, config, pools)]
        if not rivals:
            outcome.verdict, outcome.recommended = "winner", pool[0]
        else:
            outcome.verdict = "undecided" if out_of_budget else "tied"
            outcome.tied = [pool[0], *rivals]
    reference = outcome.recommended or (outcome.tied[0] if outcome.tied else None)
    outcome.excluded = excluded(evidence, config, reference)
    return outcome


def _unjudged(evidence: Sequence[Evidence], config: SearchConfig, pools: Pools
              ) -> list[Evidence]:
    """Racing candidates with a figure whose accuracy (under an accuracy or size limit) the
    budget never reached: whether they meet the limits is unknown. Best figure first."""
    if config.accuracy_round != 2:
        return []
    found = [item for item in evidence if not item.dropped and item.accuracy is None
             and figure(item, config.objective, config, pools) is not None]
    sign = -1.0 if config.higher_is_better else 1.0
    return sorted(found, key=lambda item: sign * figure(item, config.objective, config,
                                                        pools).point)


def _rival(item: Evidence, best: Interval, config: SearchConfig, pools: Pools) -> bool:
    """Not clearly worse than ``best`` by the intervals the search judged with. A candidate
    the search dropped as clearly worse than a leader is no rival: that was the judgment (a
    leader's own ``min_runs`` interval, on t with 2 degrees of freedom, may be wider later
    than the pooled one that dropped it); nor is one dropped without an interval."""
    found = figure(item, config.objective, config, pools)
    if found is None or item.dropped.startswith(OBJECTIVE_DROP) or (
            item.dropped and found.low is None):
        return False
    return best.low is None or not clearly_worse(found, best, config.higher_is_better)


def _breaking(evidence: Sequence[Evidence], limit: str, bound: float, config: SearchConfig
              ) -> list[tuple[Evidence, Span]]:
    """The candidates whose figure breaks ``limit``."""
    found = [(item, span(item, limit, config)) for item in evidence]
    return [(item, s) for item, s in found if s is not None and margin(s.point, limit, bound) > 0]


def excluded(evidence: Sequence[Evidence], config: SearchConfig, reference: Evidence | None
             ) -> list[Excluded]:
    """For each limit, the best candidate (on the objective) it excluded, by how much, and
    how much better than ``reference`` (the recommendation) it was: the limit's cost."""
    sign = -1.0 if config.higher_is_better else 1.0
    base = figure(reference, config.objective, config) if reference is not None else None
    found = []
    for limit, bound in set_limits(config).items():
        breaking = _breaking(evidence, limit, bound, config)
        if not breaking:
            continue
        item, own_span = min(breaking, key=lambda pair: _objective_order(pair, sign, config))
        own = figure(item, config.objective, config)
        ratio = None
        if own is not None and base is not None:
            ratio = own.point / base.point if config.higher_is_better else base.point / own.point
        found.append(Excluded(limit, item, own_span.point, bound,
                              margin(own_span.point, limit, bound), ratio))
    return found


def _objective_order(pair: tuple[Evidence, Span], sign: float, config: SearchConfig
                     ) -> tuple[bool, float]:
    """Best objective figure first; the unmeasured last."""
    own = figure(pair[0], config.objective, config)
    return own is None, sign * own.point if own is not None else 0.0


def binding(evidence: Sequence[Evidence], config: SearchConfig) -> str:
    """The limit that excludes the most candidates ("" when none is set or none breaks);
    of two excluding as many, the first in ``LIMIT_SIGNS``'s order."""
    counts = {limit: len(_breaking(evidence, limit, bound, config))
              for limit, bound in set_limits(config).items()}
    counts = {limit: n for limit, n in counts.items() if n}
    return max(counts, key=counts.__getitem__) if counts else ""


def shortfall(evidence: Evidence, config: SearchConfig) -> float | None:
    """How far the candidate is from meeting every limit: the sum of its margins beyond
    them, each relative to its bound (accuracy: in points); None while unmeasured."""
    if figure(evidence, config.objective, config) is None:
        return None
    total = 0.0
    for limit, bound in set_limits(config).items():
        found = span(evidence, limit, config)
        if found is None:
            continue
        scale = max(abs(bound), 1.0) if limit == "max_accuracy_drop" else abs(bound) or 1.0
        total += max(0.0, margin(found.point, limit, bound)) / scale
    return total


def closest(evidence: Sequence[Evidence], config: SearchConfig) -> Evidence | None:
    """The measured candidate nearest to meeting every limit."""
    scored = [(shortfall(item, config), index, item) for index, item in enumerate(evidence)]
    scored = [entry for entry in scored if entry[0] is not None]
    return min(scored, key=lambda entry: entry[:2])[2] if scored else None
