"""Seeded stores of known truth, to check ``regress``'s false-alarm and detection rates.

Each simulated series on one machine has ``jobs`` jobs of ``runs`` runs each, drawn from the
model ``regress`` assumes: log(figure) = level + job effect + run noise. A job's effect is
partly the machine's moment, shared by every series measured in that job (``shared``), and
partly the series' own; with ``shared_jobs`` False every series is measured in jobs of its
own (a machine whose series run on different days), and nothing is shared. A machine may also
drift (``drift_step``): a random walk of its level from job to job, shared by the job's series,
which the model ``regress`` assumes does not have. ``slowed`` series
get their newest job slowed by ``slowdown`` (a latency multiplied, a throughput divided), with
the thread setting changed as the planted cause. ``bench/regress_rates.py`` and the tests
both draw from here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_baseline import Baseline
from quantmark.store.verdicts import REGRESSED, regress

START = np.datetime64("2026-01-01T00:00:00")
BASE_ENVIRONMENT = {"machine.hostname": "sim", "machine.cpu_model": "Simulated CPU",
                    "software.onnxruntime": "1.20.0", "software.quantmark": "0.1.0",
                    "settings.threads": 2, "dataset.fingerprint": "d0"}


@dataclass(frozen=True)
class Scenario:
    """One simulated store: its shape, its noise (log sd) and what is planted."""

    series: int = 20
    jobs: int = 8  # per series, the newest included
    runs: int = 3  # per job
    between_sd: float = 0.10
    within_sd: float = 0.05
    shared: float = 0.5  # the share of the between-job variance common to a job's series
    shared_jobs: bool = True  # False: each series in jobs of its own (nothing shared)
    drift_step: float = 0.0  # sd of the machine's log level's step from one job to the next
    slowdown: float = 1.0
    slowed: int = 0  # how many series get the slowdown at their newest job

    def describe(self) -> str:
        planted = f", {self.slowed} slowed {self.slowdown:g}x" if self.slowed else ""
        jobs = "shared jobs" if self.shared_jobs else "jobs of their own"
        drift = f", drift step sd {self.drift_step:g}" if self.drift_step else ""
        return (f"{self.series} series x {self.jobs} {jobs} x {self.runs} runs, between-job sd "
                f"{self.between_sd:g}, within-job sd {self.within_sd:g}{drift}{planted}")


def _series_key(index: int) -> SeriesKey:
    latency = index % 2 == 0
    return SeriesKey(f"model{index // 2}", f"ort-sim{index}", "SingleStream" if latency
                     else "Offline", "latency_ms" if latency else "samples_per_s")


def _job_effects(scenario: Scenario, rng: np.random.Generator) -> np.ndarray:
    """Every job's effect on every series: a shared part per job and an own part."""
    share = scenario.shared if scenario.shared_jobs else 0.0
    shared = rng.normal(0, math.sqrt(share) * scenario.between_sd, scenario.jobs)
    own = rng.normal(0, math.sqrt(1 - share) * scenario.between_sd,
                     (scenario.series, scenario.jobs))
    walk = np.cumsum(rng.normal(0, scenario.drift_step, scenario.jobs)) \
        if scenario.drift_step else np.zeros(scenario.jobs)
    return shared[None, :] + own + walk[None, :]


def simulate(scenario: Scenario, rng: np.random.Generator) -> tuple[list[Point], set[SeriesKey]]:
    """A simulated store's points and the series whose newest job was slowed."""
    effects = _job_effects(scenario, rng)
    points, slowed = [], set()
    for s in range(scenario.series):
        key = _series_key(s)
        level = rng.uniform(math.log(2), math.log(500))
        planted = s < scenario.slowed
        if planted:
            slowed.add(key)
        for j in range(scenario.jobs):
            newest = j == scenario.jobs - 1
            shift = math.log(scenario.slowdown) if planted and newest else 0.0
            sign = -1.0 if key.higher_is_better else 1.0
            logs = level + effects[s, j] + sign * shift + \
                rng.normal(0, scenario.within_sd, scenario.runs)
            runs = tuple(float(v) for v in np.exp(logs))
            environment = dict(BASE_ENVIRONMENT)
            if planted and newest:
                environment["settings.threads"] = 1
            job = f"job{j}" if scenario.shared_jobs else f"job{j}-series{s}"
            points.append(job_point(key, job, j, runs, environment))
    return points, slowed


@functools.lru_cache(maxsize=64)
def _t975(df: int) -> float:
    return float(stats.t.ppf(0.975, df))


def job_point(key: SeriesKey, job_id: str, index: int, runs: tuple[float, ...],
              environment: dict | None = None, **fields: object) -> Point:
    """A job's point as the store gives it: the runs' median and their t interval (log)."""
    logs = np.log(runs)
    low = high = None
    if len(runs) > 1:
        half = _t975(len(runs) - 1) * logs.std(ddof=1) / math.sqrt(len(runs))
        low, high = float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))
    when = str(START + np.timedelta64(index, "D")) + "Z"
    return Point(key, job_id, when, float(np.median(runs)), low, high, runs,
                 environment=dict(environment or BASE_ENVIRONMENT), **fields)  # type: ignore


@dataclass
class Rates:
    """Counts over trials: false alarms on untouched series, detections of slowed ones."""

    trials: int = 0
    untouched: int = 0  # series-trials with nothing planted
    false_alarms: int = 0  # of those, called a change (either way)
    trials_with_false_alarm: int = 0
    slowed: int = 0
    detected: int = 0  # slowed series called "regressed"
    outcomes: dict[str, int] = field(default_factory=dict)
    noise: dict[str, int] = field(default_factory=dict)  # which estimate the verdicts used

    def add(self, verdicts: list, planted: set[SeriesKey]) -> None:
        self.trials += 1
        alarms = 0
        for verdict in verdicts:
            self.outcomes[verdict.outcome] = self.outcomes.get(verdict.outcome, 0) + 1
            source = verdict.noise.source if verdict.noise else "none"
            self.noise[source] = self.noise.get(source, 0) + 1
            if verdict.series in planted:
                self.slowed += 1
                self.detected += verdict.outcome == REGRESSED
            else:
                self.untouched += 1
                alarms += verdict.outcome in ("regressed", "improved")
        self.false_alarms += alarms
        self.trials_with_false_alarm += alarms > 0

    @staticmethod
    def rate(hits: int, total: int) -> tuple[float, float, float]:
        """The rate and its 95% Clopper-Pearson interval (nan without trials)."""
        if not total:
            return math.nan, math.nan, math.nan
        interval = stats.binomtest(hits, total).proportion_ci(0.95)
        return hits / total, float(interval.low), float(interval.high)


def measure(scenario: Scenario, trials: int, seed: int = 0, fdr: float = 0.05,
            baseline: Baseline | None = None, assume_drift: bool = False) -> Rates:
    """``regress`` over ``trials`` simulated stores of ``scenario`` (seeded)."""
    rng = np.random.default_rng(seed)
    rates = Rates()
    for _ in range(trials):
        points, planted = simulate(scenario, rng)
        rates.add(regress(points, baseline, fdr, assume_drift=assume_drift), planted)
    return rates
