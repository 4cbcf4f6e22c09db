"""Which runs a figure may use, and how a run it may not use is named.

A median, a speedup or a verdict is made of VALID runs only: LoadGen's INVALID says a run did not
measure what was asked (too short, a latency bound broken), and a run whose logs LoadGen did not
finish has partial numbers. Every run left out is named in one line, never dropped silently.

An official run's INVALID is told in LoadGen's own words. A quick run's settings are quantmark's
(sized by a warm-up), so LoadGen's advice ("increase expected QPS") is not the user's to act on:
such a run gets what quantmark did and what the user can do instead.
"""

from __future__ import annotations

from typing import Any

from quantmark.ground.records import RunRecord
from quantmark.report.loadgen_log import VALIDITY_CHECKS, why_invalid

VALID = "VALID"
MIN_DURATION = VALIDITY_CHECKS["result_min_duration_met"]
USER_CONF_FIX = "or set target_qps / target_latency yourself in a --user-conf"
# What an unmet check of a quick run means, in quantmark's words (the key: LoadGen's check)
QUICK_CHECKS = {
    MIN_DURATION: "min duration not met: the SUT ran faster than the warm-up quantmark sized "
                  "the run by, and LoadGen ran out of queries; run again on a quiet machine "
                  f"{USER_CONF_FIX}",
    VALIDITY_CHECKS["result_perf_constraints_met"]:
        "latency bound not met at the load quantmark chose from the warm-up; run again on a "
        "quiet machine, or set a lower target_qps in a --user-conf",
    VALIDITY_CHECKS["early_stopping_met"]:
        "early stopping not met: too few queries to bound the percentile; lengthen the run "
        "(min_duration in a --user-conf)",
}


def left_out_why(results: RunRecord | dict[str, Any]) -> str | None:
    """Why a run's figure may not be used (one line), or None when it may: VALID, whole logs
    and an official metric. ``results``: its record, or the dict its launch returned."""
    results = RunRecord.of(results)
    summary = results.summary
    if summary.get("incomplete"):
        return f"incomplete: {summary['incomplete']}"
    validity = summary.get("validity")
    if validity != VALID:
        return f"{validity or 'no validity recorded'}: {invalid_text(results)}"
    if not summary.get("metric_value"):
        return "no official metric in its results.json"
    return None


def invalid_text(results: RunRecord | dict[str, Any]) -> str:
    """Why LoadGen judged the run INVALID: LoadGen's words for an official run, quantmark's
    for a quick one (what it did, and what the user can do)."""
    results = RunRecord.of(results)
    summary, config = results.summary, results.config
    unmet = list(summary.get("unmet_checks") or [])
    if not config.get("quick", True) or not unmet:
        return why_invalid(unmet, summary.get("invalid_reason"))
    rerun = config.get("rerun") or {}
    settings = results.settings
    user_set = bool(settings) and not ({"target_qps", "target_latency"} &
                                       set(settings.get("quantmark_set") or {}))
    parts = []
    for check in unmet:
        if check == MIN_DURATION and rerun:
            parts.append(f"min duration not met even after quantmark reran the run once at "
                         f"the {rerun.get('met_samples_per_s', 0):.4g} samples/s its first run "
                         f"met: the machine's speed keeps changing; run again on a quiet "
                         f"machine {USER_CONF_FIX}")
        elif check == MIN_DURATION and user_set:
            parts.append("min duration not met: the SUT ran faster than your --user-conf's "
                         "target_qps / target_latency planned for; raise target_qps or lower "
                         "target_latency there")
        else:
            parts.append(QUICK_CHECKS.get(check, f"{check} not met: quantmark chose this quick "
                                                 "run's settings (user.conf beside the logs); "
                                                 "set your own in a --user-conf"))
    return "; ".join(parts)


def repeat_index(results: RunRecord | dict[str, Any]) -> int | None:
    """Which repeat of its set a run was (``results.json`` ``repeat.index``), or None."""
    return RunRecord.of(results).repeat_index
