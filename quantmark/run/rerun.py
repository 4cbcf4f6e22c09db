"""A quick run that came out INVALID because the machine changed speed: run once more at the
rate it met.

quantmark sizes a quick run by a one-second warm-up in the test's own process: LoadGen
generates queries for the minimum duration at the expected rate. When the machine then runs
faster (the warm-up met other work that has since stopped, a CPU that clocked up), the queries
run out before the minimum duration: "min duration not met", and LoadGen advises raising the
expected QPS, which is quantmark's to act on, not the user's. The launcher reruns such a run
once, in a fresh process, sized by the rate the INVALID run met (with the usual margins); the
rerun's results.json says so and why (``config.rerun``).

Never rerun: an official run (its settings are the rules'), an audit, a run whose user.conf set
the rate (the user chose it), a Server run (it is timed by its schedule, not by a count of
queries), a run that met no more than its warm-up's rate (speed was not the cause) and a rerun.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.records import RunRecord
from quantmark.run.validity import MIN_DURATION
from quantmark.scenarios.settings import Measurement

# the quantmark-set user.conf key that sizes each scenario's run by the warm-up
RATE_KEY = {"Offline": "target_qps", "SingleStream": "target_latency",
            "MultiStream": "target_latency"}


def warmup_rate(results: RunRecord, scenario: str) -> float | None:
    """Samples/s the warm-up predicted for the run (results.json ``settings.measurement``)."""
    settings = results.settings
    names = {f.name for f in dataclasses.fields(Measurement)}
    recorded = {k: v for k, v in (settings.get("measurement") or {}).items() if k in names}
    try:
        measurement = Measurement(**recorded)
        return measurement.expected_rate(scenario, int(settings.get("workers") or 1))
    except (TypeError, ValueError, ZeroDivisionError):
        return None


def rerun_config(config: RunConfig, status: str, found: RunRecord | dict[str, Any]
                 ) -> RunConfig | None:
    """The config to run once more, with why and at which rate in ``rerun``; None when the
    run stands as it is (see the module docstring). ``found``: the run's record, or the dict
    its launch returned (empty when it failed)."""
    key = RATE_KEY.get(config.scenario)
    results = RunRecord.of(found)
    summary = results.summary
    if (status != "ok" or not config.quick or config.mode != "performance" or config.audit
            or config.rerun or key is None or summary.get("validity") != "INVALID"
            or MIN_DURATION not in (summary.get("unmet_checks") or [])
            or key not in (results.settings.get("quantmark_set") or {})):
        return None
    met = summary.get("samples_per_second")
    expected = warmup_rate(results, config.scenario)
    if not isinstance(met, int | float) or met <= 0 or (expected and met <= expected):
        return None
    why = (f"the first run was INVALID (min duration not met): it ran at {met:.4g} samples/s, "
           + (f"{met / expected:.2g}x the {expected:.4g} its warm-up measured, "
              if expected else "faster than its warm-up measured, ")
           + "so LoadGen ran out of queries; rerun once sized by the rate it met")
    return replace(config, rerun={"why": why, "met_samples_per_s": float(met),
                                  "warmup_samples_per_s": expected,
                                  "first_run": {"validity": summary.get("validity"),
                                                "unmet_checks": summary.get("unmet_checks")}})
