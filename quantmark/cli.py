"""quantmark's command line: argv -> the verb's own flags -> that verb's ``main``.

``run.py`` at the top of the repository and the ``quantmark`` console script both call ``main``.
Each verb is one module of ``quantmark.commands`` (found, not listed: see that package), which
declares its flags and acts; this module only picks the verb and turns what goes wrong into one
line and an exit code. ``run`` is the verb when none is named, so these all work::

    python run.py                                   # the built-in default job
    python run.py --scenario Offline --sut ort-int8 [--model resnet50] ...
    python run.py --official --all-tests --scenario Offline --sut ort-int8 --model resnet50
    python run.py --audit TEST01 --scenario Offline --sut ort-int8   # one compliance test
    python run.py --scenario Offline --sut ort-int8 --repeats 5   # median and 95% interval
    python run.py --list-suts
    python run.py sweep --models resnet50 --suts ort-fp32,ort-int8 --output DIR   # or FILE
    python run.py report DIR [DIR ...] [--output DIR]
    python run.py compare RESULTS_A RESULTS_B        # ratio of two sets of runs, with interval
    python run.py VERB --help                        # each verb's flags

Exit codes: 0 done, 1 a verb's own "finished, but not everything passed", 2 bad input or
environment (one line), 3 the SUT failed (one line), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from types import ModuleType

from quantmark import commands
from quantmark.ground import logs
from quantmark.ground.errors import SutError, UserError
from quantmark.ground.faults import environment_fault

DEFAULT_VERB = "run"
HELP_COLUMN = 15  # where a verb's help starts in the list of verbs


class _LineFormatter(argparse.HelpFormatter):
    """Each line of a description or epilog wrapped on its own, a verb's line (indented)
    hanging under its help: the verb list stays a list."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(textwrap.fill(line, width, initial_indent=indent,
                                        subsequent_indent=indent + " " * HELP_COLUMN
                                        if line.startswith(" ") else indent)
                         for line in text.splitlines())


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see python {self.prog} --help)")


def build_parser(verbs: dict[str, ModuleType]) -> tuple[_Parser, dict[str, _Parser]]:
    """The command line: one subcommand per verb, each with the flags its module declares.
    The default verb's help is ``run.py --help`` and lists the other verbs."""
    top = _Parser(prog="run.py", description="MLPerf-style inference benchmarks.")
    subparsers = top.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    others = "\n".join(f"  {name:<{HELP_COLUMN - 3}} {module.HELP}"
                       for name, module in verbs.items() if name != DEFAULT_VERB)
    parsers = {}
    for name, module in verbs.items():
        default = name == DEFAULT_VERB
        parsers[name] = subparsers.add_parser(
            name, prog="run.py" if default else f"run.py {name}",
            help=module.HELP.replace("%", "%%"),
            description=getattr(module, "DESCRIPTION", module.HELP),
            epilog=f"other verbs (python run.py VERB --help):\n{others}" if default else None,
            formatter_class=_LineFormatter)
        module.add_arguments(parsers[name])
    return top, parsers


def parse(argv: list[str]) -> tuple[ModuleType, argparse.Namespace]:
    """The verb ``argv`` names (``run`` when its first word is not a verb) and its flags."""
    verbs = commands.verbs()
    if not argv or argv[0] not in verbs:
        argv = [DEFAULT_VERB, *argv]
    top, parsers = build_parser(verbs)
    args, extra = top.parse_known_args(argv)
    verb = args.verb
    del args.verb
    if extra:  # named by the verb's own parser, so the hint is its --help
        parsers[verb].error(f"unrecognized arguments: {' '.join(extra)}")
    return verbs[verb], args


def main(argv: list[str] | None = None) -> int:
    """Run the verb; its exit code, or 2/3/130 with one line on stderr."""
    logs.setup()
    argv = sys.argv[1:] if argv is None else argv
    try:
        verb, args = parse(argv)
        return verb.main(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SutError as exc:
        print(f"SUT failed: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; the one in progress was discarded",
              file=sys.stderr)
        return 130
    except OSError as exc:  # disk full, permissions, a file in the way: named, not a traceback
        fault = environment_fault(exc)
        if fault is None:
            raise
        print(f"error: {fault}", file=sys.stderr)
        return 2
