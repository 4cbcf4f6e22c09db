"""Run one sweep cell: its LoadGen test in a child process, turned into the manifest's entry.

Shared by the local sweep (``quantmark.sweep.driver``) and a fleet node
(``quantmark.sweep.fleet.task``), so a cell measured on a Ray node is measured exactly as one
measured here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.run.launch import launch
from quantmark.run.trackers import Tracker
from quantmark.sweep.plan import Cell, SweepSpec

LOG_TAIL_CHARS = 400


def cell_dir(root: Path, cell: Cell) -> Path:
    return root / "runs" / cell.id


def cell_log(root: Path, cell: Cell) -> Path:
    return root / "logs" / f"{cell.id}.log"


def cell_availability(cell: Cell) -> tuple[bool, str]:
    """(can the cell run here, why not): its SUT's availability, or for an ensemble every
    member's, each blocker naming its member."""
    from quantmark.sut.ensemble.members import parse_members
    from quantmark.sut.registry import SUTS, availability

    if not cell.ensemble:
        info = SUTS.get(cell.sut)
        return availability(info) if info else (False, f"no SUT {cell.sut} here")
    reasons = []
    for member in parse_members(cell.ensemble):
        ok, reason = availability(SUTS[member.sut])
        if not ok:
            reasons.append(f"{member.model}@{member.sut}: {reason}")
    return not reasons, "; ".join(reasons)


# RunConfig fields a sweep never sets, and why: a cell is one plain LoadGen test, so no
# compliance audit, no repeat set of its own (a sweep's repeats go round the whole sweep, each
# its own cell), no rerun, the layout's own system id, and an ensemble that averages
# (quantmark.sweep.plan names its SUT with "mean"); and the task, which each cell's run reads
# from its model (run.py's --task only confirms it)
NOT_SWEPT = ("audit", "repeat", "repeats", "repeat_set", "until_stable", "rerun", "system_id",
             "ensemble_combine", "task")


def cell_config(root: Path, spec: SweepSpec, cell: Cell) -> RunConfig:
    """The cell's run: the RunConfig a single run of these settings is, built here once for
    the local sweep and a fleet node alike: the spec's run-wide settings, the cell's test,
    its input size (or sequence length) and dataset, and its variant's SUT options."""
    return RunConfig(
        scenario=cell.scenario, sut=cell.sut, model=cell.model, mode=cell.mode,
        quick=not spec.official, model_path=spec.model_path, input_size=cell.input_size,
        num_classes=spec.num_classes, preprocess=dict(spec.preprocess),
        seq_len=cell.seq_len, padding=spec.padding, tokenizer=spec.tokenizer,
        dataset_path=cell.dataset or spec.dataset_path, labels=spec.labels,
        calibration_list=spec.calibration_list, user_conf=spec.user_conf,
        output=str(cell_dir(root, cell)), batch_size=cell.batch_size, threads=spec.threads,
        workers=spec.workers, quick_duration_ms=int(spec.seconds * 1000),
        sut_options=dict(cell.sut_options), ensemble=cell.ensemble,
        ensemble_mode=cell.ensemble_mode)


def run_cell(root: Path, spec: SweepSpec, cell: Cell) -> dict[str, Any]:
    """Run ``cell`` with its results tree under ``root``; return its manifest entry (status,
    wall time, peak RSS, log, and for a finished run its folder, trackers and disturbance)."""
    log = cell_log(root, cell)
    started = time.time()
    with Tracker() as tracker:
        result = launch(cell_config(root, spec, cell), timeout_s=spec.timeout, log_path=log)
    entry: dict[str, Any] = {**cell.to_dict(), "status": result.status,
                             "message": "",
                             "wall_s": round(time.time() - started, 2),
                             "peak_rss_mb": (round(result.peak_rss_mb, 1)
                                             if result.peak_rss_mb else None),
                             "log": str(log.relative_to(root))}
    if result.status == "ok" and result.run_dir:
        times = result.results.get("times", {})
        summary = result.results.get("summary", {})
        entry["run_dir"] = str(Path(result.run_dir).resolve().relative_to(root.resolve()))
        entry["trackers"] = tracker.report(times.get("loadgen_started_at"),
                                           times.get("loadgen_ended_at"),
                                           summary.get("samples_per_second"))
        interference = result.results.get("interference") or {}
        entry["disturbed"] = interference.get("disturbed")
        entry["disturbed_why"] = interference.get("why") or []
    else:
        entry["message"] = result.message or log_tail(log)
    return entry


def log_tail(log: Path) -> str:
    """The last line of a failed cell's output that says something, for the explained row."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
                 if line.strip()]
    except OSError:
        return ""
    return lines[-1][-LOG_TAIL_CHARS:] if lines else ""
