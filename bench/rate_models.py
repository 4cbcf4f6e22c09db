"""The seeded simulations behind ``bench/rate_claims``: each draws data from a noise model,
runs quantmark's own statistics on it and counts how often a stated rate's event happened.

Every function returns (hits, trials). Noise models of one run's log figure (5% scale):
``house`` log-normal (the model the house's tests use), ``t3`` Student t with 3 degrees of
freedom (heavy tails), ``slow`` log-normal with one run in ten 40% slower and not flagged
(skewed), ``heavy`` both: t(3) with one run in ten 40% slower. A figure's truth is the median
of its run distribution.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
from rich.console import Console
from scipy import optimize, stats

from quantmark.ground.config import RunConfig
from quantmark.recommend.candidates import Candidate, Evidence, Measurement
from quantmark.recommend.pooling import pool, pooled_interval
from quantmark.report.agreement_interval import agreement_interval
from quantmark.report.drift import trend
from quantmark.report.loadgen_log import RunSummary
from quantmark.report.stats import accuracy_change, figure_interval, speedup
from quantmark.run import default_job as job
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import RepeatSet

SCALE = 0.05
SLOW = math.log(1.4)
MODELS = ("house", "t3", "slow")


def noise(rng: np.random.Generator, model: str, shape: int | tuple[int, ...],
          scale: float = SCALE) -> np.ndarray:
    """Run-to-run noise of log(figure) under ``model``."""
    if model in ("t3", "heavy"):
        found = scale * rng.standard_t(3, shape) / math.sqrt(3)
    else:
        found = rng.normal(0, scale, shape)
    return found - SLOW * (rng.random(shape) < 0.1) if model in ("slow", "heavy") else found


def true_median(model: str, scale: float = SCALE) -> float:
    """The median of ``noise`` (0 but for the slow-run mixture)."""
    if model != "slow":
        return 0.0
    return float(optimize.brentq(lambda m: 0.9 * stats.norm.cdf(m / scale) + 0.1 * stats.norm.cdf(
        (m + SLOW) / scale) - 0.5, -1, 1))


def figure_coverage(rng: np.random.Generator, trials: int, model: str, n: int) -> tuple[int, int]:
    """Figure intervals of ``n`` runs holding the true median."""
    truth = 100 * math.exp(true_median(model))
    hits = 0
    for _ in range(trials):
        found = figure_interval(100 * np.exp(noise(rng, model, n)))
        hits += found.low <= truth <= found.high
    return hits, trials


def paired_false(rng: np.random.Generator, trials: int, model: str, n: int) -> tuple[int, int]:
    """A SUT against itself, ``n`` interleaved pairs on a machine drifting 10% per repeat:
    speedups called faster or slower."""
    wrong = 0
    for _ in range(trials):
        drift = rng.normal(0, 0.10, n)
        a, b = (40 * np.exp(drift + noise(rng, model, n)) for _ in range(2))
        wrong += speedup(a, b, higher_is_better=True, paired=True).significant
    return wrong, trials


def _launch(config: RunConfig, value: float) -> LaunchResult:
    """A VALID quick run of ``value`` as the default job reads it."""
    summary = RunSummary(scenario=config.scenario, mode="PerformanceOnly", validity="VALID",
                         metric_name="m", metric_key="k", metric_value=value,
                         metric_unit="ns" if config.scenario == "SingleStream" else "samples/s",
                         min_latency_ns=1, mean_latency_ns=2.0, max_latency_ns=3,
                         query_count=500, percentiles_ns={}, unmet_checks=[])
    return LaunchResult("ok", None, {
        "config": {"sut": config.sut}, "summary": summary.to_dict(),
        "repeat": {"index": config.repeat, "of": config.repeats, "set": config.repeat_set}})


def default_job_false(rng: np.random.Generator, trials: int, model: str,
                      level: float | None = None) -> tuple[int, int]:
    """Default jobs (both scenarios, the two-stage plan: ``job.run_stages``) calling an INT8
    exactly as fast as FP32 faster or slower anywhere; ``level`` overrides the per-look level
    (97.5%: the plan before the correction across scenarios)."""
    base = RunConfig(scenario="Offline", sut=job.BASELINE, model="m", output="/nonexistent")
    configs = [replace(base, sut=s, scenario=c) for c in job.SCENARIOS for s in job.SUTS]
    console, wrong = Console(file=io.StringIO()), 0
    kept = job.look_confidence
    if level is not None:
        job.look_confidence = lambda first: level  # type: ignore[assignment]
    try:
        for _ in range(trials):
            drift = rng.normal(0, 0.10, (len(job.SCENARIOS), 7))
            scale = 2 * SCALE if model != "house" else SCALE
            logs = {(c.sut, c.scenario): drift[job.SCENARIOS.index(c.scenario)]
                    + noise(rng, model, 7, scale) for c in configs}
            rows = {(c.sut, c.scenario): job.Row(c.sut, c.scenario, RepeatSet(c))
                    for c in configs}

            def run_one(config: RunConfig, logs: dict = logs) -> LaunchResult:
                return _launch(config, 100 * math.exp(logs[(config.sut, config.scenario)][
                    config.repeat - 1]))
            job.run_stages(rows, configs, run_one, job.REPEATS, console)
            wrong += any(r.speedup is not None and r.speedup.significant for r in rows.values())
    finally:
        job.look_confidence = kept  # type: ignore[assignment]
    return wrong, trials


def drift_coverage(rng: np.random.Generator, trials: int, n: int, of: str) -> tuple[int, int]:
    """A slow drift: the machine's level wanders from day to day (sd 4% of log) and moves 1%
    a run during the set, runs with 2% noise. How often the set's interval holds the level of
    its own window (``of="window"``: the level at the set's middle) or the long-run one."""
    hits = 0
    for _ in range(trials):
        window = rng.normal(0, 0.04)
        logs = window + 0.01 * (np.arange(n) - (n - 1) / 2) + rng.normal(0, 0.02, n)
        found = figure_interval(100 * np.exp(logs))
        truth = 100 * math.exp(window if of == "window" else 0.0)
        hits += found.low <= truth <= found.high
    return hits, trials


def trend_flags(rng: np.random.Generator, trials: int, model: str, n: int,
                step: float) -> tuple[int, int]:
    """Two interleaved sets of ``n`` runs each (a comparison) on a machine moving ``step`` of
    log per run: how often ``report.drift`` says they drift."""
    flagged = 0
    for _ in range(trials):
        level = step * np.arange(2 * n)
        runs = level + noise(rng, model, 2 * n)
        found = trend(runs[0::2], runs[1::2] + 0.3)
        flagged += found is not None and found.drifting
    return flagged, trials


def _photos(rng: np.random.Generator, photos: int, effect: str, crops: int = 1536,
            pair: bool = False) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """One set: ``crops`` crops of ``photos`` photos, each with its own accuracy and its own
    change (mean 0 over photos: nothing changed on average), ``effect`` "normal" (sd 5
    points), "exp" (5 * (1 - Exp(1)): a few photos lose much) or "lognormal" (heavier).
    ``pair``: the last two photos are one scene (a stereo pair: the same accuracy and change),
    labelled as two sources."""
    if effect == "normal":
        shift = rng.normal(0, 0.05, photos)
    elif effect == "exp":
        shift = 0.05 * (1 - rng.exponential(1, photos))
    else:
        z = rng.lognormal(0, 1, photos)
        shift = 0.05 * (math.exp(0.5) - z) / math.sqrt((math.e - 1) * math.e)
    accuracy = rng.uniform(0.4, 0.8, photos)
    if pair:
        accuracy[-1], shift[-1] = accuracy[-2], shift[-2]
    photo = np.arange(crops) % photos
    draw = rng.uniform(size=crops)
    shifted = np.clip(accuracy + shift, 0.02, 0.98)
    return draw < accuracy[photo], draw < shifted[photo], [f"p{p}" for p in photo]


def cluster_false(rng: np.random.Generator, trials: int, photos: int, effect: str,
                  pair: bool = False, before: bool = False) -> tuple[int, int]:
    """Accuracy verdicts ("better"/"worse") of no change on average, grouped by photo;
    ``before``: the verdict of the interval alone, as it was given before too few photos
    said "cannot tell"."""
    wrong = 0
    for _ in range(trials):
        found = accuracy_change(*_photos(rng, photos, effect, pair=pair))
        wrong += (found.low > 0 or found.high < 0) if before else found.significant
    return wrong, trials


def cluster_coverage(rng: np.random.Generator, trials: int, photos: int, effect: str,
                     pair: bool = False) -> tuple[int, int]:
    """The clustered interval holding 0, the true mean change (clipping aside: |shift| stays
    within the accuracies' room in all but the lognormal's rare extremes)."""
    hits = 0
    for _ in range(trials):
        found = accuracy_change(*_photos(rng, photos, effect, pair=pair))
        hits += found.low <= 0 <= found.high
    return hits, trials


def mcnemar_lines(rng: np.random.Generator, trials: int, n: int,
                  changed: float) -> tuple[int, int, int]:
    """Independent samples, no change: (false verdicts, lines whose p and verdict disagree,
    trials)."""
    only_base = rng.binomial(n, changed / 2, trials)
    only_cand = rng.binomial(n - only_base, (changed / 2) / (1 - changed / 2))
    wrong = incoherent = 0
    for b, c in zip(only_base, only_cand, strict=True):
        base, cand = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        base[:b], cand[b:b + c] = True, True
        found = accuracy_change(base, cand)
        wrong += found.significant
        incoherent += (found.p_value < 0.05) != found.significant
    return wrong, incoherent, trials


def pooled_coverage(rng: np.random.Generator, trials: int, kind: str) -> tuple[int, int]:
    """recommend's one-run interval on the pooled spread (ten candidates of two quiet runs,
    then a new candidate's first run) holding the new candidate's true median. ``kind``:
    "house" (every candidate 6% log-normal), "noisiest third" (candidates' spreads 3, 6 and
    12% in thirds; the new one at 12%) or "slow" (6%, one run in ten 40% slower, unflagged)."""
    hits = 0
    for _ in range(trials):
        sds = np.tile([0.03, 0.06, 0.12], 4)[:10] if kind == "noisiest third" else \
            np.full(10, 0.06)
        draw = "slow" if kind == "slow" else "house"
        evidence = [Evidence(Candidate(f"s{i}"), [
            _quiet(math.exp(c + v)) for v in noise(rng, draw, 2, float(sd))])
            for i, (c, sd) in enumerate(zip(rng.uniform(1, 4, 10), sds, strict=True))]
        found = pool(evidence, "latency_ms")
        centre, sd = float(rng.uniform(1, 4)), 0.12 if kind == "noisiest third" else 0.06
        one = pooled_interval([math.exp(centre + noise(rng, draw, 1, sd)[0])], found, 0.95)
        truth = math.exp(centre + true_median(draw, sd))
        hits += one.low <= truth <= one.high
    return hits, trials


def agreement_coverage(rng: np.random.Generator, trials: int, photos: int, crops: int,
                       truth: float, spread: float, grouped: bool = True) -> tuple[int, int]:
    """Trials whose agreement interval holds ``truth``: each photo agrees at its own rate
    (Beta with mean ``truth`` and concentration ``spread``), its crops by coin flips at it;
    ``grouped``: the crops' photos given, as a run with val_groups.txt gives them."""
    index = np.repeat(np.arange(photos), crops)
    hits = 0
    for _ in range(trials):
        rates = rng.beta(truth * spread, (1 - truth) * spread, photos)
        same = (rng.random((photos, crops)) < rates[:, None]).ravel()
        found = agreement_interval(same, index if grouped and crops > 1 else None)
        hits += found.low is not None and found.low <= 100 * truth <= found.high
    return hits, trials


def _quiet(latency_ms: float) -> Measurement:
    return Measurement(latency_ms=latency_ms, samples_per_s=1000 / latency_ms, valid=True,
                       disturbed=False, seconds=10.0)
