"""The search of ``run.py recommend``: a race that spends the budget where it decides something.

A full sweep measures every candidate N times; most of those runs only confirm that a slow
configuration is slow. Here the candidates race in rounds of short runs: each round measures
every candidate still racing once, in an order rotated round by round (interleaved, so a drift
of the machine hits them alike), and after each round the ones that can no longer win leave
(``judging``: beyond a limit by their whole interval, or wholly worse than the leader's
interval, never before ``min_runs`` undisturbed VALID runs). Accuracy is measured once per
artifact, just before the artifact's first run. The search stops when one candidate meeting
the limits is left, at ``max_rounds``, or when the next round would overrun the budget (each
run is checked against it too, so the measured time never exceeds it when runs take what they
took before); then ``judging.verdict`` gives the answer.

``brute_force`` judges a full sweep by the same rules (no drops): the check of the search.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from quantmark.ground.errors import UserError
from quantmark.recommend import judging
from quantmark.recommend.candidates import (
    OBJECTIVE_NAMES,
    OBJECTIVES,
    AccuracyResult,
    Candidate,
    Evidence,
    Limits,
    Measurer,
    Outcome,
)

log = logging.getLogger(__name__)

#: ``on_progress(done_runs, planned_runs, spent_s, eta_s, message)``
Progress = Callable[[int, int, float, float, str], None]
#: called with every candidate's evidence after each measurement (save it: Ctrl-C loses nothing)
Checkpoint = Callable[[list[Evidence]], None]


@dataclass(frozen=True)
class SearchConfig:
    """What the search optimizes, under which limits, and how long it may take."""

    objective: str  # "latency_ms" | "samples_per_s"
    higher_is_better: bool
    limits: Limits = field(default_factory=Limits)
    budget_s: float = 900.0  # measured seconds of runs and accuracy runs, all together
    run_seconds: float = 10.0  # one run's expected wall time, until one was timed
    min_runs: int = 3  # VALID undisturbed runs before a candidate may be dropped on its figures
    max_rounds: int = 10
    confidence: float = 0.95  # of every interval the search judges
    accuracy_seconds: float = 0.0  # one accuracy run's expected time, until one was timed

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVE_NAMES:
            raise UserError(f"unknown objective {self.objective!r}; choose one of "
                            f"{', '.join(OBJECTIVE_NAMES)}")
        if self.min_runs < 3:
            raise UserError(f"min_runs {self.min_runs}: a candidate needs at least 3 runs "
                            "before it may be dropped (an interval of 2 is too wide to drop on)")
        if self.max_rounds < self.min_runs:
            raise UserError(f"max_rounds {self.max_rounds} is below min_runs {self.min_runs}: "
                            "nothing could ever be dropped")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"confidence {self.confidence} must lie in [0.5, 1)")
        if not self.budget_s > 0 or not self.run_seconds > 0 or self.accuracy_seconds < 0:
            raise UserError("the budget and the seconds per run must be positive")

    @classmethod
    def for_scenario(cls, scenario: str, objective: str | None = None, **kwargs: object
                     ) -> SearchConfig:
        """The objective the scenario implies (``OBJECTIVES``) unless ``objective`` names one."""
        if scenario not in OBJECTIVES:
            raise UserError(f"unknown scenario {scenario!r}; choose one of {', '.join(OBJECTIVES)}")
        objective = objective or OBJECTIVES[scenario][0]
        return cls(objective=objective, higher_is_better=objective == "samples_per_s",
                   **kwargs)  # type: ignore[arg-type]


@dataclass
class _Race:
    """The search's state: the evidence, in the candidates' order, and the time spent."""

    evidence: list[Evidence]
    config: SearchConfig
    spent_s: float = 0.0
    done_runs: int = 0

    @classmethod
    def start(cls, candidates: Sequence[Candidate], config: SearchConfig,
              resume: Sequence[Evidence] | None) -> _Race:
        """Fresh evidence for each candidate, or the resumed one's (matched by key)."""
        if not candidates:
            raise UserError("no candidate to search: the space is empty; widen --suts, "
                            "--batch-sizes or --settings")
        keys = [c.key for c in candidates]
        if len(set(keys)) != len(keys):
            raise UserError("the same candidate appears twice in the space: "
                            + next(k for k in keys if keys.count(k) > 1))
        saved = {item.candidate.key: item for item in resume or ()}
        evidence = [saved.get(c.key) or Evidence(c) for c in candidates]
        race = cls(evidence, config)
        race.spent_s = sum(run.seconds for item in evidence for run in item.runs)
        race.spent_s += sum(acc.seconds for acc in race.accuracies().values())
        race.done_runs = sum(len(item.runs) for item in evidence)
        race.share_accuracy()
        return race

    def accuracies(self) -> dict[str, AccuracyResult]:
        """Each artifact's accuracy result, measured once."""
        return {item.candidate.artifact: item.accuracy for item in self.evidence
                if item.accuracy is not None}

    def share_accuracy(self) -> None:
        known = self.accuracies()
        for item in self.evidence:
            if item.accuracy is None and item.candidate.artifact in known:
                item.accuracy = known[item.candidate.artifact]

    def racing(self) -> list[Evidence]:
        return [item for item in self.evidence if not item.dropped]

    def run_estimate(self, item: Evidence) -> float:
        """The longest this candidate's run took so far, else the longest of any, else the
        configured seconds: the budget is checked against the slow case."""
        own = [run.seconds for run in item.runs if run.seconds > 0]
        every = [run.seconds for other in self.evidence for run in other.runs if run.seconds > 0]
        return max(own or every or [self.config.run_seconds])

    def accuracy_estimate(self) -> float:
        timed = [acc.seconds for acc in self.accuracies().values() if acc.seconds > 0]
        return max(timed or [self.config.accuracy_seconds])

    def cost(self, items: Sequence[Evidence], runs_each: int = 1) -> float:
        """The expected seconds of ``runs_each`` runs of ``items``, with the accuracy runs
        their artifacts still need."""
        artifacts = {item.candidate.artifact for item in items if item.accuracy is None}
        return (sum(self.run_estimate(item) for item in items) * runs_each
                + len(artifacts) * self.accuracy_estimate())

    def affordable(self, seconds: float) -> bool:
        return self.spent_s + seconds <= self.config.budget_s + 1e-9


def search(candidates: Sequence[Candidate], measurer: Measurer, config: SearchConfig,
           on_progress: Progress | None = None, resume: Sequence[Evidence] | None = None,
           checkpoint: Checkpoint | None = None) -> Outcome:
    """Races ``candidates`` within ``config.budget_s`` and answers which to deploy.

    ``resume``: the evidence of an interrupted search of the same space (``checkpoint``
    gave it): what it measured is kept, not measured again, judged afresh, and its time
    counts toward the budget. ``checkpoint``: called with every candidate's evidence after
    each measurement and each round, to be saved (Ctrl-C loses nothing)."""
    race = _Race.start(candidates, config, resume)
    _check_budget(race)
    if race.done_runs:
        _rejudge(race)
    first = 1 + min((len(item.runs) for item in race.racing()), default=0)
    out_of_budget, round_ = False, first - 1
    for round_ in range(first, config.max_rounds + 1):
        todo = _round_order(race, round_)
        if not race.affordable(race.cost(todo)):
            out_of_budget, round_ = True, round_ - 1
            break
        if not _run_round(race, measurer, todo, round_, on_progress, checkpoint):
            out_of_budget = True
            break
        judging.drop_after_round(race.evidence, config, round_)
        if checkpoint is not None:
            checkpoint(race.evidence)
        if _settled(race):
            break
    outcome = judging.verdict(race.evidence, config, out_of_budget)
    outcome.rounds, outcome.spent_s = max(round_, 0), race.spent_s
    outcome.notes = _notes(race, out_of_budget, outcome)
    return outcome


def _check_budget(race: _Race) -> None:
    """A fresh search must afford ``min_runs`` rounds of the whole space: before that nothing
    can be dropped on its figures, and no interval exists to decide with."""
    if race.spent_s > 0:
        return
    need = race.cost(race.racing(), race.config.min_runs)
    if not race.affordable(need):
        raise UserError(
            f"a budget of {race.config.budget_s / 60:.1f} min cannot measure the "
            f"{len(race.racing())} candidates {race.config.min_runs} times each "
            f"(~{need / 60:.1f} min); raise --budget or narrow the space (--suts, "
            "--batch-sizes, --settings)")


def _rejudge(race: _Race) -> None:
    """Judges resumed evidence afresh under this search's limits (a rerun may change them):
    the drops of the interrupted search are replayed on everything it measured."""
    for item in race.evidence:
        item.dropped, item.dropped_round = "", None
    judging.drop_after_round(race.evidence, race.config,
                             max(len(item.runs) for item in race.evidence))


def _round_order(race: _Race, round_: int) -> list[Evidence]:
    """The racing candidates that have fewer than ``round_`` runs (all of them, except after
    a resume mid-round), rotated by the round: interleaved, no fixed first slot."""
    racing = race.racing()
    if not racing:
        return []
    shift = (round_ - 1) % len(racing)
    return [item for item in racing[shift:] + racing[:shift] if len(item.runs) < round_]


def _run_round(race: _Race, measurer: Measurer, todo: list[Evidence], round_: int,
               on_progress: Progress | None, checkpoint: Checkpoint | None) -> bool:
    """Measures each of ``todo`` once (its artifact's accuracy first, if not yet measured);
    False when the budget stopped it half-way."""
    for position, item in enumerate(todo):
        if item.accuracy is None:
            if not race.affordable(race.accuracy_estimate() + race.run_estimate(item)):
                return False
            _measure_accuracy(race, measurer, item)
        if not race.affordable(race.run_estimate(item)):
            return False
        started = time.monotonic()
        run = measurer.run(item.candidate, race.config.run_seconds)
        item.runs.append(run)
        race.spent_s += run.seconds if run.seconds > 0 else time.monotonic() - started
        race.done_runs += 1
        log.debug("round %d: %s %s", round_, item.candidate.key,
                  "VALID" if run.valid else f"INVALID {run.why}")
        if checkpoint is not None:
            checkpoint(race.evidence)
        if on_progress is not None:
            _report(race, on_progress, round_, len(todo) - position - 1, item)
    return True


def _measure_accuracy(race: _Race, measurer: Measurer, item: Evidence) -> None:
    started = time.monotonic()
    result = measurer.accuracy(item.candidate)
    if not result.seconds > 0:
        result = replace(result, seconds=time.monotonic() - started)
    race.spent_s += result.seconds
    item.accuracy = result
    race.share_accuracy()


def _report(race: _Race, on_progress: Progress, round_: int, left_in_round: int,
            item: Evidence) -> None:
    """The planned runs: the rest of this round and every later one for those racing, as
    far as the budget reaches."""
    config = race.config
    racing = race.racing()
    run_s = sum(run.seconds for item in race.evidence for run in item.runs)
    per_run = run_s / max(race.done_runs, 1) or config.run_seconds
    ahead = left_in_round + len(racing) * (config.max_rounds - round_)
    ahead = min(ahead, int(max(config.budget_s - race.spent_s, 0) / max(per_run, 1e-9)))
    eta = min(ahead * per_run, max(config.budget_s - race.spent_s, 0.0))
    on_progress(race.done_runs, race.done_runs + ahead, race.spent_s, eta,
                f"round {round_}/{config.max_rounds}: {item.candidate.key} "
                f"({len(racing)} racing)")


def _settled(race: _Race) -> bool:
    """Nothing left to race, or one candidate meeting the limits left with its interval."""
    racing = race.racing()
    if not racing:
        return True
    if len(racing) > 1:
        return False
    alone = racing[0]
    _, quiet = judging.decision_runs(alone, race.config.min_runs)
    return quiet and judging.meets(alone, race.config)


def _notes(race: _Race, out_of_budget: bool, outcome: Outcome) -> list[str]:
    """Why it stopped, and each candidate's INVALID and disturbed runs."""
    config = race.config
    notes = [f"stopped after round {outcome.rounds}: "
             + (f"the budget ({config.budget_s:.0f} s) would not cover the next runs; "
                f"{race.spent_s:.0f} s spent" if out_of_budget
                else f"{race.spent_s:.0f} s of {config.budget_s:.0f} s spent")]
    for item in ([outcome.recommended] if outcome.recommended else outcome.tied):
        notes += judging.uncertain_limits(item, config)
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
    outcome = judging.verdict(fresh, config, out_of_budget=False)
    outcome.rounds = max((len(item.runs) for item in fresh), default=0)
    outcome.spent_s = sum(run.seconds for item in fresh for run in item.runs)
    outcome.spent_s += sum(acc.seconds for acc in {item.candidate.artifact: item.accuracy
                                                   for item in fresh if item.accuracy}.values())
    return outcome
