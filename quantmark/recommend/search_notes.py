"""The notes of a search's answer: why it stopped, what it assumed to save runs (the pooled
noise, the staged settings, accuracy measured only where it decides), and each candidate's
INVALID and disturbed runs. Kept apart from ``search`` (the race) for its size only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from quantmark.recommend import judging
from quantmark.recommend.candidates import Evidence, Outcome
from quantmark.recommend.staging import NOT_MEASURED

if TYPE_CHECKING:
    from quantmark.recommend.race import Race


def notes(race: Race, out_of_budget: bool, outcome: Outcome,
          unraced: Sequence[Evidence] = ()) -> list[str]:
    """Why it stopped, which candidates it never raced, what it assumed (pooled noise,
    staged settings, accuracy only where it decides), and each candidate's INVALID and
    disturbed runs."""
    config = race.config
    notes = [f"stopped after round {outcome.rounds}: "
             + (f"the budget ({config.budget_s:.0f} s) would not cover the next runs; "
                f"{race.spent_s:.0f} s spent" if out_of_budget
                else f"{race.spent_s:.0f} s of {config.budget_s:.0f} s spent")]
    if unraced:
        notes.append("not raced (the budget ended before their first run): "
                     + ", ".join(item.candidate.key for item in unraced)
                     + "; nothing is recommended over candidates it never measured; a larger "
                       "--budget continues with them")
    waiting = [item for item in race.racing() if not item.runs and item not in unraced]
    if waiting:
        by_sut = Counter(item.candidate.sut for item in waiting)
        notes.append(f"{len(waiting)} candidates still racing were never measured ("
                     + ", ".join(f"{sut}: {count}" for sut, count in by_sut.items())
                     + "): the answer is among those measured; a larger --budget continues "
                       "with them")
    pools = judging.pools_of(race.evidence, config)
    notes += assumptions(race, pools)
    for item in race.evidence:
        invalid = sum(not run.valid for run in item.runs)
        disturbed = sum(run.valid and run.disturbed for run in item.runs)
        if invalid:
            notes.append(f"{item.candidate.key}: {invalid} of {len(item.runs)} runs INVALID, "
                         "left out of its figures")
        if disturbed:
            _, quiet = judging.decision_runs(item, config.min_runs)
            notes.append(f"{item.candidate.key}: {disturbed} of {len(item.runs)} runs disturbed, "
                         + ("left out of its figures (enough quiet runs)" if quiet else
                            "kept in its figures (too few quiet runs); it was not dropped on "
                            "them"))
    return notes


def assumptions(race: Race, pools: judging.Pools) -> list[str]:
    """The notes on what the search assumed to save runs."""
    config, notes = race.config, []
    found = pools.get(config.objective)
    if found is not None:
        notes.append(f"run-to-run noise pooled across candidates (sd {found.sd:.3f} of "
                     f"log {config.objective}, {found.df} degrees of freedom): candidates "
                     f"with fewer than {config.min_runs} quiet runs were judged on it")
    held = [item for item in race.evidence if item.dropped.startswith(NOT_MEASURED)]
    if held:
        notes.append(f"{len(held)} candidates not measured: their SUT's base candidate was "
                     f"too far behind the leader, assuming batch, threads and options move "
                     f"a SUT's speed by at most x{config.settings_spread:g}")
    unmeasured = [item for item in race.evidence if item.runs and item.accuracy is None]
    if unmeasured:
        why = ("dropped before it was due: at round 2 for the best by point until one meets "
               f"the limits, at round {config.min_runs} for every contender"
               if config.accuracy_round == 2 else
               f"accuracy is measured for the contenders reaching round {config.min_runs}, "
               "and for the best by point when the budget ends the rounds first, where the "
               "budget holds it")
        notes.append(f"{len(unmeasured)} measured candidates have no accuracy result ({why}); "
                     "the Pareto figure leaves them out")
    return notes
