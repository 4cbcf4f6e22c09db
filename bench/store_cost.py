"""What recording one run into the results store costs, in ms, on SQLite and on PostgreSQL.

Two figures per store, each the median over ``--records`` runs with its 95% interval
(``quantmark.report.stats``):

- ``open_and_record``: what a run pays (``quantmark.store.recording.record`` in a process
  that has not opened the store yet): open it (engine, connection, schema check), record one
  run folder in its transaction, close. SQLAlchemy's import is paid once per process and
  reported apart (``import_ms``).
- ``record``: one more run into a store already open (a sweep, cell after cell).

The runs are copies of one real ``results.json`` (``--record``; default: a SingleStream run of
docs/example-sweep), each made distinct by a nonce so none is "already there".

    python -m quantmark.bench.store_cost [--records 50] [--store URL ...] [--output FILE]

Without ``--store`` a fresh SQLite file in a temp folder is measured; give a PostgreSQL URL
(an empty database) to measure that too. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json

log = logging.getLogger("quantmark.bench.store_cost")
EXAMPLE = ("docs/example-sweep/runs/resnet50/ov-bf16/SingleStream-b1-r1/vm-ov-bf16/resnet50/"
           "SingleStream/performance/run_1/results.json")


def copies(record: Path, folder: Path, count: int) -> list[Path]:
    """``count`` run folders, each a copy of ``record`` that differs by a nonce, beside its
    LoadGen logs (the store checks the record's figures against them)."""
    data = json.loads(record.read_text())
    nonce = uuid.uuid4().hex
    made = []
    for index in range(count):
        run = folder / f"run-{index}"
        run.mkdir(parents=True)
        data["bench_nonce"] = f"{nonce}-{index}"
        (run / "results.json").write_text(json.dumps(data))
        for name in ("mlperf_log_detail.txt", "mlperf_log_summary.txt"):
            shutil.copyfile(record.parent / name, run / name)
        made.append(run)
    return made


def summary_ms(seconds: list[float]) -> dict[str, Any]:
    """The median in ms with its 95% interval."""
    from quantmark.report.stats import figure_interval

    found = figure_interval([s * 1000 for s in seconds])
    return {"median": round(found.point, 3), "low": round(found.low, 3),
            "high": round(found.high, 3), "n": found.n, "method": found.method}


def measure(url: str, runs: list[Path]) -> dict[str, Any]:
    """Open-and-record on the first half of ``runs``, record into an open store on the rest."""
    from quantmark.store.results_store import open_store

    half = len(runs) // 2
    cold, warm = [], []
    with open_store(url) as store:  # creates the schema: not a run's cost
        where, schema = store.where, store.schema
    for run in runs[:half]:
        started = time.perf_counter()
        with open_store(url) as store:
            added = store.record(run)
        cold.append(time.perf_counter() - started)
        assert added == 1, f"{run} was not recorded as a new job"
    with open_store(url) as store:
        for run in runs[half:]:
            started = time.perf_counter()
            added = store.record(run)
            warm.append(time.perf_counter() - started)
            assert added == 1, f"{run} was not recorded as a new job"
        jobs = sum(store.counts()["jobs"].values())
    return {"store": where, "schema": schema, "jobs_in_store": jobs,
            "open_and_record_ms": summary_ms(cold), "record_ms": summary_ms(warm)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.store_cost")
    parser.add_argument("--records", type=int, default=50,
                        help="runs per figure (each store gets twice as many)")
    parser.add_argument("--store", action="append", default=[], metavar="URL",
                        help="a store to measure besides a fresh SQLite file (repeatable)")
    parser.add_argument("--record", type=Path, default=Path(EXAMPLE),
                        help="the results.json the runs are copies of")
    parser.add_argument("--output", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    logs.setup()
    started = time.perf_counter()
    import sqlalchemy  # noqa: F401 - what a process pays once, before its first record

    import_ms = round((time.perf_counter() - started) * 1000, 1)
    results: dict[str, Any] = {"import_ms": import_ms, "records": args.records, "stores": []}
    with tempfile.TemporaryDirectory(prefix="quantmark-store-cost-") as tmp:
        urls = [f"sqlite:///{tmp}/results.sqlite", *args.store]
        for number, url in enumerate(urls):
            runs = copies(args.record, Path(tmp) / f"runs-{number}", 2 * args.records)
            found = measure(url, runs)
            log.info("%s: %s", found["store"], found)
            results["stores"].append(found)
    if args.output:
        atomic_write_json(args.output, results)
    print(json.dumps(results, indent=1))  # noqa: T201 - the bench's report is its output
    return 0


if __name__ == "__main__":
    sys.exit(main())
