"""Read LoadGen's ``mlperf_log_detail.txt``: validity, official metric and percentiles.

Every number here is LoadGen's own (its percentiles are nearest-rank); nothing is recomputed from
raw latencies. The only derived figure is MultiStream samples/s, which LoadGen does not print:
queries run back to back there, so it is samples_per_query / mean query latency.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PREFIX = ":::MLLOG"
PERCENTILES = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")

# The official metric per scenario: (detail key, unit, human name).
OFFICIAL_METRIC = {
    "SingleStream": ("early_stopping_latency_ss", "ns", "90th percentile latency (early stopping)"),
    "MultiStream": ("early_stopping_latency_ms", "ns", "99th percentile latency (early stopping)"),
    "Server": ("result_completed_samples_per_sec", "samples/s", "completed samples/s"),
    "Offline": ("result_samples_per_second", "samples/s", "samples/s"),
}


# LoadGen's validity checks, as its detail log names them, and what each means to a reader.
VALIDITY_CHECKS = {
    "result_perf_constraints_met": "latency bound",
    "result_min_duration_met": "min duration",
    "result_min_queries_met": "min queries",
    "early_stopping_met": "early stopping",
}


class LogError(ValueError):
    """The detail log is missing or not LoadGen's."""


def read_detail(path: str | Path) -> dict[str, Any]:
    """Key -> first value, plus ``_errors`` and ``_warnings`` lists (as LoadGen flagged them)."""
    file = Path(path)
    if not file.is_file():
        raise LogError(f"{file}: no mlperf_log_detail.txt")
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    for line in file.read_text(errors="replace").splitlines():
        if not line.startswith(PREFIX):
            continue
        try:
            entry = json.loads(line[len(PREFIX):])
        except json.JSONDecodeError:
            continue
        key = entry.get("key")
        meta = entry.get("metadata") or {}
        if meta.get("is_error"):
            errors.append(f"{key}: {entry.get('value')}")
        elif meta.get("is_warning"):
            warnings.append(f"{key}: {entry.get('value')}")
        values.setdefault(key, entry.get("value"))
    if "loadgen_version" not in values:
        raise LogError(f"{file}: not a LoadGen detail log")
    values["_errors"] = errors
    values["_warnings"] = warnings
    return values


@dataclass
class RunSummary:
    """One LoadGen run as the report shows it."""

    scenario: str
    mode: str
    validity: str
    metric_name: str
    metric_key: str
    metric_value: float | None
    metric_unit: str
    min_latency_ns: int | None
    mean_latency_ns: float | None
    max_latency_ns: int | None
    percentiles_ns: dict[str, int] = field(default_factory=dict)
    samples_per_second: float | None = None
    query_count: int | None = None
    invalid_reason: str | None = None
    unmet_checks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    loadgen_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def why_invalid(self) -> str:
        return why_invalid(self.unmet_checks, self.invalid_reason)


def why_invalid(unmet_checks: list[str] | None, invalid_reason: str | None) -> str:
    """LoadGen's checks that failed and its own advice, as one line."""
    parts = [f"{', '.join(unmet_checks)} not met"] if unmet_checks else []
    if invalid_reason and invalid_reason.strip():
        parts.append(invalid_reason.strip())
    return "; ".join(parts) or "see mlperf_log_summary.txt"


def summarize(detail: dict[str, Any]) -> RunSummary:
    """Turn a parsed detail log into a RunSummary."""
    scenario = str(detail.get("effective_scenario") or detail.get("requested_scenario") or "")
    mode = str(detail.get("effective_test_mode") or "")
    key, unit, name = OFFICIAL_METRIC.get(scenario, ("", "", ""))
    metric = detail.get(key)
    samples_per_second = _samples_per_second(scenario, detail)
    runtime_errors = [e for e in detail.get("_errors", []) if not e.startswith("warning")]
    return RunSummary(
        scenario=scenario,
        mode=mode,
        validity=str(detail.get("result_validity", "UNKNOWN")),
        metric_name=name,
        metric_key=key,
        metric_value=float(metric) if metric is not None else None,
        metric_unit=unit,
        min_latency_ns=detail.get("result_min_latency_ns"),
        mean_latency_ns=detail.get("result_mean_latency_ns"),
        max_latency_ns=detail.get("result_max_latency_ns"),
        percentiles_ns={
            p: detail[f"result_{p}_percentile_latency_ns"]
            for p in PERCENTILES
            if f"result_{p}_percentile_latency_ns" in detail
        },
        samples_per_second=samples_per_second,
        query_count=detail.get("result_query_count"),
        invalid_reason=detail.get("result_invalid_reason"),
        unmet_checks=[name for key, name in VALIDITY_CHECKS.items() if detail.get(key) is False],
        errors=runtime_errors,
        loadgen_version=detail.get("loadgen_version"),
    )


def _samples_per_second(scenario: str, detail: dict[str, Any]) -> float | None:
    if scenario == "Offline":
        value = detail.get("result_samples_per_second")
    elif scenario == "Server":
        value = detail.get("result_completed_samples_per_sec")
    elif scenario == "SingleStream":
        value = detail.get("result_qps_with_loadgen_overhead")
    elif scenario == "MultiStream":
        mean = detail.get("result_mean_query_latency_ns")
        per_query = detail.get("effective_samples_per_query") or 8
        value = per_query * 1e9 / mean if mean else None
    else:
        value = None
    return float(value) if value is not None else None


def summarize_file(path: str | Path) -> RunSummary:
    return summarize(read_detail(path))
