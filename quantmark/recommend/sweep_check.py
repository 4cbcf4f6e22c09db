"""The check of the search (``search``): a full sweep of the same space, every candidate
measured the same number of times, judged by the search's own rules with nothing dropped.
The tests run it on stand-in SUTs with planted values; ``bench/recommend_sweep.py`` on real
ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from quantmark.recommend import outcomes
from quantmark.recommend.candidates import AccuracyResult, Candidate, Evidence, Measurer, Outcome

if TYPE_CHECKING:
    from quantmark.recommend.candidates import SearchConfig


def full_sweep(candidates: Sequence[Candidate], measurer: Measurer, runs: int,
               seconds: float) -> list[Evidence]:
    """Every candidate measured ``runs`` times, interleaved, accuracy once per artifact: the
    sweep the search is checked against."""
    evidence = [Evidence(c) for c in candidates]
    accuracy: dict[str, AccuracyResult] = {}
    for _ in range(runs):
        for item in evidence:
            artifact = item.candidate.artifact
            if artifact not in accuracy:
                accuracy[artifact] = measurer.accuracy(item.candidate)
            item.accuracy = accuracy[artifact]
            item.runs.append(measurer.run(item.candidate, seconds))
    return evidence


def brute_force(evidence: Sequence[Evidence], config: SearchConfig) -> Outcome:
    """The optimum of a full sweep (``full_sweep``, or planted true values as identical
    exact runs: a zero-width interval) under the same limits and rules, nothing dropped:
    what the search must find."""
    fresh = [Evidence(item.candidate, list(item.runs), item.accuracy) for item in evidence]
    outcome = outcomes.verdict(fresh, config, out_of_budget=False)
    outcome.rounds = max((len(item.runs) for item in fresh), default=0)
    outcome.spent_s = sum(run.seconds for item in fresh for run in item.runs)
    outcome.spent_s += sum(acc.seconds for acc in {item.candidate.artifact: item.accuracy
                                                   for item in fresh if item.accuracy}.values())
    return outcome
