"""What load moves a reported figure by more than its interval? The disturbed flag's calibration.

For each duty level d, one hog process per core is busy d of every 100 ms and idle the rest,
while ``run.py --repeats N`` measures ``ort-fp32`` SingleStream on the default model. Levels run
in turn, quiet first and last (drift of the machine shows as a gap between the two quiet sets).
For each level the table gives what the monitor saw (other processes' share of the machine,
median over the runs), the p90 latency's median and interval, its shift from the first quiet
set, whether that shift is wider than the quiet interval's half-width, and how many runs the
flag called disturbed. A threshold is right when every level whose shift exceeds the interval
is flagged and the quiet sets are not.

    python -m quantmark.bench.disturbed_thresholds --output DIR [--duties 0.01,0.02,0.05]

Run it on an otherwise idle machine: every other process is interference.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from quantmark.bench.noise import run_py
from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json
from quantmark.run.comparison import load_side

log = logging.getLogger("quantmark.bench.disturbed_thresholds")
PERIOD_S = 0.1


def _duty_hog(stop: Any, duty: float) -> None:
    """Busy ``duty`` of every PERIOD_S, asleep the rest."""
    while not stop.is_set():
        started = time.monotonic()
        while time.monotonic() - started < duty * PERIOD_S:
            sum(range(1000))
        time.sleep(max(0.0, PERIOD_S - (time.monotonic() - started)))


def measure(out: Path, duty: float, repeats: int) -> dict[str, Any]:
    """One repeat set beside hogs at ``duty`` (none at 0)."""
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_duty_hog, args=(stop, duty), daemon=True)
            for _ in range(os.cpu_count() or 1)] if duty > 0 else []
    for hog in hogs:
        hog.start()
    try:
        run_py("--scenario", "SingleStream", "--sut", "ort-fp32", "--repeats", str(repeats),
               "--output", str(out))
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    side = load_side(str(out))
    interval = side.interval()
    shares = [(r.interference or {}).get("other_cpu_share") for r in side.records]
    return {"duty": duty, "p90_ms": [v / 1e6 for v in side.values],
            "median_ms": interval.point / 1e6,
            "half_width": (interval.high - interval.low) / 2 / interval.point
            if interval.low is not None else None,
            "other_share": statistics.median(s for s in shares if s is not None)
            if any(s is not None for s in shares) else None,
            "disturbed": len(side.disturbed()), "runs": len(side.values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.disturbed_thresholds")
    parser.add_argument("--output", required=True)
    parser.add_argument("--duties", default="0.01,0.02,0.05")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    logs.setup()
    out = Path(args.output)
    duties = [0.0, *(float(d) for d in args.duties.split(",")), 0.0]
    levels = [measure(out / f"{i}-duty-{d:g}", d, args.repeats) for i, d in enumerate(duties)]
    quiet = levels[0]
    for level in levels:
        level["shift"] = level["median_ms"] / quiet["median_ms"] - 1
        level["beyond_interval"] = (quiet["half_width"] is not None
                                    and abs(level["shift"]) > quiet["half_width"])
        log.info("duty %.2f: other %s, p90 %.3f ms (%+.1f%%), beyond the quiet interval: %s, "
                 "disturbed %d of %d", level["duty"], level["other_share"],
                 level["median_ms"], 100 * level["shift"], level["beyond_interval"],
                 level["disturbed"], level["runs"])
    atomic_write_json(out / "disturbed_thresholds.json", {"levels": levels})
    print(json.dumps(levels, indent=1))  # noqa: T201 - the bench's report is its output
    return 0


if __name__ == "__main__":
    sys.exit(main())
