"""``run.py compare A B [--paired]``: how many times faster B is than A, with its 95% interval.

The figures are LoadGen's, from each run's logs: a run whose results.json says otherwise, or a
copy of another run, is flagged in one line and compare exits 1 (the verdict, made of LoadGen's
figures, is still printed). The comparison's statistics (scipy) are imported when it runs: the
lean install lacks them."""

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


def main(args: argparse.Namespace) -> int:
    return 1 if compare(args.a, args.b, args.paired) else 0


def compare(a: str, b: str, paired: bool = False) -> int:
    """Print the ratio of two sets of repeated runs with its interval and verdict; the number
    of runs flagged (not what LoadGen measured)."""
    from quantmark.run import comparison  # scipy: see the module's docstring

    side_a, side_b, ratio = comparison.compare(a, b, paired)
    comparison.show(console, side_a, side_b, ratio)
    return len(side_a.flagged) + len(side_b.flagged)
