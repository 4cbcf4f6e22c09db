"""The state of ``run.py recommend``'s race (``search``): every candidate's evidence in the
space's order, the time spent, and the questions the rounds ask of it (what is still racing,
what a run or an accuracy measurement is expected to cost, whether it is affordable).

Apart from ``search``, which runs the rounds, so the notes of its answer (``search_notes``)
read the race without importing the module that writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quantmark.ground.errors import UserError
from quantmark.recommend import judging
from quantmark.recommend.candidates import (
    AccuracyResult,
    Candidate,
    Evidence,
    Measurer,
    SearchConfig,
    accuracy_suts_due,
)
from quantmark.recommend.staging import Staging


@dataclass
class Race:
    """The search's state: the evidence, in the candidates' order, and the time spent."""

    evidence: list[Evidence]
    config: SearchConfig
    staging: Staging
    spent_s: float = 0.0
    done_runs: int = 0
    last_round: int = 0  # the last round that measured something

    @classmethod
    def start(cls, candidates: Sequence[Candidate], config: SearchConfig,
              resume: Sequence[Evidence] | None) -> Race:
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
