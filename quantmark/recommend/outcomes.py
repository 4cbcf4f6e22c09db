"""The search's answer from its evidence (``verdict``): winner, tied, undecided, infeasible
or cannot tell, with what each limit cost (``excluded``), the binding limit and the closest
candidate where none fits, and the candidates the evidence cannot judge. The rules it
applies are ``judging``'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from quantmark.recommend.candidates import Evidence, Excluded, Outcome
from quantmark.recommend.judging import (
    BROKEN,
    CANNOT_TELL,
    OBJECTIVE_DROP,
    Pools,
    Span,
    broken_limits,
    clearly_worse,
    figure,
    limit_state,
    margin,
    pools_of,
    ranked,
    set_limits,
    span,
    uncertain_limits,
    undecided_limits,
)
from quantmark.report.stats import Interval

if TYPE_CHECKING:
    from quantmark.recommend.candidates import SearchConfig


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
    outcome.cannot_tell = cannot_tell(evidence, config, pools, reference)
    outcome.cannot_tell_why = {item.candidate.key: uncertain_limits(item, config, pools)
                               for item in outcome.cannot_tell}
    if outcome.verdict == "infeasible" and outcome.cannot_tell:
        outcome.verdict = CANNOT_TELL  # none known to meet, some not known to break
    return outcome


def cannot_tell(evidence: Sequence[Evidence], config: SearchConfig, pools: Pools,
                reference: Evidence | None) -> list[Evidence]:
    """The candidates the evidence cannot judge against some limit (none broken) whose
    objective point beats ``reference``'s (the answer's; every one without it): what the
    answer cannot rule in or out. Best point first."""
    sign = -1.0 if config.higher_is_better else 1.0
    base = figure(reference, config.objective, config, pools) if reference else None
    found = []
    for item in evidence:
        own = figure(item, config.objective, config, pools)
        if own is None or item is reference or item.dropped.startswith(OBJECTIVE_DROP):
            continue
        if not undecided_limits(item, config, pools) or broken_limits(item, config, pools):
            continue
        if base is None or sign * own.point < sign * base.point:
            found.append((sign * own.point, item))
    return [item for _, item in sorted(found, key=lambda pair: pair[0])]


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
    """The candidates whose interval shows ``limit`` broken."""
    found = [(item, span(item, limit, config)) for item in evidence]
    return [(item, s) for item, s in found if limit_state(s, limit, bound) == BROKEN]


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
