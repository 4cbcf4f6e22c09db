"""A finished sweep, run folder or bench output, captured as a recorded result: the evidence
BENCHMARKS.md is generated from (``quantmark.bench.results_page``).

A folder's runs go through the results store first (``Store.record``): each run is checked
against its LoadGen logs, and a record they do not back refuses the whole folder. Then the
characterization report reads it (``report.characterize.load``): the figures kept are the
report's own (each configuration's median with its 95% interval, its speedup over its
framework's FP32 with the report's corrected interval, the paired quality change), each beside
the runs it comes from (LoadGen's figure per run, its validity, repeat index and disturbed
verdict, the sha256 of its logs), so the page can check every figure against its runs each time
it is generated. The machine is the store's environment of the runs. Model files and logs stay
where they are: a recorded result is a few tens of kB, small enough to commit.

A bench output (``nms_ops.json``, ``parity.json``) has no LoadGen run for the store to check: it
is kept as the bench wrote it, with the machine of the host recording it (said so).
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.records import SWEEP_MANIFEST
from quantmark.report.loadgen_log import DETAIL_FILE, SUMMARY_FILE

log = logging.getLogger(__name__)

KIND = "quantmark-recorded-result"
SCHEMA = 1
#: bench outputs a recorded result keeps as written: file name -> the bench that writes it
BENCH_OUTPUTS = {"nms_ops.json": "nms_ops", "parity.json": "vendor_parity"}
MADE_AT, RECORDED_AT = "made at", "recorded at"


class Refused(UserError):
    """The folder cannot be recorded: its runs are not backed by their logs, or it holds none."""


def commit(made_at: str | None, note: str = "", repo: Path | None = None) -> dict[str, Any]:
    """The commit a result is labelled with: ``made_at`` (the commit its runs were made at, where
    known), else the one checked out now, labelled as the commit it was recorded at."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                              check=False)
        if done.returncode:
            raise UserError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}; record "
                            "from a clone of quantmark (the page names the commit)")
        return done.stdout.strip()

    rev = git("rev-parse", "--verify", f"{made_at or 'HEAD'}^{{commit}}")
    found: dict[str, Any] = {"rev": rev, "basis": MADE_AT if made_at else RECORDED_AT}
    if not made_at and git("status", "--porcelain", "--untracked-files=no"):
        found["dirty"] = True  # the working tree had changes the commit does not hold
    if note:
        found["note"] = note
    return found


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bench_output(source: Path) -> Path | None:
    """The bench output ``source`` is or holds, None for anything else."""
    if source.is_file() and source.name in BENCH_OUTPUTS:
        return source
    if source.is_dir() and not (source / SWEEP_MANIFEST).is_file():
        found = [source / name for name in BENCH_OUTPUTS if (source / name).is_file()]
        return found[0] if len(found) == 1 else None
    return None


def host_machine() -> dict[str, Any]:
    """This host's machine facts, as the store flattens a run's (``machine_facts``)."""
    from quantmark.ground.fingerprint import machine
    from quantmark.store.environment_facts import machine_facts

    return {key.removeprefix("machine."): value
            for key, value in machine_facts(machine()).items()}


def capture_bench(path: Path) -> dict[str, Any]:
    """A bench output kept as written, dated by its file, on this host's machine."""
    try:
        output = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: not a readable bench output ({exc}); pass the folder the "
                      "bench wrote") from None
    when = _utc(path.stat().st_mtime)
    return {"type": "bench", "bench": BENCH_OUTPUTS[path.name], "output": output,
            "ran": {"first": when, "last": when, "basis": "the output file's time"},
            "machines": {"host": {"facts": host_machine(), "basis": "the host that recorded "
                                  "it (the bench's output names no machine)"}},
            "software": {}}


def capture_folder(source: Path, store_url: str | None = None) -> dict[str, Any]:
    """A sweep or results folder: its runs checked by the store, its figures the report's."""
    from quantmark.report.characterize import load
    from quantmark.report.logged_run import LogMismatch
    from quantmark.store.job_conflicts import StoreConflict

    with tempfile.TemporaryDirectory(prefix="quantmark-record-") as scratch:
        url = store_url or f"sqlite:///{Path(scratch) / 'check.sqlite'}"
        try:
            points, quality = _stored(source, url)
        except (LogMismatch, StoreConflict) as exc:
            raise Refused(f"{source}: not recorded: {exc}") from None
    study = load([source])
    if study.disagreements:
        raise Refused(f"{source}: not recorded: {study.disagreements[0]}")
    if not study.configs:
        raise Refused(f"{source}: not recorded: it holds no finished performance run")
    root = source.resolve()
    jobs = {Path(p.run_dir).resolve() for p in points}
    runs = [_run(root, run, jobs) for config in study.configs for run in config.runs]
    quality_by_folder = {Path(q.run_dir).resolve(): q for q in quality}
    starts = [r["started"] for r in runs if r["started"]] + [p.when for p in points] + [
        q.when for q in quality]
    return {"type": "sweep" if (source / SWEEP_MANIFEST).is_file() else "results",
            "verdicts": study.verdicts,
            "ran": {"first": min(starts), "last": max(starts), "basis": "LoadGen's starts"},
            "machines": _machines(points), "software": _software(points),
            "store_jobs": _store_jobs(root, points, quality),
            "runs": sorted(runs, key=lambda r: r["id"]),
            "configs": [_config(root, c, quality_by_folder, study) for c in study.configs],
            "without_result": sorted({
                f"{e.model} {e.sut} {e.scenario if e.mode != 'accuracy' else 'accuracy'} "
                f"batch {e.batch_size}: {e.status}: {e.message}".strip()
                for e in study.explained})}


def _stored(source: Path, url: str) -> tuple[list[Any], list[Any]]:
    """The folder's performance and accuracy jobs, recorded into the store at ``url`` (each
    run checked against its LoadGen logs): those under ``source`` only."""
    from quantmark.store.results_store import open_store

    root = source.resolve()
    with open_store(url) as store:
        store.record(source)
        points = [p for p in store.points() if root in Path(p.run_dir).resolve().parents]
        quality = [q for q in store.quality_points()
                   if root in Path(q.run_dir).resolve().parents]
    return points, quality


def _run(root: Path, run: Any, jobs: set[Path]) -> dict[str, Any]:
    """One performance run as LoadGen's logs tell it (the store checked its record agrees:
    ``jobs``, the store's job folders, hold it or its repeat set)."""
    from quantmark.report.intervals import repeat_index

    folder = run.folder.resolve()
    if folder not in jobs and folder.parent not in jobs:
        raise Refused(f"{run.folder}: the results store did not record this run; nothing "
                      "recorded")
    summary, results = run.summary, run.results
    started = results.times.get("loadgen_started_at")
    entry: dict[str, Any] = {
        "id": str(folder.relative_to(root)), "repeat": repeat_index(run),
        "scenario": summary.scenario, "validity": summary.validity,
        "metric_key": summary.metric_key, "metric_name": summary.metric_name,
        "metric_unit": summary.metric_unit, "metric_value": summary.metric_value,
        "samples_per_second": summary.samples_per_second,
        "disturbed": (results.interference or {}).get("disturbed"),
        "disturbed_why": list((results.interference or {}).get("why") or []),
        "started": _utc(started) if isinstance(started, int | float) else None,
        "logs_sha256": {name: file_sha256(run.folder / name)
                        for name in (DETAIL_FILE, SUMMARY_FILE) if (run.folder / name).is_file()}}
    if results.config.get("until_stable") is not None:
        entry["until_stable"] = results.config["until_stable"]
        entry["repeat_of"] = (results.repeat or {}).get("of")
    return entry


def _store_jobs(root: Path, points: list[Any], quality: list[Any]) -> list[dict[str, Any]]:
    """The store's jobs of the folder as it recorded them: each figure (a run's own, a repeat
    set's median with its interval; an accuracy run's in its metric)."""
    jobs = [{"folder": str(Path(p.run_dir).resolve().relative_to(root)),
             "series": p.series.label(), "when": p.when, "figure": p.value, "low": p.low,
             "high": p.high, "runs": list(p.runs), "left_out_runs": list(p.left_out_runs),
             "disturbed": p.disturbed} for p in points]
    jobs += [{"folder": str(Path(q.run_dir).resolve().relative_to(root)),
              "series": f"{q.model} {q.sut} accuracy {q.metric.key}", "when": q.when,
              "figure": q.value} for q in quality]
    return sorted(jobs, key=lambda job: (job["folder"], job["series"]))


def _config(root: Path, config: Any, quality: dict[Path, Any], study: Any) -> dict[str, Any]:
    """One configuration as the report derived it, naming its runs."""
    d = config.derived
    figure, ratio = d["metric_interval"], d["speedup_vs_fp32_ratio"]
    return {
        "system": config.system, "model": config.model, "sut": config.sut,
        "scenario": config.scenario, "batch_size": config.batch_size,
        "executed": d["executed_precision"], "n": d["n"], "validity": d["validity"],
        "disturbed": d["disturbed"], "disturbance_checked": d["disturbance_checked"],
        "throttled": d["throttled"],
        "runs": sorted(str(r.folder.resolve().relative_to(root)) for r in config.runs),
        "figure": None if figure is None else {
            "point": figure.point, "low": figure.low, "high": figure.high, "n": figure.n,
            "method": figure.method, "unit": d["metric_unit"], "name": d["metric_name"]},
        "fp32_baseline": d["fp32_baseline"],
        "speedup_vs_fp32": None if ratio is None else {
            "point": ratio.point, "low": ratio.low, "high": ratio.high,
            "confidence": ratio.confidence, "paired": ratio.paired, "method": ratio.method},
        "quality": _quality(root, config, quality, study),
    }


def _quality(root: Path, config: Any, stored: dict[Path, Any], study: Any
             ) -> dict[str, Any] | None:
    """The configuration's quality figure (its accuracy run, as the store holds it) and the
    report's paired change against its framework's FP32; None without an accuracy run."""
    d = config.derived
    run = study.accuracy.get((config.system, config.model, config.sut))
    if run is None or d["quality"] is None:
        return None
    folder = Path(run["folder"]).resolve()
    point = stored.get(folder)
    if point is None:
        raise Refused(f"{run['folder']}: the store did not record this accuracy run; nothing "
                      "recorded")
    change, agreement = d["quality_change"], d["agreement_interval"]
    return {
        "metric": d["quality_metric"].to_record(), "value": d["quality"],
        "accuracy_run": str(folder.relative_to(root)),
        "change_vs_fp32": d["quality_change_vs_fp32"],
        "change": None if change is None else {
            "delta": change.delta_points, "low": change.low, "high": change.high,
            "verdict": change.verdict, "method": change.method, "text": change.text()},
        "agreement": None if agreement is None else {
            "percent": agreement.percent, "low": agreement.low, "high": agreement.high,
            "n_samples": agreement.n_samples, "n_groups": agreement.n_groups},
    }


def _machines(points: list[Any]) -> dict[str, Any]:
    """Each machine's facts as the store's environment holds them (``machine.*``), by system."""
    found: dict[str, dict[str, Any]] = {}
    for point in points:
        facts = {key.removeprefix("machine."): value
                 for key, value in sorted(point.environment.items())
                 if key.startswith("machine.")}
        found.setdefault(point.machine, {"facts": facts, "basis": "its runs' records"})
    return dict(sorted(found.items()))


def _software(points: list[Any]) -> dict[str, list[str]]:
    """Every distribution's version the runs recorded (two where runs differed)."""
    found: dict[str, set[str]] = {}
    for point in points:
        for key, value in point.environment.items():
            if key.startswith("software."):
                found.setdefault(key.removeprefix("software."), set()).add(str(value))
    return {name: sorted(values) for name, values in sorted(found.items())}


def capture(source: Path, commands: list[str], made_at: str | None = None, note: str = "",
            title: str = "", store_url: str | None = None) -> dict[str, Any]:
    """The recorded result of ``source`` made by ``commands``; Refused where it cannot be."""
    if not commands or not all(c.strip() for c in commands):
        raise UserError("give the command line that made it: --command '...' (a sweep's "
                        f"{SWEEP_MANIFEST} keeps its spec, not the command line)")
    bench = bench_output(source)
    body = capture_bench(bench) if bench else capture_folder(source, store_url)
    return {"kind": KIND, "schema": SCHEMA, "title": title, "source": str(source),
            "commands": [c.strip() for c in commands], "commit": commit(made_at, note), **body}
