"""``run.py compare A B [--paired]``: how many times faster B is than A, with its 95% interval.

The figures are LoadGen's, from each run's logs: a run whose results.json says otherwise, or a
copy of another run, is flagged in one line and compare exits 1 (the verdict, made of LoadGen's
figures, is still printed). The comparison's statistics (scipy) are imported when it runs: the
lean install lacks them. The job is ``quantmark.run.comparison``; ``run.py compare`` and
``quantmark.compare()`` both answer through ``quantmark.api``."""

from __future__ import annotations

import argparse

from quantmark.report import console_tables as tables

NAME = "compare"
HELP = "how many times faster B is than A, with its 95% interval"
DESCRIPTION = ("How many times faster B is than A, with its 95% interval: 'no measurable "
               "difference' when the interval holds 1.0.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="results folder, run folder or sweep cell "
                                  "(SWEEP/runs/<model>/<sut>/<scenario>-b<batch>)")
    parser.add_argument("b", help="the same, for the other side")
    parser.add_argument("--paired", action="store_true",
                        help="the runs were made side by side, interleaved (A1 B1 A2 B2 ...): "
                             "pair them by repeat so drift cancels")

