"""The search of ``run.py recommend``: a race that spends the budget where it decides something.

A full sweep measures every candidate N times; most of those runs only confirm that a slow
configuration is slow. Here the candidates race in rounds of short runs, judged after every
measurement (``judging.judge``): a candidate leaves once it breaks a limit by its whole
interval or its interval is wholly worse than the leader's. Intervals come from a candidate's
own ``min_runs`` quiet runs, or earlier from the run-to-run noise pooled across candidates
(``pooling``), so a hopeless candidate may leave after one run.

* Round 1 measures each SUT's base candidate once, in the space's order; the SUT's other
  settings wait behind it (``staging``) and join the race once the base is near the leader.
* From round 2 on, the best point estimate is measured first: the pool forms among the
  contenders, and the hopeless are dropped before they cost another run.
* Accuracy (and model size) is measured once per artifact, just before a candidate's run of
  round ``SearchConfig.accuracy_round``: round 2 under an accuracy or size limit (a candidate
  dropped on speed after round 1 never costs one), and there only while no candidate better
  by point meets the limits (the best by point first, until one meets them: the leader
  must); else, and for every contender, round ``min_runs`` (for the answer). The budget
  keeps back the best candidate's accuracy (``_Race.answer_reserve``: priced by the runs the
  measurer says are due, the FP32 references with the first, each at its SUT's measured rate
  over the dataset), measured when no more runs fit.

The search stops when one candidate meeting the limits is left, at ``max_rounds``, or when
the next measurement would overrun the budget (each is checked against it, so the measured
time never exceeds it when runs take what they took before); then ``judging.verdict`` gives
the answer.

``sweep_check.brute_force`` judges a full sweep by the same rules (no drops): the check of the
search.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from quantmark.ground.errors import UserError
from quantmark.recommend import judging, mixed_points, search_notes
from quantmark.recommend.candidates import (
    BASE_BATCH,
    DEFAULT_RECOVER,
    OBJECTIVE_NAMES,
    OBJECTIVES,
    AccuracyResult,
    Candidate,
    Evidence,
    Limits,
    Measurer,
    Outcome,
    accuracy_suts_due,
)
from quantmark.recommend.staging import Staging

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
    run_seconds: float = 10.0  # each run's LoadGen duration (``--seconds``)
    start_s: float = 5.0  # a run's wall time beyond its duration, until one was timed
    min_runs: int = 3  # VALID undisturbed runs before a candidate may be dropped on its figures
    max_rounds: int = 30  # the budget usually ends a search first
    confidence: float = 0.95  # of every interval the search judges
    accuracy_seconds: float = 0.0  # one accuracy run's expected time, until a rate is known
    #: how much batch, threads and options may move one SUT's speed (a factor): a SUT's
    #: other settings are measured only while its base, so widened, reaches the leader
    settings_spread: float = 2.0
    #: each SUT's base batch (``staging``); None: the SUT's first batch in the space
    base_batch: int | None = None
    recover: int = DEFAULT_RECOVER  # --recover K: 1, 2, 4 ... K layers kept in float

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
        if not self.budget_s > 0 or not self.run_seconds > 0 or self.accuracy_seconds < 0 \
                or self.start_s < 0:
            raise UserError("the budget and the seconds per run must be positive")
        if not self.settings_spread >= 1:
            raise UserError(f"settings_spread {self.settings_spread} must be at least 1 (a "
                            "factor the settings may move a SUT's speed by)")

    @property
    def accuracy_round(self) -> int:
        """The round before whose run a candidate's artifact gets its accuracy measured."""
        limited = (self.limits.max_accuracy_drop is not None
                   or self.limits.max_model_size_mb is not None)
        return 2 if limited else self.min_runs

    @classmethod
    def for_scenario(cls, scenario: str, objective: str | None = None, **kwargs: object
                     ) -> SearchConfig:
        """The objective the scenario implies (``OBJECTIVES``) unless ``objective`` names one."""
        if scenario not in OBJECTIVES:
            raise UserError(f"unknown scenario {scenario!r}; choose one of {', '.join(OBJECTIVES)}")
        objective = objective or OBJECTIVES[scenario][0]
        kwargs.setdefault("base_batch", BASE_BATCH[scenario])
        return cls(objective=objective, higher_is_better=objective == "samples_per_s",
                   **kwargs)  # type: ignore[arg-type]


@dataclass
class _Race:
    """The search's state: the evidence, in the candidates' order, and the time spent."""

    evidence: list[Evidence]
    config: SearchConfig
    staging: Staging
    spent_s: float = 0.0
    done_runs: int = 0
    last_round: int = 0  # the last round that measured something

    @classmethod
    def start(cls, candidates: Sequence[Candidate], config: SearchConfig,
              resume: Sequence[Evidence] | None) -> _Race:
        """Each candidate's resumed evidence (by key) or fresh, and the resumed mixed points."""
        if not candidates:
            raise UserError("no candidate to search: widen --suts, --batch-sizes or --settings")
        keys = [c.key for c in candidates]
        if len(set(keys)) != len(keys):
            raise UserError("the same candidate appears twice in the space: "
                            + next(k for k in keys if keys.count(k) > 1))
        saved = {item.candidate.key: item for item in resume or ()}
        evidence = [saved.get(c.key) or Evidence(c) for c in candidates]
        evidence += [e for k, e in saved.items() if e.candidate.keep_float and k not in keys]
        race = cls(evidence, config, Staging(evidence, config))
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
        """Not dropped: measured now, or held behind its SUT's base."""
        return [item for item in self.evidence if not item.dropped]

    def active(self) -> list[Evidence]:
        """Racing and not held: what the next runs measure."""
        return [item for item in self.racing() if not self.staging.held(item)]

    def needs_accuracy(self, item: Evidence) -> bool:
        """Its artifact's accuracy is due before its next run: from ``accuracy_round`` on
        while no racing candidate better by point meets the limits (it may become the
        leader), and from round ``min_runs`` on in any case (a contender, for the answer)."""
        if item.accuracy is not None:
            return False
        due = len(item.runs) + 1
        if due >= self.config.min_runs:
            return True
        return due >= self.config.accuracy_round and not self._met_ahead(item)

    def _met_ahead(self, item: Evidence) -> bool:
        """A racing candidate better by point than ``item`` meets every limit."""
        config = self.config
        own = judging.figure(item, config.objective, config)
        if own is None:
            return False
        for other in self.racing():
            found = judging.figure(other, config.objective, config)
            if other is not item and found is not None and other.accuracy is not None and \
                    judging.better(found.point, own.point, config.higher_is_better) and \
                    judging.meets(other, config):
                return True
        return False

    def run_estimate(self, item: Evidence) -> float:
        """The longest this candidate's run took so far, else the longest of any, else the
        configured seconds: the budget is checked against the slow case."""
        own = [run.seconds for run in item.runs if run.seconds > 0]
        every = [run.seconds for other in self.evidence for run in other.runs if run.seconds > 0]
        return max(own or every or [self.config.run_seconds + self.config.start_s])

    def accuracy_cost(self, measurer: Measurer, item: Evidence) -> float:
        """The expected seconds of ``item``'s accuracy: one run of each SUT the measurer says
        is due (the FP32 references with the first), each ``accuracy_run_estimate``."""
        if item.accuracy is not None:
            return 0.0
        return sum(self.accuracy_run_estimate(sut)
                   for sut in accuracy_suts_due(measurer, item.candidate))

    def accuracy_run_estimate(self, sut: str) -> float:
        """One accuracy run of ``sut``: the dataset (its size, as the runs recorded it) at
        the slowest rate ``sut``'s runs measured, plus their longest start; the configured
        guess for a SUT not measured (another SUT's slow outlier says nothing of it)."""
        config = self.config
        own = [run for item in self.evidence if item.candidate.sut == sut
               for run in item.runs if run.rate and run.samples]
        if not own:
            return config.accuracy_seconds
        samples = max(run.samples or 0 for run in own)
        start = max(run.seconds - config.run_seconds for run in own)
        return samples / min(run.rate for run in own) + max(start, config.start_s)

    def answer_reserve(self, measurer: Measurer) -> tuple[Evidence | None, float]:
        """The best active candidate by point, when its accuracy is not measured, and what
        measuring it costs: kept back from the runs, so the answer carries its accuracy."""
        config = self.config
        sign = -1.0 if config.higher_is_better else 1.0
        scored = [(sign * found.point, index, item) for index, item in enumerate(self.active())
                  if (found := judging.figure(item, config.objective, config)) is not None]
        if not scored:
            return None, 0.0
        best = min(scored, key=lambda entry: entry[:2])[2]
        return best, self.accuracy_cost(measurer, best)

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
    outcome = judging.verdict(race.evidence, config, out_of_budget)
    outcome.rounds, outcome.spent_s = race.last_round, race.spent_s
    outcome.notes = search_notes.notes(race, out_of_budget, outcome)
    return outcome


def _check_budget(race: _Race) -> None:
    """A fresh search must afford what it needs before it can decide anything: one run of
    each SUT's base candidate and, under an accuracy or size limit, the accuracy runs of
    the fastest few (round 2 measures them first). Less decides nothing: one line."""
    if race.spent_s > 0:
        return
    bases = race.active()
    accuracies = min(3, len(bases)) if race.config.accuracy_round == 2 else 0
    need = sum(race.run_estimate(item) for item in bases)
    need += accuracies * race.config.accuracy_seconds  # nothing measured: the guess
    if not race.affordable(need):
        extra = f" and the accuracy of the fastest {accuracies}" if accuracies else ""
        raise UserError(
            f"a budget of {race.config.budget_s / 60:.1f} min cannot measure the "
            f"{len(bases)} SUTs' base candidates once each{extra} (~{need / 60:.1f} min); "
            "raise --budget or narrow the space (--suts, --batch-sizes, --settings)")


def _rejudge(race: _Race) -> None:
    """Judges resumed evidence afresh under this search's limits (a rerun may change them):
    the drops of the interrupted search are replayed on everything it measured, and the
    variants still held behind their base are derived again."""
    for item in race.evidence:
        item.dropped, item.dropped_round = "", None
    _judge(race, max(len(item.runs) for item in race.evidence))


def _judge(race: _Race, round_: int) -> None:
    """Drops what can no longer win, then releases or drops the variants held behind
    their SUT's base."""
    leader = judging.judge(race.evidence, race.config, round_)
    nothing_else = not any(len(item.runs) < race.config.max_rounds for item in race.active())
    race.staging.update(race.evidence, leader, round_, nothing_else)


def _next(race: _Race, round_: int) -> Evidence | None:
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


def _run_round(race: _Race, measurer: Measurer, round_: int, on_progress: Progress | None,
               checkpoint: Checkpoint | None) -> str:
    """Measures each active candidate with fewer than ``round_`` runs once (its artifact's
    accuracy first when due), judging after each: "done", "settled", or "budget" when the
    budget stopped it."""
    _judge(race, round_)
    while (item := _next(race, round_)) is not None:
        if race.needs_accuracy(item):
            if not race.affordable(race.accuracy_cost(measurer, item)
                                   + race.run_estimate(item)):
                return _last_accuracy(race, measurer, round_)
            _measure_accuracy(race, measurer, item)
            _judge(race, round_)
            if item.dropped:
                continue
        best, reserve = race.answer_reserve(measurer)
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


def _last_accuracy(race: _Race, measurer: Measurer, round_: int) -> str:
    """The budget holds no more runs: the best candidate's accuracy, if not measured and
    still affordable (the answer shows it), then "budget"."""
    best, reserve = race.answer_reserve(measurer)
    if best is not None and best.accuracy is None and race.affordable(reserve):
        _measure_accuracy(race, measurer, best)
        _judge(race, round_)
    return "budget"


def _measure_accuracy(race: _Race, measurer: Measurer, item: Evidence) -> None:
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


def _report(race: _Race, on_progress: Progress, round_: int, item: Evidence) -> None:
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


def _settled(race: _Race) -> bool:
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
