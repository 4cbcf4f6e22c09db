"""``run.py regress [--model M] [--sut S] [--scenario S] [--machine M] [--baseline TAG|DATE|
VERSION] [--fdr Q] [--assume-drift] [--store URL] [--json FILE]``: the newest job of each
series in the results store against its history, regressions first, each with what changed.
Exit 1 when a series regressed, so a CI job can gate on it. With fewer than three earlier
clean jobs a series reads "too little history" (exit 0) unless its change is beyond any
plausible drift (``quantmark.store.regress_history``); ``--assume-drift`` judges it on the
stated between-job assumption instead.

The statistics (scipy) and the store (SQLAlchemy) are imported when it runs: the lean install
lacks them and must still start every other verb."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from rich.markup import escape

from quantmark.commands import options
from quantmark.ground.errors import UserError
from quantmark.report import console_tables as tables

NAME = "regress"
HELP = "the newest result of each stored series against its history: regressed or not"
DESCRIPTION = ("The newest job of each series in the results store against its history (or "
               "--baseline), tested against the machine's measured noise with the false "
               "discovery rate controlled across series; each change with what changed in the "
               "environment. Exit 1 when any series regressed.")
STYLES = {"regressed": "bold red", "improved": "green", "cannot judge": "yellow",
          "too little history": "yellow", "no measurable change": ""}

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.series_filters(parser)
    parser.add_argument("--baseline", metavar="TAG|DATE|VERSION",
                        help="compare with the jobs carrying this tag, made before this date "
                             "(YYYY-MM-DD) or measured by this quantmark version (default: "
                             "every earlier job); tag:, date: or version: says which")
    parser.add_argument("--fdr", type=float, default=0.05, metavar="Q",
                        help="false discovery rate across series (default 0.05): on "
                             "identical jobs, any false alarm at most this often")
    parser.add_argument("--assume-drift", action="store_true",
                        help="with one or two earlier jobs, judge against the assumed "
                             "between-job spread (3x the runs') and exit 1 on a regression "
                             "found that way; without it such a series reads 'too little "
                             "history' unless it changed beyond 2x")
    options.store(parser)
    parser.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON here")


def open_store(url: str | None) -> Any:
    """The results store (``quantmark.store.results_store``; imported here: SQLAlchemy)."""
    from quantmark.store.results_store import open_store as open_results_store

    return open_results_store(url)


def _filters(args: argparse.Namespace) -> dict[str, str]:
    return {name: getattr(args, name) for name in ("model", "sut", "scenario", "machine")
            if getattr(args, name)}


def judge(args: argparse.Namespace) -> list[Any]:
    """Read the store and judge the series the filters select. Every series of the machine is
    read, selected or not: the ones not shown still lend the machine's noise."""
    from quantmark.store.regress_baseline import parse_baseline
    from quantmark.store.verdicts import regress

    if not 0 < args.fdr < 1:
        raise UserError(f"--fdr {args.fdr}: give a rate between 0 and 1, e.g. 0.05")
    with open_store(args.store) as store:
        points = store.points(machine=args.machine)
        where = getattr(store, "url", None) or args.store or "the default store"
    wanted = {k: v for k, v in _filters(args).items() if k != "machine"}

    def selected(series: Any) -> bool:
        return all(getattr(series, name) == value for name, value in wanted.items())

    if not any(selected(p.series) for p in points):
        said = ", ".join(f"--{k} {v}" for k, v in _filters(args).items())
        what = f"no results in {where} match {said}" if said else \
            f"the results store {where} holds no results"
        raise UserError(f"{what}; record runs (python run.py) or load results folders "
                        "(run.py store import DIR)" + (", or widen the filters" if said else ""))
    return regress(points, parse_baseline(args.baseline, points), args.fdr, selected,
                   assume_drift=args.assume_drift)


def show(verdicts: Sequence[Any], fdr: float) -> None:
    """One line per series, regressions first, each change's environment diff under it."""
    from quantmark.store.changes import changes_text

    for verdict in verdicts:
        style = STYLES.get(verdict.outcome, "")
        line = escape(verdict.text())
        console.print(f"[{style}]{line}[/]" if style else line, soft_wrap=True)
        if verdict.outcome in ("regressed", "improved"):
            console.print("    " + escape(changes_text(verdict.changes)), soft_wrap=True)
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[verdict.outcome] = counts.get(verdict.outcome, 0) + 1
    said = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    console.print(f"{len(verdicts)} series: {said} (false discovery rate {fdr:g} across "
                  "series, Benjamini-Hochberg)")


def write_json(path: str, verdicts: Sequence[Any], args: argparse.Namespace) -> None:
    """The verdicts as JSON, written atomically."""
    from quantmark.ground.hashing import atomic_write_json

    atomic_write_json(path, {"kind": "regress", "schema": 1, "fdr": args.fdr,
                             "baseline": args.baseline, "filters": _filters(args),
                             "assume_drift": args.assume_drift,
                             "verdicts": [v.to_dict() for v in verdicts]})
    console.print(f"verdicts written to {escape(path)}")
