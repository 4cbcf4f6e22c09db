"""Recorded results read back, each figure checked against the runs it names.

A recorded result (``quantmark.bench.result_capture``) keeps the report's figures beside LoadGen's
figure of every run they come from. Reading one rebuilds the report's configurations from those
runs and derives the figures again with the report's own code (``report.intervals``: the
median's interval, the speedup over the framework's FP32 at the recorded confidence, the
disturbed count); a recorded figure they do not give, or a quality figure that is not its
accuracy run's, refuses the result in one line (``Disagrees``). A bench output is checked the
same way where it keeps its rounds (vendor parity's sides, nms_ops' timings). So the page
cannot show a number its evidence does not back, and an edited figure is caught, not printed.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.bench.result_capture import KIND, SCHEMA
from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.records import RunRecord
from quantmark.report import intervals
from quantmark.report.loadgen_log import RunSummary
from quantmark.report.measured import measured
from quantmark.report.stats import family_confidence, speedup
from quantmark.report.study import Config, Run

#: where the recorded results live, in the repository
RESULTS_DIR = Path("benchmarks")
#: how close a recorded number must be to the one its runs give (JSON keeps floats exactly)
REL_TOL = 1e-9


class Disagrees(UserError):
    """A recorded result whose figure its runs do not give, or that cannot be read."""


@dataclass
class Recorded:
    """One recorded result, its configurations rebuilt from its runs and derived again."""

    name: str
    path: Path
    data: dict[str, Any]
    configs: list[Config] = field(default_factory=list)


def dumps(data: dict[str, Any]) -> str:
    """The file's text, in the order the capture built it (a bench output's as the bench wrote
    it): recording the same folder again gives the same text."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def save(folder: Path, name: str, data: dict[str, Any]) -> Path:
    path = folder / f"{name}.json"
    atomic_write_text(path, dumps(data))
    return path


def load_all(folder: Path) -> list[Recorded]:
    """Every recorded result in ``folder``, checked, by name."""
    return [load(path) for path in sorted(folder.glob("*.json"))]


def load(path: Path) -> Recorded:
    """``path`` read and checked against its evidence (``checked``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Disagrees(f"{path}: not a readable recorded result ({exc})") from None
    return checked(data, path)


def checked(data: Any, path: Path) -> Recorded:
    """``data`` (to be, or as read from, ``path``) checked against its evidence."""
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise Disagrees(f"{path}: not a recorded result (kind {KIND!r})")
    if data.get("schema") != SCHEMA:
        raise Disagrees(f"{path}: recorded result schema {data.get('schema')}, this quantmark "
                        f"reads {SCHEMA}: record it again")
    recorded = Recorded(path.stem, path, data)
    try:
        if data.get("type") == "bench":
            _check_bench(data)
        else:
            recorded.configs = _checked_configs(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise Disagrees(f"{path}: malformed recorded result ({type(exc).__name__}: {exc})"
                        ) from None
    except _Mismatch as exc:
        raise Disagrees(f"{path}: {exc}; its figures disagree with its evidence: record the "
                        "folder again (never edit a recorded result)") from None
    return recorded


class _Mismatch(Exception):
    """A figure that is not what its runs give (the loader names the file)."""


def _same(mine: Any, theirs: Any) -> bool:
    """Equal; numbers (not flags) to ``REL_TOL``."""
    numbers = (int, float)
    if isinstance(mine, numbers) and isinstance(theirs, numbers) \
            and not isinstance(mine, bool) and not isinstance(theirs, bool):
        return math.isclose(float(mine), float(theirs), rel_tol=REL_TOL, abs_tol=1e-12)
    return bool(mine == theirs)


def _expect(what: str, recorded: dict[str, Any], derived: dict[str, Any]) -> None:
    for key, value in derived.items():
        if not _same(recorded.get(key), value):
            raise _Mismatch(f"{what}: {key} is {recorded.get(key)!r} but its runs give "
                            f"{value!r}")


def rebuilt_run(entry: dict[str, Any]) -> Run:
    """A report run from a recorded one: LoadGen's figure, validity, repeat and verdicts."""
    summary = RunSummary(scenario=entry["scenario"], mode="PerformanceOnly",
                         validity=entry["validity"], metric_name=entry["metric_name"],
                         metric_key=entry["metric_key"], metric_value=entry["metric_value"],
                         metric_unit=entry["metric_unit"], min_latency_ns=None,
                         mean_latency_ns=None, max_latency_ns=None,
                         samples_per_second=entry["samples_per_second"])
    results: dict[str, Any] = {"config": {"mode": "performance"}}
    if entry.get("disturbed") is not None:
        results["interference"] = {"disturbed": entry["disturbed"],
                                   "why": entry.get("disturbed_why", [])}
    if entry.get("until_stable") is not None:
        results["config"]["until_stable"] = entry["until_stable"]
        results["repeat"] = {"index": entry.get("repeat") or 1, "of": entry.get("repeat_of")}
    tracked = {} if entry.get("repeat") is None else {"repeat": entry["repeat"]}
    return Run(Path(entry["id"]), summary, RunRecord.of(results), tracked)


def _checked_configs(data: dict[str, Any]) -> list[Config]:
    """The result's configurations rebuilt from its runs, each recorded figure checked."""
    runs = {entry["id"]: rebuilt_run(entry) for entry in data["runs"]}
    configs = [Config(c["system"], c["model"], c["sut"], c["scenario"], int(c["batch_size"]),
                      [runs[i] for i in c["runs"]]) for c in data["configs"]]
    by_key = {(c.system, c.model, c.sut, c.scenario, c.batch_size): c for c in configs}
    confidence = family_confidence(int(data["verdicts"]))
    for entry, config in zip(data["configs"], configs, strict=True):
        what = f"{config.model} {config.sut} {config.scenario} batch {config.batch_size}"
        reference = by_key.get((config.system, config.model, entry["fp32_baseline"],
                                config.scenario, config.batch_size))
        _derive(config, entry, reference, confidence, what)
    stored = {job["folder"]: job["figure"] for job in data["store_jobs"]
              if " accuracy " in job["series"]}
    for entry, config in zip(data["configs"], configs, strict=True):
        _check_quality(entry, config, data["configs"], configs, stored)
    return configs


def _derive(config: Config, entry: dict[str, Any], reference: Config | None,
            confidence: float, what: str) -> None:
    """Derive the configuration's figures from its runs (the report's code) into
    ``config.derived`` and check the recorded ones against them."""
    ran = measured(config)
    _expect(what, entry, {"n": ran["n"], "validity": ran["validity"]})
    figure = intervals.metric_interval(config)
    if (figure is None) != (entry["figure"] is None):
        raise _Mismatch(f"{what}: a figure is recorded where its runs give none, or none "
                        "where they give one")
    if figure is not None:
        _expect(f"{what} figure", entry["figure"], {"point": figure.point, "low": figure.low,
                                                    "high": figure.high, "n": figure.n,
                                                    "method": figure.method,
                                                    "unit": ran["metric_unit"]})
    ratio = intervals.ratio(config, reference, confidence)
    if (ratio is None) != (entry["speedup_vs_fp32"] is None):
        raise _Mismatch(f"{what}: a speedup is recorded where its runs give none, or none "
                        "where they give one")
    if ratio is not None:
        _expect(f"{what} speedup", entry["speedup_vs_fp32"], {
            "point": ratio.point, "low": ratio.low, "high": ratio.high,
            "confidence": ratio.confidence, "paired": ratio.paired, "method": ratio.method})
    disturbed, checked, why = intervals.disturbance(config.runs)
    _expect(what, entry, {"disturbed": disturbed, "disturbance_checked": checked})
    config.derived = {
        **ran, "metric_interval": figure, "speedup_vs_fp32_ratio": ratio,
        "speedup_vs_fp32": intervals.point(config, reference, ratio),
        "fp32_baseline": entry["fp32_baseline"], "disturbed": disturbed,
        "disturbance_checked": checked, "disturbed_why": why,
        "executed_precision": entry["executed"], "quality": entry["quality"]}


def _check_quality(entry: dict[str, Any], config: Config, entries: list[dict[str, Any]],
                   configs: list[Config], stored: dict[str, Any]) -> None:
    """A quality figure is its accuracy run's as the store recorded it, and its change against
    the FP32's the difference of the two figures."""
    found = entry["quality"]
    if found is None:
        return
    what = f"{config.model} {config.sut} quality"
    if found["accuracy_run"] not in stored:
        raise _Mismatch(f"{what}: its accuracy run {found['accuracy_run']} is not among the "
                        "store's jobs")
    _expect(what, found, {"value": stored[found["accuracy_run"]]})
    fp32 = [e for e, c in zip(entries, configs, strict=True)
            if e["sut"] == entry["fp32_baseline"] and e["quality"] is not None
            and (c.system, c.model) == (config.system, config.model)]
    if fp32 and found["change_vs_fp32"] is not None:
        _expect(what, found, {"change_vs_fp32": found["value"] - fp32[0]["quality"]["value"]})


def _check_bench(data: dict[str, Any]) -> None:
    """A bench output's ratios against the rounds it keeps (the bench's own ``speedup``)."""
    output = data["output"]
    if data["bench"] == "vendor_parity":
        from quantmark.bench.vendor_parity import QUANTMARK

        for entry in output:
            ours = entry["values"][QUANTMARK]
            for key, ratio in entry["ratios"].items():
                found = speedup(entry["values"][key], ours,
                                higher_is_better=entry["metric"] == "samples/s", paired=True)
                _expect(f"vendor parity {entry['case']} against {key}", ratio, {
                    "point": found.point, "low": found.low, "high": found.high})
    elif data["bench"] == "nms_ops":
        for entry in output:
            numpy_ms = entry["rows"]["numpy"].get("rounds_ms")
            for key, row in entry["rows"].items():
                if numpy_ms is None or row.get("rounds_ms") is None:
                    continue  # an output of before the bench kept its rounds: as written
                found = speedup(numpy_ms, row["rounds_ms"], higher_is_better=False,
                                paired=True)
                what = f"nms_ops {entry['workload']} {key}"
                _expect(what, row, {"median_ms": statistics.median(row["rounds_ms"])})
                _expect(what, row["numpy_over_op"], {"point": found.point, "low": found.low,
                                                     "high": found.high})
    else:
        raise ValueError(f"unknown bench {data['bench']!r}")
