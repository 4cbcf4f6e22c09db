"""Read LoadGen's ``mlperf_log_detail.txt``: validity, official metric and percentiles.

Every number here is LoadGen's own (its percentiles are nearest-rank); nothing is recomputed from
raw latencies. The only derived figure is MultiStream samples/s, which LoadGen does not print:
queries run back to back there, so it is samples_per_query / mean query latency.

A log LoadGen did not finish (a killed process, a full disk, a copy cut short) still parses; what
it lacks is said (``detail_problems``, ``check_complete``) and such a run is marked INCOMPLETE,
never shown as a plain row.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PREFIX = ":::MLLOG"
DETAIL_FILE = "mlperf_log_detail.txt"
SUMMARY_FILE = "mlperf_log_summary.txt"
ACCURACY_FILE = "mlperf_log_accuracy.json"
# The validity shown for a run whose detail log LoadGen did not finish writing.
INCOMPLETE = "INCOMPLETE (log truncated)"
PERCENTILES = ("50.00", "90.00", "95.00", "97.00", "99.00", "99.90")

# The official metric per scenario: (detail key, unit, human name).
OFFICIAL_METRIC = {
    "SingleStream": ("early_stopping_latency_ss", "ns", "90th percentile latency (early stopping)"),
    "MultiStream": ("early_stopping_latency_ms", "ns", "99th percentile latency (early stopping)"),
    "Server": ("result_completed_samples_per_sec", "samples/s", "completed samples/s"),
    "Offline": ("result_samples_per_second", "samples/s", "samples/s"),
}

# Where samples/s comes from per scenario (MultiStream: derived from the mean query latency).
SAMPLES_PER_SECOND_KEY = {
    "SingleStream": "result_qps_with_loadgen_overhead",
    "MultiStream": "result_mean_query_latency_ns",
    "Server": "result_completed_samples_per_sec",
    "Offline": "result_samples_per_second",
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


def _entry(line: str) -> dict[str, Any] | None:
    """One ``:::MLLOG`` line as JSON, or None where it is not (cut off, corrupted)."""
    try:
        entry = json.loads(line[len(PREFIX):])
    except json.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("key"), str) else None


def read_detail(path: str | Path) -> dict[str, Any]:
    """Key -> first value, plus ``_errors`` and ``_warnings`` lists (as LoadGen flagged them),
    ``_bad_lines`` (line numbers that are not LoadGen JSON) and ``_cut_off`` (the file ends
    inside a line: LoadGen ends every line, so the log was truncated)."""
    file = Path(path)
    if not file.is_file():
        raise LogError(f"{file.parent}: no {file.name}")
    text = file.read_text(errors="replace")
    if not text.strip():
        raise LogError(f"{file}: empty, LoadGen stopped before writing it")
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    bad_lines: list[int] = []
    lines = text.split("\n")  # not splitlines(): JSON strings may hold U+2028 unescaped
    for number, line in enumerate(lines, start=1):
        if not line.startswith(PREFIX):
            continue
        entry = _entry(line)
        if entry is None:
            bad_lines.append(number)
            continue
        key = entry["key"]
        meta = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
        if meta.get("is_error"):
            errors.append(f"{key}: {entry.get('value')}")
        elif meta.get("is_warning"):
            warnings.append(f"{key}: {entry.get('value')}")
        values.setdefault(key, entry.get("value"))
    if "loadgen_version" not in values:
        raise LogError(f"{file}: not a LoadGen detail log (no loadgen_version line)")
    cut_off = lines[-1] != ""
    values["_errors"] = errors
    values["_warnings"] = warnings
    values["_bad_lines"] = [n for n in bad_lines if not (cut_off and n == len(lines))]
    values["_cut_off"] = cut_off
    return values


def result_keys(scenario: str) -> list[str]:
    """The result lines LoadGen writes at the end of a performance run of ``scenario``, that
    the report needs."""
    return ["result_validity", OFFICIAL_METRIC[scenario][0], SAMPLES_PER_SECOND_KEY[scenario],
            "result_min_latency_ns", "result_mean_latency_ns", "result_max_latency_ns",
            *[f"result_{p}_percentile_latency_ns" for p in PERCENTILES]]


def detail_problems(detail: dict[str, Any]) -> list[str]:
    """What a parsed detail log lacks for its mode, each as a short phrase; [] for a log
    LoadGen finished. AccuracyOnly logs have no result lines: their last line is power_end."""
    problems = []
    if detail.get("_cut_off"):
        problems.append("its last line is cut off")
    bad = detail.get("_bad_lines") or []
    if bad:
        problems.append(f"{len(bad)} line(s) are not LoadGen JSON (first: line {bad[0]})")
    scenario = detail.get("effective_scenario")
    mode = detail.get("effective_test_mode")
    if scenario is None or mode is None:
        return problems + ["it stops before LoadGen's test settings (no effective_scenario)"]
    if mode == "AccuracyOnly":
        if "power_end" not in detail:
            problems.append("it stops before the end of the test (no power_end line)")
        return problems
    if scenario not in OFFICIAL_METRIC:
        return problems + [f"unknown scenario {scenario!r}"]
    missing = [key for key in result_keys(scenario) if key not in detail]
    if "result_validity" in missing:
        problems.append("it stops before LoadGen's results (no result_validity line)")
    elif missing:
        problems.append(f"it lacks {', '.join(missing)}")
    return problems


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
    incomplete: str = ""  # why the log is not whole ("" when LoadGen finished it)

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
    problems = detail_problems(detail)
    return RunSummary(
        scenario=scenario,
        mode=mode,
        validity=INCOMPLETE if problems else str(detail.get("result_validity", "UNKNOWN")),
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
        incomplete="; ".join(problems),
    )


def unreadable_summary(reason: str) -> RunSummary:
    """The row of a detail log that does not even parse (empty, cut before its first line)."""
    return RunSummary(scenario="", mode="", validity=INCOMPLETE, metric_name="", metric_key="",
                      metric_value=None, metric_unit="", min_latency_ns=None,
                      mean_latency_ns=None, max_latency_ns=None, incomplete=reason)


def _samples_per_second(scenario: str, detail: dict[str, Any]) -> float | None:
    value = detail.get(SAMPLES_PER_SECOND_KEY.get(scenario, ""))
    if scenario == "MultiStream":
        per_query = detail.get("effective_samples_per_query") or 8
        value = per_query * 1e9 / value if value else None
    return float(value) if value is not None else None


def summarize_file(path: str | Path) -> RunSummary:
    return summarize(read_detail(path))


# The last line LoadGen writes to the summary, in every mode: a summary without it was cut.
_SUMMARY_END = re.compile(r"^(No errors encountered during test\.|\d+ ERRORS? encountered\. "
                          r"See detailed log\.)$")
_SUMMARY_FIELD = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
# The headline of the summary's results section -> the detail key holding the same number.
_HEADLINES = {
    "Samples per second": "result_samples_per_second",
    "Completed samples per second": "result_completed_samples_per_sec",
    "Scheduled samples per second": "result_scheduled_samples_per_sec",
}
_PERCENTILE_HEADLINE = re.compile(r"^([\d.]+)th percentile latency \(ns\)$")


def check_complete(run_folder: str | Path) -> list[str]:
    """Why a LoadGen run's logs are not whole and consistent, one line each; [] when they are.

    A killed process, a full disk or a copy cut short leaves logs that still parse: the detail
    and summary logs must be whole and agree (``read_logs``), and the accuracy log must be a
    closed JSON list."""
    _, problems = read_logs(run_folder)
    path = Path(run_folder) / ACCURACY_FILE
    return problems + [f"{ACCURACY_FILE}: {p}" for p in _accuracy_log_problems(path)]


def read_logs(run_folder: str | Path, need_summary: bool = True
              ) -> tuple[dict[str, Any] | None, list[str]]:
    """The detail log's values (None where it is missing or does not parse) and why the
    detail and summary logs are not whole and consistent, one line each ([] when they are):
    the detail log must hold what its mode ends with (``detail_problems``), the summary must
    end with LoadGen's closing line and agree with the detail log on scenario, mode, result
    and headline metric, and be there unless ``need_summary`` is False (the detail log holds
    every number; a folder kept without its summary is still LoadGen's word)."""
    path = Path(run_folder) / DETAIL_FILE
    if not path.is_file():
        return None, [f"{DETAIL_FILE}: missing"]
    try:
        detail = read_detail(path)
    except LogError as exc:
        return None, [f"{DETAIL_FILE}: {str(exc).removeprefix(f'{path}: ')}"]
    problems = [f"{DETAIL_FILE}: {p}" for p in detail_problems(detail)]
    summary = path.parent / SUMMARY_FILE
    if need_summary or summary.exists():
        problems += [f"{SUMMARY_FILE}: {p}" for p in _summary_problems(summary, detail)]
    return detail, problems


def _summary_fields(lines: list[str]) -> dict[str, str]:
    """``label : value`` of the summary's results section (before "Additional Stats")."""
    fields: dict[str, str] = {}
    for line in lines:
        if line.strip() == "Additional Stats":
            break
        match = _SUMMARY_FIELD.match(line)
        if match:
            fields.setdefault(match[1], match[2])
    return fields


def _summary_problems(path: Path, detail: dict[str, Any]) -> list[str]:
    if not path.is_file():
        return ["missing"]
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    if not text.endswith("\n") or not lines or not _SUMMARY_END.match(lines[-1].strip()):
        return ["cut off (no closing 'errors encountered' line)"]
    if detail.get("effective_test_mode") == "AccuracyOnly":
        return []  # LoadGen writes no results section for an accuracy run
    fields = _summary_fields(lines)
    problems = [f"says {label} {fields.get(label)!r} but the detail log {detail.get(key)!r}"
                for label, key in (("Scenario", "effective_scenario"),
                                   ("Mode", "effective_test_mode"))
                if fields.get(label) != detail.get(key)]
    said, logged = fields.get("Result is"), detail.get("result_validity")
    if said is None:
        problems.append("has no 'Result is' line")
    elif logged is not None and said != logged and not _min_queries_skipped(fields, detail):
        problems.append(f"says Result is {said} but the detail log {logged}")
    return problems + _headline_problems(fields, detail)


def _min_queries_skipped(fields: dict[str, str], detail: dict[str, Any]) -> bool:
    """LoadGen builds that do not enforce max duration print VALID in the summary and skip the
    min-queries check there, while the detail log still counts it."""
    unmet = [name for key, name in VALIDITY_CHECKS.items() if detail.get(key) is False]
    return (fields.get("Min queries satisfied") == "Skipped" and fields.get("Result is") ==
            "VALID" and unmet == [VALIDITY_CHECKS["result_min_queries_met"]])


def _headline_key(label: str, scenario: str) -> str | None:
    if label in _HEADLINES:
        return _HEADLINES[label]
    match = _PERCENTILE_HEADLINE.match(label)
    if not match:
        return None
    kind = "per_query_latency_ns" if scenario == "MultiStream" else "latency_ns"
    return f"result_{float(match[1]):.2f}_percentile_{kind}"


def _headline_problems(fields: dict[str, str], detail: dict[str, Any]) -> list[str]:
    """The summary's headline number must be the detail log's (both print ~6 digits)."""
    scenario = str(detail.get("effective_scenario"))
    found = [(label, key) for label in fields
             if (key := _headline_key(label, scenario)) is not None]
    if not found:
        return [f"has no result line for {scenario}"]
    if "result_validity" not in detail:
        return []  # a detail log cut before its results is named by detail_problems
    problems = []
    for label, key in found:
        try:
            said = float(fields[label])
        except ValueError:
            problems.append(f"{label} is {fields[label]!r}, not a number")
            continue
        logged = detail.get(key)
        if not isinstance(logged, int | float) or not math.isclose(
                said, logged, rel_tol=1e-5, abs_tol=0.01):
            problems.append(f"says {label} {fields[label]} but the detail log {key} {logged}")
    return problems


def _accuracy_log_problems(path: Path) -> list[str]:
    """LoadGen writes the accuracy log in every mode (``[`` ... ``]``, empty in performance
    runs); only its two ends are read, so a 50,000-sample log costs nothing."""
    if not path.is_file():
        return ["missing"]
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(64)
        handle.seek(max(size - 64, 0))
        tail = handle.read()
    if not head.lstrip().startswith(b"[") or not tail.rstrip().endswith(b"]"):
        return ["cut off (not a closed JSON list)"]
    return []
