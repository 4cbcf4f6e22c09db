"""Judge a compliance test against the normal runs, the way the rules describe, and write the
``verify_*.txt`` files (``TEST PASS`` / ``TEST FAIL``) and the layout a submission expects.

Layout (one SUT, model and scenario)::

    <scenario>/performance/run_1/        the normal performance run
    <scenario>/accuracy/                 the accuracy run
    <scenario>/TEST01/performance/run_1/ the TEST01 run (perf logs + sampled accuracy log)
    <scenario>/TEST01/accuracy/          its sampled accuracy log (+ baseline/compliance files)
    <scenario>/TEST01/verify_accuracy.txt, verify_performance.txt
    <scenario>/TEST04/performance/run_1/, verify_performance.txt
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from quantmark.audit.configs import audit_was_applied, validate_audit_test
from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text
from quantmark.report.accuracy import decode_value, read_log_entries, read_val_map_labels, score
from quantmark.report.loadgen_log import OFFICIAL_METRIC, LogError, read_detail

PERFORMANCE_TOLERANCE = 0.10
# Very short latencies vary more run to run (OS noise): the rules allow 20% there.
SMALL_LATENCY_NS = {"SingleStream": 200_000, "MultiStream": 1_600_000}
SMALL_TOLERANCE = 0.20
# A SUT whose responses are not bit-exact run to run passes TEST01 if its accuracy on the
# sampled responses is within this many percentage points of the accuracy run's on the same set.
FALLBACK_ACCURACY_POINTS = 1.0


@dataclass
class Verdict:
    """One check's outcome and the lines that explain it (the verify_*.txt text)."""

    passed: bool
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([*self.lines, "TEST PASS" if self.passed else "TEST FAIL"]) + "\n"


@dataclass(frozen=True)
class Score:
    scenario: str
    metric: float  # the official metric, as LoadGen logged it
    unit: str  # "ns" (latency) or "samples/s"
    valid: bool

    @property
    def speed(self) -> float:
        """Higher is faster whatever the scenario: samples/s, or 1/latency."""
        return self.metric if self.unit != "ns" else 1e9 / self.metric


def read_score(run: Path) -> Score:
    """Official metric and validity from a run folder's detail log."""
    detail = read_detail(run / "mlperf_log_detail.txt")
    scenario = str(detail.get("effective_scenario"))
    if scenario not in OFFICIAL_METRIC:
        raise LogError(f"{run}: unknown scenario {scenario!r} in the detail log")
    key, unit, _ = OFFICIAL_METRIC[scenario]
    if detail.get(key) is None:
        raise LogError(f"{run}: the detail log has no {key}")
    return Score(scenario, float(detail[key]), unit, detail.get("result_validity") == "VALID")


def tolerance(reference: Score) -> float:
    small = SMALL_LATENCY_NS.get(reference.scenario)
    return SMALL_TOLERANCE if small and reference.metric <= small else PERFORMANCE_TOLERANCE


def _compare_header(reference: Score, test: Score) -> tuple[bool, list[str]]:
    """Lines every performance verdict starts with, and whether the pair can pass at all."""
    unit = "ns" if reference.unit == "ns" else "samples/s"
    lines = [f"scenario: {reference.scenario}",
             f"reference score ({unit}) = {reference.metric:.6g}",
             f"test score ({unit}) = {test.metric:.6g}"]
    comparable = True
    if test.scenario != reference.scenario:
        lines.append("test and reference scenarios differ")
        comparable = False
    if not reference.valid:
        lines.append("the reference performance run is INVALID")
        comparable = False
    if not test.valid:
        lines.append("the test run is INVALID")
        comparable = False
    return comparable, lines


def verify_test01_performance(reference: Score, test: Score) -> Verdict:
    """TEST01's run must score within 10% (20% for tiny latencies) of the normal run."""
    comparable, lines = _compare_header(reference, test)
    limit = tolerance(reference)
    ratio = test.metric / reference.metric
    lines.append(f"test / reference = {ratio:.4f}; allowed {1 - limit:.2f}..{1 + limit:.2f}")
    return Verdict(comparable and 1 - limit <= ratio <= 1 + limit, lines)


def verify_test04_performance(reference: Score, test: Score) -> Verdict:
    """TEST04 issues one sample over and over: more than 10% faster means results were cached."""
    comparable, lines = _compare_header(reference, test)
    limit = tolerance(reference)
    speedup = test.speed / reference.speed
    lines.append(f"test speed / reference speed = {speedup:.4f}; fails at >= {1 + limit:.2f}")
    if speedup >= 1 + limit:
        lines.append("faster than the normal run: results are being cached")
    return Verdict(comparable and speedup < 1 + limit, lines)


def _first_responses(entries: list[dict]) -> dict[int, str]:
    first: dict[int, str] = {}
    for entry in entries:
        first.setdefault(int(entry["qsl_idx"]), str(entry["data"]))
    return first


def _as_float32(hex_data: str) -> np.ndarray:
    raw = bytes.fromhex(hex_data)
    return np.frombuffer(raw[: len(raw) // 4 * 4], dtype=np.float32)


def verify_test01_accuracy(accuracy_log: Path, test01_log: Path,
                           labels: list[int] | None) -> tuple[Verdict, dict[str, str]]:
    """Every sampled response must equal the accuracy run's for the same qsl_idx (as float32).

    If some differ (a non-deterministic SUT), the rules' fallback judges instead: top-1 of the
    sampled responses against top-1 of the accuracy run on the same samples. Returns the verdict
    and, when the fallback ran, the texts of baseline_accuracy.txt and compliance_accuracy.txt.
    """
    reference = _first_responses(read_log_entries(accuracy_log))
    sampled = read_log_entries(test01_log)
    matched = mismatched = unknown = 0
    for entry in sampled:
        ref = reference.get(int(entry["qsl_idx"]))
        if ref is None:
            unknown += 1
        elif np.array_equal(_as_float32(ref), _as_float32(str(entry["data"]))):
            matched += 1
        else:
            mismatched += 1
    lines = [f"accuracy run responses = {len(reference)}",
             f"TEST01 sampled responses = {len(sampled)}",
             f"matched (float32 equal) = {matched}", f"mismatched = {mismatched}",
             f"qsl_idx not in the accuracy run = {unknown}"]
    if not sampled:
        return Verdict(False, [*lines, "TEST01 logged no responses: nothing to compare"]), {}
    if unknown:
        return Verdict(False, [*lines, "some sampled samples are missing from the accuracy "
                                       "run: it did not cover the whole QSL"]), {}
    if mismatched == 0:
        return Verdict(True, [*lines, "exact check: every sampled response equals the "
                                      "accuracy run's"]), {}
    lines.append("exact check failed: judging by the rules' fallback for non-deterministic SUTs")
    if labels is None:
        return Verdict(False, [*lines, "no val_map for the fallback accuracy"]), {}
    indices = sorted({int(e["qsl_idx"]) for e in sampled})
    baseline = score({i: decode_value(reference[i]) for i in indices}, labels)
    compliance = score({i: decode_value(d) for i, d in _first_responses(sampled).items()}, labels)
    delta = abs(baseline.percent - compliance.percent)
    lines += [f"baseline (accuracy run, same samples): {baseline.line()}",
              f"compliance (TEST01 run): {compliance.line()}",
              f"|difference| = {delta:.3f} points; allowed {FALLBACK_ACCURACY_POINTS:.2f}"]
    files = {"baseline_accuracy.txt": baseline.line() + "\n",
             "compliance_accuracy.txt": compliance.line() + "\n"}
    return Verdict(delta <= FALLBACK_ACCURACY_POINTS, lines), files


def _require_run(folder: Path, what: str, how: str) -> None:
    if not (folder / "mlperf_log_detail.txt").is_file():
        raise UserError(f"no {what} in {folder}; {how}")


def require_references(scenario_dir: Path, test: str) -> None:
    """Fail before a long audit run if the runs it is judged against are missing."""
    validate_audit_test(test)
    _require_run(scenario_dir / "performance" / "run_1", "normal performance run",
                 "run the same command without --audit first (or use --all-tests)")
    if test == "TEST01":
        _require_run(scenario_dir / "accuracy", "accuracy run",
                     "run the same command with --mode accuracy first (or use --all-tests)")


def verify(scenario_dir: Path, test: str) -> dict[str, bool]:
    """Judge ``test`` in ``scenario_dir``; writes the verify files; returns check -> passed."""
    require_references(scenario_dir, test)
    test_dir = scenario_dir / test
    run = test_dir / "performance" / "run_1"
    _require_run(run, f"{test} run", f"run it with --audit {test}")
    applied = audit_was_applied(run / "mlperf_log_detail.txt")
    reference = read_score(scenario_dir / "performance" / "run_1")
    outcome: dict[str, bool] = {}
    if test == "TEST01":
        perf = verify_test01_performance(reference, read_score(run))
        accuracy_run = scenario_dir / "accuracy"
        labels_file = accuracy_run / "val_map.txt"
        labels = read_val_map_labels(labels_file) if labels_file.is_file() else None
        acc, files = verify_test01_accuracy(accuracy_run / "mlperf_log_accuracy.json",
                                            run / "mlperf_log_accuracy.json", labels)
        acc_dir = test_dir / "accuracy"
        acc_dir.mkdir(exist_ok=True)
        shutil.copy2(run / "mlperf_log_accuracy.json", acc_dir / "mlperf_log_accuracy.json")
        for name in ("baseline_accuracy.txt", "compliance_accuracy.txt"):
            if name in files:
                atomic_write_text(acc_dir / name, files[name])
            else:
                (acc_dir / name).unlink(missing_ok=True)
        _write(test_dir / "verify_accuracy.txt", acc, applied)
        outcome["accuracy"] = acc.passed and applied
    else:
        perf = verify_test04_performance(reference, read_score(run))
    _write(test_dir / "verify_performance.txt", perf, applied)
    outcome["performance"] = perf.passed and applied
    return outcome


def _write(path: Path, verdict: Verdict, applied: bool) -> None:
    if not applied:
        verdict = Verdict(False, [*verdict.lines, "LoadGen did not apply the audit.config "
                                                  "(no 'Found Audit Config file' in the log)"])
    atomic_write_text(path, verdict.text())
