"""Stand-in SUTs with planted speeds, accuracies and noise, where the right answer is known:
what the search (``quantmark.recommend.search``) is checked against. Pure Python, seeded.

Other tests may import them: ``StandInMeasurer`` is a ``Measurer``; ``planted_space`` draws a
space of 12-30 candidates (each with its own noise, when heteroscedastic); ``staged_space``
one where the optimum is a variant behind a SUT's base that is not the best base;
``truth_evidence`` turns the planted values into evidence of exact runs, whose
``brute_force`` optimum is the true one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from quantmark.recommend.candidates import AccuracyResult, Candidate, Evidence, Measurement

REFERENCE = "fp32-a"  # the planted reference FP32: its accuracy change is 0 exactly


@dataclass(frozen=True)
class PlantedSpeed:
    """A candidate's true figures: the medians its runs scatter around."""

    latency_ms: float
    samples_per_s: float
    memory_mb: float = 100.0


@dataclass(frozen=True)
class PlantedAccuracy:
    """An artifact's true accuracy change, and its measured change's standard error.
    ``observed``: the change this dataset gives it (every run of the artifact on the same
    images gives the same, as on a real machine); None: drawn at each accuracy run."""

    change_points: float
    sd: float = 0.4
    model_size_mb: float = 20.0
    observed: float | None = None


@dataclass
class Space:
    """A planted space: the candidates, their speeds (by key) and accuracies (by artifact)."""

    candidates: list[Candidate]
    speeds: dict[str, PlantedSpeed]
    accuracies: dict[str, PlantedAccuracy]
    #: each candidate's own log-normal run noise (by key); a candidate not in it has the
    #: measurer's ``noise``
    sigmas: dict[str, float] = field(default_factory=dict)


class StandInMeasurer:
    """A ``Measurer`` over a planted space: each run is the true figure times log-normal noise
    (its sigma: the space's for the candidate, else ``noise``), a disturbed run
    (``disturbed_rate``) ``slowdown`` times slower, an INVALID one (``invalid_rate``) flagged
    so; each takes ``seconds`` of the budget. An accuracy run draws its change around the truth
    with its standard error, and reports the normal 95% interval. ``runs`` and
    ``accuracy_calls`` count what was measured.
    """

    def __init__(self, space: Space, seed: int, noise: float = 0.05, invalid_rate: float = 0.03,
                 disturbed_rate: float = 0.05, slowdown: float = 1.5, seconds: float = 10.0,
                 accuracy_seconds: float = 30.0) -> None:
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.noise, self.invalid_rate = noise, invalid_rate
        self.disturbed_rate, self.slowdown = disturbed_rate, slowdown
        self.seconds, self.accuracy_seconds = seconds, accuracy_seconds
        self.runs: Counter[str] = Counter()
        self.accuracy_calls: Counter[str] = Counter()
        self.spent_s = 0.0

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        truth = self.space.speeds[candidate.key]
        factor = float(self.rng.lognormal(0.0, self.space.sigmas.get(candidate.key,
                                                                      self.noise)))
        disturbed = bool(self.rng.random() < self.disturbed_rate)
        if disturbed:
            factor *= self.slowdown
        valid = bool(self.rng.random() >= self.invalid_rate)
        self.runs[candidate.key] += 1
        self.spent_s += self.seconds
        return Measurement(latency_ms=truth.latency_ms * factor,
                           samples_per_s=truth.samples_per_s / factor, valid=valid,
                           disturbed=disturbed,
                           memory_mb=truth.memory_mb * float(self.rng.lognormal(0.0, 0.01)),
                           seconds=self.seconds, why="" if valid else "planted INVALID run")

    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        truth = self.space.accuracies[candidate.artifact]
        change = truth.observed
        if change is None:
            change = truth.change_points + (float(self.rng.normal(0.0, truth.sd)) if truth.sd
                                            else 0.0)
        half = 1.96 * truth.sd
        self.accuracy_calls[candidate.artifact] += 1
        self.spent_s += self.accuracy_seconds
        return AccuracyResult(top1=76.0 + change, change_points=change, low=change - half,
                              high=change + half, reference=REFERENCE,
                              model_size_mb=truth.model_size_mb, seconds=self.accuracy_seconds)


def planted_space(rng: np.random.Generator, size: int | None = None,
                  heteroscedastic: bool = False) -> Space:
    """12-30 candidates: four SUTs (two FP32, two INT8 whose accuracy drop may be near a
    1-point limit) x batch sizes x threads, with speeds drawn around a structure (INT8
    faster, batches raise throughput and latency, threads help unevenly), and each
    artifact's change as this dataset measures it (its truth plus one draw of its error).
    ``heteroscedastic``: each candidate its own run noise, drawn in [0.02, 0.10] (drawn
    last: the rest of the space is the same either way)."""
    suts = {"fp32-a": (PlantedAccuracy(0.0, 0.0, 100.0), 1.0),
            "fp32-b": (PlantedAccuracy(float(rng.uniform(-0.3, 0.3)), 0.3, 100.0), 1.1),
            "int8-a": (PlantedAccuracy(float(rng.uniform(-1.8, -0.2)), 0.4, 26.0), 0.55),
            "int8-b": (PlantedAccuracy(float(rng.uniform(-2.5, -0.5)), 0.4, 26.0), 0.45)}
    grid = [Candidate(sut, batch, threads) for sut in suts for batch in (1, 2, 4, 8)
            for threads in (1, 2)]
    size = size or int(rng.integers(12, 31))
    chosen = sorted(rng.choice(len(grid), size=min(size, len(grid)), replace=False))
    candidates = [grid[i] for i in chosen]
    base = float(rng.uniform(8.0, 14.0))
    speeds = {}
    for c in candidates:
        latency = (base * suts[c.sut][1] * c.batch_size ** 0.85 * (1.0 if c.threads == 2 else 1.6)
                   * float(rng.uniform(0.85, 1.15)))
        speeds[c.key] = PlantedSpeed(latency_ms=latency,
                                     samples_per_s=1000.0 * c.batch_size / latency,
                                     memory_mb=80.0 * suts[c.sut][0].model_size_mb / 100.0
                                     + 12.0 * c.batch_size * c.threads)
    # the dataset's draw of each change, the same for the search and the sweep
    accuracies = {sut: replace(acc, observed=acc.change_points
                               + float(rng.normal(0.0, acc.sd)) if acc.sd else 0.0)
                  for sut, (acc, _) in suts.items()}
    sigmas = ({c.key: float(rng.uniform(0.02, 0.10)) for c in candidates} if heteroscedastic
              else {})
    return Space(candidates, speeds, accuracies, sigmas)


#: the staged space's batches and thread counts: batch 8, the first thread count, is the base
STAGED_BATCHES, STAGED_THREADS = (8, 1, 32), (0, 2)


def staged_space(rng: np.random.Generator) -> tuple[Space, Candidate]:
    """Six SUTs x batches 8, 1, 32 x threads 0, 2 (36 candidates, throughput; each its own
    noise in [0.02, 0.10]), and the optimum: a variant of the SUT ``hidden``, whose base (b8
    t0) is 0.68-0.8 of the best base's throughput while one of its variants is 1.3-1.36 of
    it (at most x2 its own base); every other SUT's settings move it by at most 1.1 (the
    far ones' by 1.6), and three SUTs lie far
    behind (0.15-0.3 of the best base), where staging drops their variants unmeasured."""
    bases = {"lead": 1.0, "near": float(rng.uniform(0.8, 0.95)),
             "hidden": float(rng.uniform(0.68, 0.8))}
    target = float(rng.uniform(1.3, 1.36))  # the hidden variant, of the best base
    bases.update({f"far{i}": float(rng.uniform(0.15, 0.3)) for i in range(3)})
    top = float(rng.uniform(200.0, 400.0))
    best_variant = (int(rng.choice(STAGED_BATCHES[1:])), int(rng.choice(STAGED_THREADS)))
    candidates, speeds = [], {}
    for sut, share in bases.items():
        for batch in STAGED_BATCHES:
            for threads in STAGED_THREADS:
                c = Candidate(sut, batch, threads)
                if (batch, threads) == (8, 0):
                    factor = 1.0
                elif sut == "hidden" and (batch, threads) == best_variant:
                    factor = target / share  # at most x2: what staging assumes
                elif sut.startswith("far"):
                    factor = float(rng.uniform(0.9, 1.6))  # within the x2 staging assumes
                else:
                    factor = float(rng.uniform(0.6, 1.1))
                throughput = top * share * factor
                candidates.append(c)
                speeds[c.key] = PlantedSpeed(1000.0 * batch / throughput, throughput)
    accuracies = {sut: PlantedAccuracy(0.0, 0.0, 50.0, observed=0.0) for sut in bases}
    sigmas = {c.key: float(rng.uniform(0.02, 0.10)) for c in candidates}
    hidden = Candidate("hidden", *best_variant)
    return Space(candidates, speeds, accuracies, sigmas), hidden


def truth_evidence(space: Space) -> list[Evidence]:
    """The planted values as evidence: three exact, VALID, quiet runs each (a zero-width
    interval) and the true accuracy change with a zero-width interval."""
    evidence = []
    for c in space.candidates:
        speed, acc = space.speeds[c.key], space.accuracies[c.artifact]
        run = Measurement(speed.latency_ms, speed.samples_per_s, True, False, speed.memory_mb)
        accuracy = AccuracyResult(76.0 + acc.change_points, acc.change_points, acc.change_points,
                                  acc.change_points, REFERENCE, acc.model_size_mb)
        evidence.append(Evidence(c, [run, run, run], accuracy))
    return evidence


def quiet(value: float, samples_per_s: float | None = None, **kwargs: object) -> Measurement:
    """A VALID, undisturbed run of latency ``value`` (throughput 1000/value unless given)."""
    fields = {"valid": True, "disturbed": False, "seconds": 10.0, **kwargs}
    return Measurement(latency_ms=value, samples_per_s=samples_per_s or 1000.0 / value,
                       **fields)  # type: ignore[arg-type]


def accuracy_of(change: float, half: float = 0.3, size: float = 20.0) -> AccuracyResult:
    """An accuracy result of ``change`` points with the interval ``change +- half``."""
    return AccuracyResult(76.0 + change, change, change - half, change + half, REFERENCE, size,
                          seconds=30.0)


class ScriptedMeasurer:
    """A ``Measurer`` that returns each candidate's scripted runs in turn (the last one
    repeated once the script ends) and each artifact's scripted accuracy; ``order`` records
    the candidates in the order they were run."""

    def __init__(self, runs: dict[str, list[Measurement]],
                 accuracy: dict[str, AccuracyResult]) -> None:
        self.script = {key: list(values) for key, values in runs.items()}
        self.accuracy_results = accuracy
        self.order: list[str] = []
        self.accuracy_calls: Counter[str] = Counter()

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        script = self.script[candidate.key]
        self.order.append(candidate.key)
        return script.pop(0) if len(script) > 1 else script[0]

    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        self.accuracy_calls[candidate.artifact] += 1
        return self.accuracy_results[candidate.artifact]
