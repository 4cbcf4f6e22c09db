"""What running a sweep's cells as Ray tasks costs, and whether Ray disturbs the measurement.

Rounds alternate a local sweep and the same sweep on a one-node Ray cluster on this machine
(``run.py node --head``), every cell the same quick test. From each sweep's manifest:

- ``gap_s``: the driver's time per cell, between one cell's end and the next one's (the first
  cell, which pays the connection, is left out); ``overhead_s``: that gap minus the cell's own
  wall time (the test process, from its start to its exit). The cluster's extra per cell is
  the dispatch cost: Ray's scheduling, the node's archive of the results tree, the unpacking;
- ``first_cell_s``: from the sweep command's start to its first cell's end (the connection);
- ``other_cpu_share``: what other processes took during each cell's LoadGen window (the
  interference monitor's figure; Ray's own daemons count as other processes).

With ``--sharing-rounds N`` it also measures why every cell takes its node's one slot: the same
timed cell alone and beside an accuracy run, interleaved, on this machine.

    python -m quantmark.bench.fleet_dispatch [--rounds 4] [--cells 4] --output FILE

Run it alone: it times on every core.
"""

from __future__ import annotations

import argparse
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json
from quantmark.ground.records import RESULTS, load_manifest, load_run
from quantmark.report.stats import figure_interval

log = logging.getLogger("quantmark.bench.fleet_dispatch")
RUN_PY = Path(__file__).resolve().parents[1] / "run.py"
CELL = ("--models", "mobilenetv2", "--suts", "ort-fp32", "--scenarios", "Offline",
        "--no-accuracy", "--seconds", "2")


def _sweep(output: Path, cells: int, cluster: str | None) -> dict[str, Any]:
    """One sweep of ``cells`` repeats of the quick cell; its per-cell figures."""
    command = [sys.executable, str(RUN_PY), "sweep", *CELL, "--repeats", str(cells),
               "--output", str(output)] + (["--cluster", cluster] if cluster else [])
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed: {proc.stderr[-2000:]}")
    manifest = load_manifest(output)
    entries = sorted(manifest.cells.values() if manifest else [], key=lambda e: e["finished_at"])
    gaps = [b["finished_at"] - a["finished_at"] for a, b in pairwise(entries)]
    shares = []
    for entry in entries:
        results = load_run(output / entry["run_dir"] / RESULTS)  # with its interference
        shares.append((results.interference or {}).get("other_cpu_share"))
    overheads = [g - e["wall_s"] for g, e in zip(gaps, entries[1:], strict=True)]
    return {"gap_s": statistics.mean(gaps) if gaps else None,
            "overhead_s": statistics.mean(overheads) if overheads else None,
            "first_cell_s": entries[0]["finished_at"] - started,
            "other_cpu_share": statistics.mean(s for s in shares if s is not None),
            "disturbed": sum(bool(e.get("disturbed")) for e in entries), "cells": len(entries)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def dispatch_rounds(rounds: int, cells: int, work: Path) -> dict[str, Any]:
    """Local and cluster sweeps, alternated; each figure's median with its 95% interval."""
    port = _free_port()
    subprocess.run([sys.executable, str(RUN_PY), "node", "--head", "--port", str(port), "--",
                    "--include-dashboard=false"], check=True, capture_output=True, timeout=300)
    found: dict[str, list[dict[str, Any]]] = {"local": [], "cluster": []}
    try:
        for number in range(rounds):
            order = ("local", "cluster") if number % 2 == 0 else ("cluster", "local")
            for kind in order:
                cluster = f"127.0.0.1:{port}" if kind == "cluster" else None
                found[kind].append(_sweep(work / f"{kind}-{number}", cells, cluster))
                log.info("round %d %s: %s", number + 1, kind, found[kind][-1])
    finally:
        subprocess.run([str(Path(sys.executable).with_name("ray")), "stop", "--force"],
                       capture_output=True, timeout=120)
    summary: dict[str, Any] = {"rounds": found}
    for key in ("gap_s", "overhead_s", "first_cell_s", "other_cpu_share"):
        for kind in found:
            summary[f"{kind}_{key}"] = vars(figure_interval([r[key] for r in found[kind]]))
        summary[f"extra_{key}"] = vars(figure_interval(
            [c[key] - loc[key] for c, loc in zip(found["cluster"], found["local"], strict=True)]))
    return summary


def _timed_cell(output: Path, beside: list[str] | None) -> dict[str, Any]:
    """One timed cell, alone or with ``beside`` (another test) running at the same time."""
    other = subprocess.Popen(beside, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) \
        if beside else None
    try:
        figures = _sweep(output, 1, None)
        results = load_run(next(output.rglob(RESULTS)))
        figures["samples_per_s"] = results.summary["samples_per_second"]
        return figures
    finally:
        if other is not None:
            other.wait(timeout=1800)


def sharing_rounds(rounds: int, work: Path) -> dict[str, Any]:
    """A timed ort-fp32 cell alone against the same cell beside an OpenVINO accuracy run."""
    accuracy = [sys.executable, str(RUN_PY), "--scenario", "Offline", "--sut", "ov-fp32",
                "--model", "mobilenetv2", "--mode", "accuracy", "--output",
                str(work / "beside")]
    found: dict[str, list[dict[str, Any]]] = {"alone": [], "beside_accuracy": []}
    for number in range(rounds):
        order = ("alone", "beside_accuracy") if number % 2 == 0 else ("beside_accuracy", "alone")
        for kind in order:
            beside = accuracy if kind == "beside_accuracy" else None
            found[kind].append(_timed_cell(work / f"share-{kind}-{number}", beside))
            log.info("sharing round %d %s: %s", number + 1, kind, found[kind][-1])
    ratios = [b["samples_per_s"] / a["samples_per_s"]
              for a, b in zip(found["alone"], found["beside_accuracy"], strict=True)]
    return {"rounds": found, "throughput_ratio": vars(figure_interval(ratios))}


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.fleet_dispatch")
    parser.add_argument("--rounds", type=int, default=4, help="local/cluster sweep pairs")
    parser.add_argument("--cells", type=int, default=4, help="cells per sweep")
    parser.add_argument("--sharing-rounds", type=int, default=0,
                        help="timed cell alone / beside an accuracy run pairs (0: skip)")
    parser.add_argument("--output", required=True, help="JSON file for the figures")
    args = parser.parse_args(argv)
    found: dict[str, Any] = {"command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="quantmark-fleet-bench-") as tmp:
        if args.rounds:
            found["dispatch"] = dispatch_rounds(args.rounds, args.cells, Path(tmp))
            atomic_write_json(Path(args.output), found)  # kept if the next part fails
        if args.sharing_rounds:
            found["sharing"] = sharing_rounds(args.sharing_rounds, Path(tmp))
    atomic_write_json(Path(args.output), found)
    log.info("written to %s", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
