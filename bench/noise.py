"""Do quantmark's intervals hold? Three experiments, run through run.py as a user runs it.

1. ``calibration``: the default job ``--tries`` times; each gives an ``ort-int8 / ort-fp32``
   Offline interval. Then a long interleaved measurement of the same ratio (a sweep, Offline
   batch 8, ``--long-seconds`` per run, ``--long-pairs`` interleaved pairs). Counts how many of
   the default job's intervals hold the long ratio.
2. ``null``: ``ort-fp32`` against itself, ``--tries`` times: three interleaved quick runs a side
   (A B A B A B), then ``run.py compare``. Counts "no measurable difference".
3. ``disturbed``: ``--repeats 3`` of ``ort-fp32`` Offline on the quiet machine, then the same
   with a CPU hog (a busy process per core) beside it. Reports the disturbed flags and both
   intervals' widths.

    python -m quantmark.bench.noise {calibration,null,disturbed} --output DIR [--tries 5]

Run it on an otherwise idle machine: every other process is interference.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json
from quantmark.run.comparison import compare, load_side

log = logging.getLogger("quantmark.bench.noise")
MODEL = "efficientnet-lite0"


def run_py(*args: str) -> None:
    """``run.py ARGS`` in a child, as a user runs run.py; its output is kept
    out of this report."""
    command = [sys.executable, "-c", "import sys; from quantmark.cli import main; "
               "sys.exit(main(sys.argv[1:]))", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")


def _perf(root: Path, sut: str, scenario: str = "Offline") -> str:
    return str(next(root.glob(f"*-{sut}/{MODEL}/{scenario}")))


def _ratio(a: str, b: str, paired: bool) -> dict[str, Any]:
    side_a, side_b, ratio = compare(a, b, paired)
    return {"point": ratio.point, "low": ratio.low, "high": ratio.high, "verdict": ratio.verdict,
            "method": ratio.method, "a": side_a.values, "b": side_b.values,
            "disturbed": len(side_a.disturbed()) + len(side_b.disturbed())}


def calibration(out: Path, tries: int, long_seconds: float, long_pairs: int) -> dict[str, Any]:
    jobs = []
    for t in range(1, tries + 1):
        folder = out / f"default-{t}"
        started = time.monotonic()
        run_py("--output", str(folder))
        job = _ratio(_perf(folder, "ort-fp32"), _perf(folder, "ort-int8"), paired=True)
        job["wall_s"] = round(time.monotonic() - started, 1)
        jobs.append(job)
        log.info("default job %d: %s", t, job)
    sweep = out / "long"
    run_py("sweep", "--models", MODEL, "--suts", "ort-fp32,ort-int8", "--scenarios", "Offline",
           "--batch-sizes", "8", "--repeats", str(long_pairs), "--seconds", str(long_seconds),
           "--no-accuracy", "--output", str(sweep))
    cells = sweep / "runs" / MODEL
    long = _ratio(str(cells / "ort-fp32" / "Offline-b8"), str(cells / "ort-int8" / "Offline-b8"),
                  paired=True)
    hits = sum(j["low"] <= long["point"] <= j["high"] for j in jobs)
    return {"jobs": jobs, "long": long, "held": hits, "tries": tries}


def null(out: Path, tries: int) -> dict[str, Any]:
    results = []
    for t in range(1, tries + 1):
        for repeat in (1, 2, 3):
            for side in ("a", "b"):
                run_py("--scenario", "Offline", "--sut", "ort-fp32", "--batch-size", "8",
                       "--output", str(out / f"null-{t}" / side / f"r{repeat}"))
        result = _ratio(str(out / f"null-{t}" / "a"), str(out / f"null-{t}" / "b"), paired=True)
        results.append(result)
        log.info("null %d: %s", t, result)
    same = sum(r["verdict"] == "no measurable difference" for r in results)
    return {"tries": results, "no_difference": same}


def _hog(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def disturbed(out: Path) -> dict[str, Any]:
    args = ("--scenario", "Offline", "--sut", "ort-fp32", "--batch-size", "8", "--repeats", "3")
    run_py(*args, "--output", str(out / "quiet"))
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True)
            for _ in range(os.cpu_count() or 1)]
    for hog in hogs:
        hog.start()
    try:
        run_py(*args, "--output", str(out / "hogged"))
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    report = {}
    for name in ("quiet", "hogged"):
        side = load_side(str(out / name))
        interval = side.interval()
        report[name] = {"values": side.values, "median": interval.point, "low": interval.low,
                        "high": interval.high, "relative_width": (interval.high - interval.low)
                        / interval.point, "disturbed": len(side.disturbed()),
                        "why": [r["interference"].get("why") for r in side.records]}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.noise")
    parser.add_argument("experiment", choices=("calibration", "null", "disturbed"))
    parser.add_argument("--output", required=True)
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--long-seconds", type=float, default=60.0)
    parser.add_argument("--long-pairs", type=int, default=3)
    args = parser.parse_args(argv)
    logs.setup()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    if args.experiment == "calibration":
        result = calibration(out, args.tries, args.long_seconds, args.long_pairs)
    elif args.experiment == "null":
        result = null(out, args.tries)
    else:
        result = disturbed(out)
    atomic_write_json(out / f"{args.experiment}.json", result)
    print(json.dumps(result, indent=1))  # noqa: T201 - the bench's report is its output
    return 0


if __name__ == "__main__":
    sys.exit(main())
