"""``run.py store import DIR [DIR ...]`` and ``run.py store info``: fill the results store from
folders already on disk, and say what it holds.

Import is idempotent: a record file already in the store (same bytes) adds nothing, so
running it twice says "0 jobs recorded (0 records), N already there" the second time. Every
folder is checked before anything is recorded: a typo in the last one records nothing. A run
whose results.json disagrees with LoadGen's logs beside it, or that would join a repeat set the
store holds with other content, is refused in one line naming what differs (exit 1); a run that
joins a job recorded before is counted as such. SQLAlchemy is imported when a sub-verb runs."""

from __future__ import annotations

import argparse
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from quantmark.commands import options
from quantmark.report import console_tables as tables

if TYPE_CHECKING:
    from quantmark.store.results_store import Store

NAME = "store"
HELP = "the results store: import results folders and sweeps, or say what it holds"
DESCRIPTION = ("The results store every run, repeat set, sweep cell, diagnosis, profile and "
               "recommendation is recorded into: 'import' records folders already on disk "
               "(idempotent), 'info' says where the store is and what it holds.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="{import,info}")
    imports = actions.add_parser("import", help="record every result under DIR (idempotent)",
                                 description="Record every run, repeat set, sweep cell, "
                                             "diagnosis, profile and recommendation under the "
                                             "folders into the store; one already there is "
                                             "not added again.")
    imports.add_argument("folders", nargs="+", metavar="DIR",
                         help="a results folder, a run folder or a sweep folder")
    imports.add_argument("--tag", action="append", default=[], metavar="TAG",
                         help="tag the jobs (new and already there), e.g. a baseline for "
                              "run.py regress --baseline (repeatable)")
    options.store(imports)
    info = actions.add_parser("info", help="where the store is, its schema and what it holds")
    options.store(info)


def main(args: argparse.Namespace) -> int:
    from quantmark.store.record_walk import record_files
    from quantmark.store.results_store import open_store

    if args.action == "import":  # every folder checked before the store is opened
        files = [found for folder in args.folders for found in record_files(Path(folder))]
        with open_store(args.store) as store:
            return import_files(store, files, tuple(args.tag))
    with open_store(args.store) as store:
        show_info(store)
    return 0


def import_files(store: Store, files: list[tuple[Path, str | None]],
                 tags: tuple[str, ...] = ()) -> int:
    """Record every record file (with its sweep cell id); 1 when a record was left out
    (unreadable) or refused (not what LoadGen's logs say, or a changed copy of a stored set),
    each named in one line, else 0."""
    from quantmark.ground.records import UnreadableRecord
    from quantmark.report.logged_run import LogMismatch
    from quantmark.store.job_conflicts import StoreConflict

    outcomes: Counter[str] = Counter()
    for path, cell in files:
        try:
            outcomes[store.record_file(path, tags, cell)] += 1
        except UnreadableRecord as exc:
            console.print(f"[yellow]left out: {escape(str(exc))}[/]", soft_wrap=True)
            outcomes["unreadable"] += 1
        except (LogMismatch, StoreConflict) as exc:
            console.print(f"[bold red]refused: {escape(str(exc))}[/]", soft_wrap=True)
            outcomes["refused"] += 1
    console.print(f"{counts_line(outcomes)} in {escape(store.where)}", soft_wrap=True)
    return 1 if outcomes["unreadable"] or outcomes["refused"] else 0


def counts_line(outcomes: Counter[str]) -> str:
    """What an import did, every count true: new jobs with their records, runs that joined
    jobs recorded before, records already there, and those left out or refused."""
    jobs, joined = outcomes["new job"], outcomes["joined"]
    line = (f"{jobs} {'job' if jobs == 1 else 'jobs'} recorded "
            f"({jobs + outcomes['added']} records)")
    if joined:
        line += f", {joined} {'run' if joined == 1 else 'runs'} added to jobs recorded before"
    line += f", {outcomes['there']} already there"
    if outcomes["unreadable"]:
        line += f", {outcomes['unreadable']} unreadable (left out)"
    if outcomes["refused"]:
        line += f", {outcomes['refused']} refused"
    return line


def _date(epoch_s: float | None) -> str:
    if epoch_s is None:
        return "-"
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def show_info(store: Store) -> None:
    """Where the store is, its schema and its counts."""
    counts = store.counts()
    kinds = ", ".join(f"{n} {kind}" for kind, n in counts["jobs"].items()) or "none"
    console.print(f"store: {escape(store.where)}\n"
                  f"schema: {store.schema}\n"
                  f"jobs: {sum(counts['jobs'].values())} ({escape(kinds)})\n"
                  f"records: {counts['records']}\nseries: {counts['series']}\n"
                  f"from {_date(counts['first'])} to {_date(counts['last'])}", soft_wrap=True)
