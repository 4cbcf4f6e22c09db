"""The command line's parsers: one per verb, each with the flags its module declares, and the
verb ``argv`` names. The CLI (``quantmark.cli``) and the Python API (``quantmark.api``)
both parse through here, so a flag means one thing, and is checked one way, in both."""

from __future__ import annotations

import argparse
import textwrap
from types import ModuleType

from quantmark import commands
from quantmark.ground.errors import UserError

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
