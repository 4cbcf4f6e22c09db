"""Keyword arguments -> a verb's own parsed flags: the API takes exactly what ``run.py VERB``
takes, named as each flag's attribute (``batch_size`` for ``--batch-size``, ``accuracy=False``
for ``--no-accuracy``), and argparse checks them as it checks the command line, so a value
the CLI refuses is refused here with the same one line."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

from quantmark.ground.errors import UserError


def verb_parser(verb: str) -> argparse.ArgumentParser:
    """The parser ``run.py VERB`` uses (its flags, defaults and checks)."""
    from quantmark import commands
    from quantmark.commands.parsing import build_parser

    _, parsers = build_parser(commands.verbs())
    return parsers[verb]


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions  # noqa: SLF001 - argparse's
            if action.dest not in ("help", argparse.SUPPRESS)}  # only list of its flags


def _words(action: argparse.Action, value: Any) -> list[str]:
    """The command-line words that give ``value`` to ``action``."""
    if not action.option_strings:  # a positional
        return [str(value)]
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
        return [flag] if value else []
    if isinstance(action, argparse._StoreFalseAction):  # noqa: SLF001
        return [] if value else [flag]
    if isinstance(action, argparse._AppendAction):  # noqa: SLF001 - repeatable: once a value
        items = [value] if isinstance(value, str) else list(value)
        return [word for item in items for word in (flag, str(item))]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [flag, ",".join(str(item) for item in value)]  # "resnet50,mobilenetv2"
    return [flag, str(value)]


def arguments(verb: str, function: str, values: Mapping[str, Any]) -> argparse.Namespace:
    """``values`` (keyword arguments of ``quantmark.<function>``) parsed by ``verb``'s parser;
    None leaves a flag at its default. An unknown name is one line naming the known ones."""
    parser = verb_parser(verb)
    actions = _actions(parser)
    unknown = sorted(set(values) - set(actions))
    if unknown:
        known = ", ".join(sorted(actions))
        raise UserError(f"quantmark.{function}() got unknown argument(s) {', '.join(unknown)}; "
                        f"it takes the flags of run.py {verb} --help by name: {known}")
    positionals = [a for a in actions.values() if not a.option_strings]
    missing = [a.dest for a in positionals
               if values.get(a.dest) is None and a.nargs not in ("?", "*")]
    if missing:
        raise UserError(f"quantmark.{function}() needs {', '.join(missing)}")
    words = [w for a in positionals if values.get(a.dest) is not None
             for w in _words(a, values[a.dest])]
    for name, value in values.items():
        action = actions[name]
        if value is not None and action.option_strings:
            words += _words(action, value)
    return parser.parse_args(words)
