"""``run.py submission --results DIR ...``: finished official runs as an MLPerf submission
tree, and what the submitter must still fill in."""

from __future__ import annotations

import argparse

from rich.markup import escape

from quantmark.commands import options
from quantmark.report import console_tables as tables
from quantmark.submission.package import package

NAME = "submission"
HELP = "package finished official runs as an MLPerf submission tree"
DESCRIPTION = "Package finished official runs as an MLPerf submission tree."

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, help="the --output folder of your runs")
    parser.add_argument("--submitter", required=True, help="organisation name")
    parser.add_argument("--division", required=True, choices=("open", "closed"))
    options.output(parser, required=True, help="new folder for the submission tree")
    parser.add_argument("--system-file", help="JSON with system fields the machine cannot tell "
                                              "(cooling, memory configuration, ...)")
    parser.add_argument("--status", default="available", help="available, preview or rdi")
    parser.add_argument("--system-type", default="edge", help="edge, datacenter or both")


def main(args: argparse.Namespace) -> int:
    """Check the runs and write the submission tree; list what the submitter must still fill."""
    packaged = package(args.results, submitter=args.submitter, division=args.division,
                       output=args.output, system_file=args.system_file, status=args.status,
                       system_type=args.system_type)
    for name in packaged.scenarios:
        console.print(f"packaged {escape(name)}")
    for system, fields in packaged.systems.items():
        if fields:
            console.print(f"[yellow]systems/{escape(system)}.json: fill in {', '.join(fields)} "
                          "(pass --system-file FILE with them)[/]")
    console.print(f"submission tree written to {escape(str(packaged.root))}")
    return 0
