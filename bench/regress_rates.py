"""How often does ``run.py regress`` cry wolf, and how often does it catch a real slowdown?

1. Simulated stores (``quantmark.store.regress_simulate``, seeded): ``--trials`` stores per
   row, each of 20 series on one machine, every job drawn from log(figure) = level + job effect
   (half of it shared by the job's series) + run noise. Null rows plant nothing: every call of
   a change is a false alarm. Planted rows slow the newest job of 4 series by 1.5x or 2x. The
   rows cover each noise estimate ``regress`` can use: a series' own 9 earlier jobs (on a
   machine with a between-job sd of 5%, 10% and 15%), 2 earlier jobs pooled over the machine
   (its series measured in jobs of their own), 2 earlier jobs that every series shares (the
   pool then knows the drift from 2 jobs only: the within-job fallback), 3 such jobs (each
   series' own spread, a t on 2 df), one earlier job (the
   default job run twice), and one earlier job on a machine that drifts by more than the
   fallback assumes (its false alarms are the assumption's price).
2. ``--store URL``: the stored results, replayed. Each series with 3+ clean jobs is judged at
   each of its jobs from the third on, against the jobs before it (alarms there may be real
   changes, so that rate is an upper bound on false alarms), and again with that job's figure
   slowed 1.5x and 2x (detection).

    python -m quantmark.bench.regress_rates [--trials 500] [--seed 0] [--fdr 0.05]
                                             [--store URL]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from typing import Any

from quantmark.ground import logs
from quantmark.store.points import Point
from quantmark.store.regress_noise import clean
from quantmark.store.regress_simulate import Rates, Scenario, measure
from quantmark.store.verdicts import IMPROVED, REGRESSED, by_series, regress

log = logging.getLogger("quantmark.bench.regress_rates")

ROWS = (("own history: 9 earlier jobs", Scenario(jobs=10)),
        ("quiet machine: 9 earlier jobs, between-job sd 0.05", Scenario(jobs=10,
                                                                      between_sd=0.05)),
        ("VM drift: 9 earlier jobs, between-job sd 0.15", Scenario(jobs=10, between_sd=0.15)),
        ("pooled over the machine: 2 earlier jobs, series in jobs of their own",
         Scenario(jobs=3, shared_jobs=False)),
        ("2 earlier jobs shared by all series (within-job fallback, measured floor)",
         Scenario(jobs=3)),
        ("3 earlier jobs shared by all series (own spread, 2 df)", Scenario(jobs=4)),
        ("the default job run twice: 4 series, 1 earlier job (within-job fallback)",
         Scenario(series=4, jobs=2)),
        ("beyond the fallback's assumption: 4 series, 1 earlier job, between-job sd 0.18, "
         "within 0.04", Scenario(series=4, jobs=2, between_sd=0.18, within_sd=0.04)))
PLANTED = (1.5, 2.0)
SLOWED = 4  # series slowed per store (all of them where a row has 4)


def _rate(hits: int, total: int) -> str:
    rate, low, high = Rates.rate(hits, total)
    return f"{100 * rate:.1f}% [{100 * low:.1f}, {100 * high:.1f}] ({hits}/{total})"


def simulated(trials: int, seed: int, fdr: float) -> list[dict[str, Any]]:
    """One row per scenario: the false-alarm rates on identical jobs and the detection rates
    of the planted slowdowns."""
    rows = []
    for name, scenario in ROWS:
        null = measure(scenario, trials, seed, fdr)
        row = {"scenario": name, "setup": scenario.describe(), "trials": trials,
               "false_alarms_per_series": _rate(null.false_alarms, null.untouched),
               "stores_with_any_false_alarm": _rate(null.trials_with_false_alarm, null.trials),
               "outcomes": dict(sorted(null.outcomes.items())),
               "noise_used": dict(sorted(null.noise.items()))}
        for factor in PLANTED:
            planted = measure(replace(scenario, slowdown=factor, slowed=SLOWED), trials,
                              seed + 1, fdr)
            row[f"detected_{factor:g}x"] = _rate(planted.detected, planted.slowed)
            row[f"false_alarms_beside_{factor:g}x"] = _rate(planted.false_alarms,
                                                            planted.untouched)
        log.info("%s: %s", name, row)
        rows.append(row)
    return rows


def _slowed(point: Point, factor: float) -> Point:
    """The job as if its SUT ran ``factor`` times slower."""
    scale = 1 / factor if point.series.higher_is_better else factor
    return replace(point, value=None if point.value is None else point.value * scale,
                   low=None if point.low is None else point.low * scale,
                   high=None if point.high is None else point.high * scale,
                   runs=tuple(r * scale for r in point.runs))


def replayed(url: str | None, fdr: float) -> dict[str, Any]:
    """The stored series judged job by job (see the module), untouched and slowed."""
    from quantmark.store.results_store import open_store

    with open_store(url) as store:
        points = store.points()
    counts = {"judged": 0, "alarms": 0, **{f"detected_{f:g}x": 0 for f in PLANTED}}
    for jobs in by_series(points).values():
        jobs = [p for p in jobs if clean(p)]
        for end in range(3, len(jobs) + 1):
            history, newest = jobs[:end - 1], jobs[end - 1]
            (verdict,) = regress(history + [newest], fdr=fdr)
            counts["judged"] += 1
            counts["alarms"] += verdict.outcome in (REGRESSED, IMPROVED)
            for factor in PLANTED:
                (slow,) = regress(history + [_slowed(newest, factor)], fdr=fdr)
                counts[f"detected_{factor:g}x"] += slow.outcome == REGRESSED
    judged = counts["judged"]
    return {"store": url or "the default store", "series": len(by_series(points)),
            "judged": judged, "alarms_untouched": _rate(counts["alarms"], judged),
            **{f"detected_{f:g}x": _rate(counts[f"detected_{f:g}x"], judged) for f in PLANTED}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.regress_rates")
    parser.add_argument("--trials", type=int, default=500, help="simulated stores per row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fdr", type=float, default=0.05)
    parser.add_argument("--store", metavar="URL", help="also replay this results store")
    args = parser.parse_args(argv)
    logs.setup()
    report: dict[str, Any] = {"fdr": args.fdr, "seed": args.seed,
                              "simulated": simulated(args.trials, args.seed, args.fdr)}
    if args.store is not None:
        report["stored"] = replayed(args.store or None, args.fdr)
    print(json.dumps(report, indent=1))  # noqa: T201 - the bench's report is its output
    return 0


if __name__ == "__main__":
    sys.exit(main())
