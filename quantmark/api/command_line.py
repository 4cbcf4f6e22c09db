"""The command line's way into the API: ``run.py VERB`` calls the same function the Python
call does (``quantmark.api.answers``) with ``show=True``, and its exit code is the answer's
(``exit_code``). The CLI is a thin caller of the API: a flag cannot mean one thing in a
script and another at the prompt. What the API does not answer (``run.py --list-suts``, an
ensemble, a compliance test, the default job, ``recommend --cluster``, and the verbs with
no Python call: report, export, submission, store, node, train-bench) is the verb's own
``main``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType
from typing import Any

from quantmark.api import answers

Answer = Callable[[argparse.Namespace, bool], Any]


def _always(_: argparse.Namespace) -> bool:
    return True


def _on_this_machine(args: argparse.Namespace) -> bool:
    return not args.cluster


#: verb -> (does the API answer these flags?, the answer)
ANSWERED: dict[str, tuple[Callable[[argparse.Namespace], bool], Answer]] = {
    "run": (answers.one_test, answers.run),
    "compare": (_always, answers.compare),
    "sweep": (_always, answers.sweep),
    "history": (_always, answers.history),
    "regress": (_always, answers.regress),
    "recommend": (_on_this_machine, answers.recommend),
    "profile": (_always, answers.profile),
    "diagnose": (_always, answers.diagnose),
}


def main(verb: ModuleType, args: argparse.Namespace) -> int:
    """Answer ``args`` through the API where it answers them, else the verb's ``main``; the
    exit code either way."""
    takes, answer = ANSWERED.get(verb.NAME, (None, None))
    if takes is None or answer is None or not takes(args):
        return int(verb.main(args))
    # profile and diagnose answer with their record, which has no exit code: 0
    return int(getattr(answer(args, True), "exit_code", 0))
