"""The search of ``run.py recommend``: a race that spends the budget where it decides something.

A full sweep measures every candidate N times; most of those runs only confirm that a slow
configuration is slow. Here the candidates race in rounds of short runs, judged after every
measurement (``judging.judge``): a candidate leaves once it breaks a limit by its whole
interval or its interval is wholly worse than the leader's. Intervals come from a candidate's
own ``min_runs`` quiet runs, or earlier from the run-to-run noise pooled across candidates
(``pooling``), so a hopeless candidate may leave after one run.

* Round 1 measures each SUT's base candidate once, in the space's order; the SUT's other
  settings wait behind it (``staging``) and join the race once the base is near the leader.
  A candidate's first run keeps nothing back for the answer's accuracy: racing every SUT
  asked for comes first, and a budget that cannot hold one run of each base (each at
  ``run_seconds`` plus ``start_s``, the start a first run pays: framework, conversion,
  warm-up) is refused before any run, with the minimum it needs.
* From round 2 on, the best point estimate is measured first: the pool forms among the
  contenders, and the hopeless are dropped before they cost another run.
* Accuracy (and model size) is measured once per artifact, just before a candidate's run of
  round ``SearchConfig.accuracy_round``: round 2 under an accuracy or size limit (a candidate
  dropped on speed after round 1 never costs one), and there only while no candidate better
  by point meets the limits (the best by point first, until one meets them: the leader
  must); else, and for every contender, round ``min_runs`` (for the answer). The budget
  keeps back the best candidate's accuracy (``Race.answer_reserve``: priced by the runs the
  measurer says are due, the FP32 references with the first, each at its SUT's measured rate
  over the dataset), measured when no more runs fit.

The search stops when one candidate meeting the limits is left, at ``max_rounds``, or when
the next measurement would overrun the budget (each is checked against it, so the measured
time never exceeds it when runs take what they took before); then ``outcomes.verdict`` gives
the answer. A candidate is never recommended over one it was not raced against: when the
budget ended before a base (or a released setting) had its first run, the answer is
"undecided", naming those not raced beside the leaders (``_unraced``).

``sweep_check.brute_force`` judges a full sweep by the same rules (no drops): the check of the
search.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from quantmark.ground.errors import UserError
from quantmark.recommend import judging, mixed_points, outcomes, search_notes
from quantmark.recommend.candidates import Candidate, Evidence, Measurer, Outcome, SearchConfig
from quantmark.recommend.race import Race

log = logging.getLogger(__name__)

#: ``on_progress(done_runs, planned_runs, spent_s, eta_s, message)``
Progress = Callable[[int, int, float, float, str], None]
#: called with every candidate's evidence after each measurement (save it: Ctrl-C loses nothing)
Checkpoint = Callable[[list[Evidence]], None]


def search(candidates: Sequence[Candidate], measurer: Measurer, config: SearchConfig,
           on_progress: Progress | None = None, resume: Sequence[Evidence] | None = None,
           checkpoint: Checkpoint | None = None) -> Outcome:
    """Races ``candidates`` within ``config.budget_s`` and answers which to deploy.

    ``resume``: the evidence of an interrupted search of the same space (``checkpoint``
    gave it): what it measured is kept, not measured again, judged afresh, and its time
    counts toward the budget. ``checkpoint``: called with every candidate's evidence after
    each measurement and each round, to be saved (Ctrl-C loses nothing)."""
    race = Race.start(candidates, config, resume)
    _check_budget(race, measurer)
    if race.done_runs:
        _rejudge(race)
    first = 1 + min((len(item.runs) for item in race.active()), default=0)
    out_of_budget = False
    for round_ in range(first, config.max_rounds + 1):
        state = _run_round(race, measurer, round_, on_progress, checkpoint)
        if checkpoint is not None:
            checkpoint(race.evidence)
        if state == "budget":
            out_of_budget = True
            break
        if _settled(race):
            break
    outcome = outcomes.verdict(race.evidence, config, out_of_budget)
    unraced = _unraced(race)
    if unraced:
        _undecided_without(outcome, unraced)
    outcome.rounds, outcome.spent_s = race.last_round, race.spent_s
    outcome.notes = [*search_notes.notes(race, out_of_budget, outcome, unraced),
                     *mixed_points.notes(measurer)]
    return outcome


def _check_budget(race: Race, measurer: Measurer) -> None:
    """A fresh search must afford what it needs before it can decide anything: one run of
    each SUT's base candidate (its duration and the start a first run pays) and, under an
    accuracy or size limit, the accuracy runs of the fastest few (round 2 measures them
    first: the first with the FP32 references the measurer says are due, each run at the
    configured guess). Less decides nothing: one line with the minimum."""
    if race.spent_s > 0:
        return
    config, bases = race.config, race.active()
    runs = sum(race.run_estimate(item) for item in bases)
    accuracies = min(3, len(bases)) if config.accuracy_round == 2 else 0
    need = runs
    if accuracies:
        first = min(race.accuracy_cost(measurer, item) for item in bases)
        need += first + (accuracies - 1) * config.accuracy_seconds
    if not race.affordable(need):
        extra = (f" and the accuracy of the fastest {accuracies} (~{(need - runs) / 60:.1f} "
                 "min)" if accuracies else "")
        least = math.ceil(need / 6) / 10  # minutes, rounded up to a tenth
        raise UserError(
            f"--budget {round(config.budget_s / 60, 2):g} min cannot race the {len(bases)} "
            f"SUTs' base candidates once each ({len(bases)} runs of "
            f"~{runs / max(len(bases), 1):.0f} s with their start){extra}: it needs at least "
            f"{least:g} min; raise --budget to {least:g} or more, or narrow the space "
            "(--suts, --batch-sizes, --settings)")


def _unraced(race: Race) -> list[Evidence]:
    """Candidates still racing that never had a run and are not held behind a measured
    base: SUTs' bases, and settings released to race, that the budget never reached."""
    return [item for item in race.racing() if not item.runs and not race.staging.held(item)]


def _undecided_without(outcome: Outcome, unraced: list[Evidence]) -> None:
    """No answer among candidates not raced against ``unraced``: the verdict becomes
    "undecided", its candidates the leaders so far (none when none met the limits) and the
    unraced, whose figures are unknown."""
    leaders = [outcome.recommended] if outcome.recommended else list(outcome.tied)
    outcome.verdict, outcome.recommended = "undecided", None
    outcome.tied = [*leaders, *unraced]


def _rejudge(race: Race) -> None:
    """Judges resumed evidence afresh under this search's limits (a rerun may change them):
    the drops of the interrupted search are replayed on everything it measured, and the
    variants still held behind their base are derived again."""
    for item in race.evidence:
        item.dropped, item.dropped_round = "", None
    _judge(race, max(len(item.runs) for item in race.evidence))


def _judge(race: Race, round_: int) -> None:
    """Drops what can no longer win, then releases or drops the variants held behind
    their SUT's base."""
    leader = judging.judge(race.evidence, race.config, round_)
    nothing_else = not any(len(item.runs) < race.config.max_rounds for item in race.active())
    race.staging.update(race.evidence, leader, round_, nothing_else)


def _next(race: Race, round_: int) -> Evidence | None:
    """The next to measure in ``round_`` (of the active with fewer runs): in round 1 the
    bases first, in the space's order; then the best point first, an unmeasured variant at
    its base's point (the leading SUT's settings before second runs of slower ones)."""
    todo = [(index, item) for index, item in enumerate(race.evidence)
            if len(item.runs) < round_ and not item.dropped and not race.staging.held(item)]
    if not todo:
        return None
    config, staging = race.config, race.staging
    bases = [pair for pair in todo if staging.is_base(pair[1])]
    if round_ == 1 and bases:
        return bases[0][1]
    sign = -1.0 if config.higher_is_better else 1.0
    by_key = {item.candidate.key: item for item in race.evidence}

    def order(pair: tuple[int, Evidence]) -> tuple[bool, float, int]:
        item = pair[1]
        found = judging.figure(item, config.objective, config)
        if found is None:
            found = judging.figure(by_key[staging.base[item.candidate.sut].key],
                                   config.objective, config)
        return found is None, sign * found.point if found else 0.0, pair[0]

    return min(todo, key=order)[1]


def _run_round(race: Race, measurer: Measurer, round_: int, on_progress: Progress | None,
               checkpoint: Checkpoint | None) -> str:
    """Measures each active candidate with fewer than ``round_`` runs once (its artifact's
    accuracy first when due), judging after each: "done", "settled", or "budget" when the
    budget stopped it."""
    _judge(race, round_)
    while (item := _next(race, round_)) is not None:
        if race.needs_accuracy(item) and _accuracy_fits(race, measurer, item):
            if not race.affordable(race.accuracy_cost(measurer, item)
                                   + race.run_estimate(item)):
                return _last_accuracy(race, measurer, round_)
            _measure_accuracy(race, measurer, item)
            _judge(race, round_)
            if item.dropped:
                continue
        # a candidate's first run comes before the answer's accuracy: every SUT asked for is
        # raced before the budget keeps anything back
        reserve = race.answer_reserve(measurer)[1] if item.runs else 0.0
        if not race.affordable(reserve):  # it can no longer be measured: runs use the rest
            reserve = 0.0
        if not race.affordable(race.run_estimate(item) + reserve):
            return _last_accuracy(race, measurer, round_)
        started = time.monotonic()
        run = measurer.run(item.candidate, race.config.run_seconds)
        item.runs.append(run)
        race.spent_s += run.seconds if run.seconds > 0 else time.monotonic() - started
        race.done_runs += 1
        race.last_round = round_
        log.debug("round %d: %s %s", round_, item.candidate.key,
                  "VALID" if run.valid else f"INVALID {run.why}")
        _judge(race, round_)
        if checkpoint is not None:
            checkpoint(race.evidence)
        if on_progress is not None:
            _report(race, on_progress, round_, item)
        if _settled(race):
            return "settled"
    return "done"


def _accuracy_fits(race: Race, measurer: Measurer, item: Evidence) -> bool:
    """Whether a due accuracy is still to be measured: always under an accuracy or size
    limit (it decides); else (it is for the answer) only while the rest of the budget holds
    it: one that never can no longer stops the runs, which use the rest."""
    if race.config.accuracy_round == 2:
        return True
    return race.affordable(race.accuracy_cost(measurer, item))


def _last_accuracy(race: Race, measurer: Measurer, round_: int) -> str:
    """The budget holds no more runs: the best candidate's accuracy, if not measured and
    still affordable (the answer shows it), then "budget"."""
    best, reserve = race.answer_reserve(measurer)
    if best is not None and best.accuracy is None and race.affordable(reserve):
        _measure_accuracy(race, measurer, best)
        _judge(race, round_)
    return "budget"


def _measure_accuracy(race: Race, measurer: Measurer, item: Evidence) -> None:
    started = time.monotonic()
    result = measurer.accuracy(item.candidate)
    if not result.seconds > 0:
        result = replace(result, seconds=time.monotonic() - started)
    race.spent_s += result.seconds
    item.accuracy = result
    race.share_accuracy()
    added, seconds = mixed_points.mixed_points(race.evidence, measurer, race.config, race.spent_s)
    race.spent_s += seconds  # the diagnosis ranking the layers is the budget's
    race.evidence += [Evidence(candidate) for candidate in added]


def _report(race: Race, on_progress: Progress, round_: int, item: Evidence) -> None:
    """The planned runs: the rest of this round and every later one for those racing (held
    variants included), as far as the budget reaches."""
    config = race.config
    racing = race.racing()
    run_s = sum(run.seconds for item in race.evidence for run in item.runs)
    per_run = run_s / max(race.done_runs, 1) or config.run_seconds + config.start_s
    left_in_round = sum(len(other.runs) < round_ for other in race.active())
    ahead = left_in_round + len(racing) * (config.max_rounds - round_)
    ahead = min(ahead, int(max(config.budget_s - race.spent_s, 0) / max(per_run, 1e-9)))
    eta = min(ahead * per_run, max(config.budget_s - race.spent_s, 0.0))
    on_progress(race.done_runs, race.done_runs + ahead, race.spent_s, eta,
                f"round {round_}/{config.max_rounds}: {item.candidate.key} "
                f"({len(racing)} racing)")


def _settled(race: Race) -> bool:
    """Nothing left to race, or one candidate meeting the limits left with its own interval
    (``min_runs`` quiet runs: a pooled one may drop others, but the answer's figure is its
    own; and its accuracy measured by then, for the answer)."""
    racing = race.racing()
    if not racing:
        return True
    if len(racing) > 1:
        return False
    alone, config = racing[0], race.config
    return (not race.staging.held(alone) and judging.decision_runs(alone, config.min_runs)[1]
            and judging.meets(alone, config))
