"""Does every rate quantmark states hold? Each claim measured by seeded simulation, under the
house's noise model and heavier ones, printed as one markdown table.

Rows (``bench/rate_models`` draws the data, quantmark's own code judges it):

* a. the default job: an INT8 as fast as FP32 is called faster or slower in at most 5% of
  jobs (both scenarios, the two-stage plan), and the plan before the correction for reference;
* b. a figure's 95% interval holds the true median, 3-30 runs; a SUT against itself over
  paired runs is called different in at most 5%;
* c. under a slow drift the interval holds its own window's figure (not the long-run one:
  reported, not claimed); the drift flag's false rate on runs that do not drift, and how often
  it sees a drift;
* d. grouped accuracy: no verdict of no change on average from the built-in set's 6 sources
  (and before: 7 with a stereo pair counted twice, or 6 judged by the cluster t), at most 5%
  from 50 photos whose effects are symmetric (skewed ones reported: no method holds there at
  any practical number of photos); the clustered interval's coverage;
* e. the accuracy line: p and verdict from one test, at most 5% false verdicts;
* f. recommend's one-run pooled interval: 95% when a candidate's runs spread like the pool's
  (the heavier cases are reported: the documented limit);
* g. ``regress`` with one or two earlier jobs: at most 5% of stores with a false alarm under
  drift 2-5x the runs' spread, and a 3x change still caught;
* h. top-1 agreement with FP32: its interval holds the true agreement 95% of the time on
  independent images and on crops of 50+ photos that differ moderately (skewed photo effects,
  and crops read as independent images, reported).

    python -m quantmark.bench.rate_claims [--trials 2000] [--seed 0]

``--trials`` is per row (the slow rows, the default job and regress, take a fifth of it).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from quantmark.bench import rate_models as m
from quantmark.ground import logs
from quantmark.store.regress_simulate import Scenario, measure

log = logging.getLogger("quantmark.bench.rate_claims")


@dataclass(frozen=True)
class Claim:
    """One row: what is claimed, under which noise, and how its event is counted."""

    claim: str
    model: str
    bound: str  # ">= 0.95", "<= 0.05", or "reported" (no rate is claimed)
    count: Callable[[np.random.Generator, int], tuple[int, int]]
    share: float = 1.0  # of --trials (the slow simulations run fewer)


def _claims() -> list[Claim]:
    rows = []
    for model, name in (("house", "house: drift 10%/repeat + 5% log-normal"),
                        ("heavy", "heavy: drift 10%/repeat + t(3) 10% + 1 run in 10 40% "
                                  "slow")):
        rows.append(Claim("a. default job: false faster/slower per job <= 5%", name, "<= 0.05",
                          lambda g, t, model=model: m.default_job_false(g, t, model), 0.2))
    rows.append(Claim("a. (before: 97.5% per look, no correction across scenarios)",
                      "house: drift 10%/repeat + 5% log-normal", "reported",
                      lambda g, t: m.default_job_false(g, t, "house", 0.975), 0.2))
    for model in m.MODELS:
        for n in (3, 5, 7, 10, 15, 30):
            rows.append(Claim(f"b. figure interval holds the median, {n} runs", model,
                              ">= 0.95", lambda g, t, model=model, n=n:
                              m.figure_coverage(g, t, model, n)))
        for n in (3, 10, 20):
            rows.append(Claim(f"b. A vs A paired, {n} pairs: false verdicts <= 5%",
                              f"{model} + 10% drift/pair", "<= 0.05",
                              lambda g, t, model=model, n=n: m.paired_false(g, t, model, n)))
    return rows + _later_claims()


def _later_claims() -> list[Claim]:
    drift = "window 4% day-to-day, 1%/run in the set, 2% noise"
    rows = [Claim("c. 10 runs under slow drift: interval holds its window's figure", drift,
                  ">= 0.95", lambda g, t: m.drift_coverage(g, t, 10, "window")),
            Claim("c. 10 runs under slow drift: interval holds the long-run figure", drift,
                  "reported", lambda g, t: m.drift_coverage(g, t, 10, "long-run"))]
    for model in m.MODELS:
        rows.append(Claim("c. drift flag on 7+7 runs that do not drift <= 5%", model,
                          "<= 0.05", lambda g, t, model=model: m.trend_flags(g, t, model, 7, 0)))
    rows.append(Claim("c. drift flag sees 1%/run over 7+7 runs", "house", "reported",
                      lambda g, t: m.trend_flags(g, t, "house", 7, 0.01)))
    for effect in ("normal", "exp", "lognormal"):
        claimed = effect == "normal"  # skewed photo effects: what it does is reported
        rows += [Claim("d. built-in set (6 sources): false better/worse <= 5%", effect,
                       "<= 0.05", lambda g, t, e=effect: m.cluster_false(g, t, 6, e)),
                 Claim("d. (before: stereo pair as 2 of 7 sources) false better/worse", effect,
                       "reported", lambda g, t, e=effect: m.cluster_false(g, t, 7, e, True,
                                                                          True)),
                 Claim("d. (before: 6 sources, the cluster t's verdict) false better/worse",
                       effect, "reported",
                       lambda g, t, e=effect: m.cluster_false(g, t, 6, e, before=True)),
                 Claim("d. 6 sources: clustered interval holds the change (no verdict)",
                       effect, "reported", lambda g, t, e=effect: m.cluster_coverage(g, t, 6, e)),
                 Claim("d. 50 photos: false better/worse" + (" <= 5%" if claimed else ""),
                       effect, "<= 0.05" if claimed else "reported",
                       lambda g, t, e=effect: m.cluster_false(g, t, 50, e), 0.5),
                 Claim("d. 50 photos: clustered interval holds the change", effect,
                       ">= 0.95" if claimed else "reported",
                       lambda g, t, e=effect: m.cluster_coverage(g, t, 50, e), 0.5)]
    for n, changed in ((20, 0.4), (200, 0.15), (1536, 0.02), (1536, 0.4)):
        model = f"{n} samples, {changed:.0%} discordant"
        rows += [Claim("e. accuracy line: false better/worse <= 5%", model, "<= 0.05",
                       lambda g, t, n=n, c=changed: m.mcnemar_lines(g, t, n, c)[::2]),
                 Claim("e. accuracy line: p and verdict disagree (0 allowed)", model, "<= 0",
                       lambda g, t, n=n, c=changed: m.mcnemar_lines(g, t, n, c)[1:])]
    for kind, bound in (("house", ">= 0.95"), ("noisiest third", "reported"),
                        ("slow", "reported")):
        rows.append(Claim("f. recommend: one-run pooled interval holds the median", kind,
                          bound, lambda g, t, k=kind: m.pooled_coverage(g, t, k)))
    return rows + _regress_claims()


def _regress_claims() -> list[Claim]:
    few = (("1 earlier job, between-job 2x within", Scenario(series=4, jobs=2, between_sd=0.1)),
           ("2 earlier jobs, between-job 2x within", Scenario(series=4, jobs=3, between_sd=0.1)),
           ("1 earlier job, random walk 2x within", Scenario(series=4, jobs=2, between_sd=0.0,
                                                             drift_step=0.1)),
           ("2 earlier jobs, random walk 2x within", Scenario(series=4, jobs=3, between_sd=0.0,
                                                              drift_step=0.1)),
           ("1 earlier job, quiet runs (5x)", Scenario(series=4, jobs=2, between_sd=0.05,
                                                       within_sd=0.01)),
           ("1 earlier job, between-job 4.5x within", Scenario(series=4, jobs=2,
                                                               between_sd=0.18,
                                                               within_sd=0.04)))
    rows = []
    for name, scenario in few:
        rows.append(Claim("g. regress: stores with a false alarm <= 5%", name, "<= 0.05",
                          lambda g, t, s=scenario: _stores(g, t, s), 0.2))
        rows.append(Claim("g. (before: --assume-drift, the 3x assumption)", name, "reported",
                          lambda g, t, s=scenario: _stores(g, t, s, True), 0.2))
    slowed = Scenario(series=4, jobs=2, between_sd=0.1, slowdown=3.0, slowed=4)
    rows.append(Claim("g. regress: a 3x slowdown with 1 earlier job is caught", "between 2x",
                      "reported", lambda g, t: _caught(g, t, slowed), 0.2))
    return rows + _agreement_claims()


def _agreement_claims() -> list[Claim]:
    """h. top-1 agreement with FP32: Wilson on independent images, on the design effect's
    effective size over 50+ source photos (1536 crops, as the built-in set has)."""
    rows = [Claim("h. agreement interval holds the agreement", f"300 images, {truth:.0%} agree",
                  ">= 0.95", lambda g, t, p=truth: m.agreement_coverage(g, t, 300, 1, p, 1e6))
            for truth in (0.8, 0.95, 0.99)]
    for photos, truth, spread, claimed in ((50, 0.95, 50.0, True), (200, 0.95, 50.0, True),
                                           (200, 0.99, 50.0, True), (50, 0.99, 5.0, False),
                                           (200, 0.99, 5.0, False)):
        kind = "moderate" if spread > 10 else "skewed"
        rows.append(Claim("h. agreement interval holds the agreement",
                          f"{photos} photos x {1536 // photos} crops, {truth:.0%}, {kind} "
                          "photo effects", ">= 0.95" if claimed else "reported",
                          lambda g, t, n=photos, p=truth, c=spread:
                          m.agreement_coverage(g, t, n, 1536 // n, p, c), 0.5))
    rows.append(Claim("h. (crops read as independent images)", "50 photos x 30 crops, 95%, "
                      "Beta spread 10", "reported",
                      lambda g, t: m.agreement_coverage(g, t, 50, 30, 0.95, 10.0, False), 0.5))
    return rows


def _stores(rng: np.random.Generator, trials: int, scenario: Scenario,
            assume: bool = False) -> tuple[int, int]:
    found = measure(scenario, trials, int(rng.integers(2 ** 31)), assume_drift=assume)
    return found.trials_with_false_alarm, found.trials


def _caught(rng: np.random.Generator, trials: int, scenario: Scenario) -> tuple[int, int]:
    found = measure(scenario, trials, int(rng.integers(2 ** 31)))
    return found.detected, found.slowed


def _judge(bound: str, hits: int, total: int) -> tuple[str, str]:
    """The rate with its Clopper-Pearson 95% interval, and whether the claim holds within
    simulation error (the interval reaches the bound)."""
    ci = stats.binomtest(hits, total).proportion_ci(0.95)
    text = f"{100 * hits / total:.1f}% [{100 * ci.low:.1f}, {100 * ci.high:.1f}] ({hits}/{total})"
    if bound == "reported":
        return text, "reported"
    op, value = bound.split()
    holds = ci.high >= float(value) if op == ">=" else ci.low <= float(value)
    if op == "<=" and float(value) == 0:
        holds = hits == 0
    return text, "yes" if holds else "NO"


def table(trials: int, seed: int, only: str = "") -> list[str]:
    """The markdown table, one row per claim (``only``: rows whose claim starts with it)."""
    lines = ["| claim | noise model | trials | measured [95% CI] | holds? |",
             "|---|---|---|---|---|"]
    for index, claim in enumerate(_claims()):
        if only and not claim.claim.startswith(only):
            continue
        started = time.monotonic()
        rng = np.random.default_rng([seed, index])
        hits, total = claim.count(rng, max(int(trials * claim.share), 20))
        text, holds = _judge(claim.bound, hits, total)
        lines.append(f"| {claim.claim} | {claim.model} | {total} | {text} | {holds} |")
        log.info("%s (%.0f s)", lines[-1], time.monotonic() - started)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.rate_claims")
    parser.add_argument("--trials", type=int, default=2000, help="simulations per row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="rows whose claim starts with this (a.)")
    args = parser.parse_args(argv)
    if args.trials < 20:
        parser.error("--trials: at least 20")
    logs.setup()
    print("\n".join(table(args.trials, args.seed, args.only)))  # noqa: T201 - the report
    return 0


if __name__ == "__main__":
    sys.exit(main())
