"""run.py is a thin caller of the Python API: each verb the API answers runs through the same
function ``quantmark.<verb>()`` calls, with ``show=True``, and exits with the answer's
``exit_code``; the rest is the verb's own ``main``."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from quantmark import cli, commands
from quantmark.api import answers, command_line


class _Answer:
    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code


def test_every_verb_has_a_way_to_run() -> None:
    for name, verb in commands.verbs().items():
        assert name in command_line.ANSWERED or hasattr(verb, "main"), name


@pytest.mark.parametrize(("argv", "verb"), [
    (["--scenario", "Offline", "--sut", "ort-int8", "--model", "digits-cnn"], "run"),
    (["sweep", "--models", "digits-cnn", "--suts", "ort-fp32"], "sweep"),
    (["compare", "a", "b"], "compare"),
    (["history", "--model", "m"], "history"),
    (["regress"], "regress"),
    (["recommend", "--scenario", "Offline", "--model", "digits-cnn"], "recommend"),
    (["profile", "--sut", "ort-int8"], "profile"),
    (["diagnose", "--sut", "ort-int8"], "diagnose"),
])
@pytest.mark.parametrize("exit_code", [0, 1])
def test_the_cli_answers_through_the_api_with_its_exit_code(
        monkeypatch: pytest.MonkeyPatch, argv: list[str], verb: str, exit_code: int) -> None:
    calls: list[tuple[argparse.Namespace, bool]] = []

    def answer(args: argparse.Namespace, show: bool) -> Any:
        calls.append((args, show))
        return _Answer(exit_code)

    takes, _ = command_line.ANSWERED[verb]
    monkeypatch.setitem(command_line.ANSWERED, verb, (takes, answer))
    assert cli.main(argv) == exit_code
    assert len(calls) == 1 and calls[0][1] is True  # the CLI shows what the API computes


def test_the_modes_the_api_does_not_answer_are_the_verbs_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(args: argparse.Namespace, show: bool) -> Any:
        raise AssertionError("the API was asked to list SUTs")

    monkeypatch.setitem(command_line.ANSWERED, "run", (answers.one_test, refuse))
    verb, args = cli.parse(["--list-suts"])
    assert not answers.one_test(args)
    listed: list[bool] = []
    monkeypatch.setattr(verb, "list_suts", lambda: listed.append(True))
    assert cli.main(["--list-suts"]) == 0 and listed == [True]


def test_a_mode_of_run_py_is_refused_by_the_api_in_one_line() -> None:
    import quantmark as qm

    with pytest.raises(qm.UserError, match="--list-suts is run.py's"):
        qm.run(list_suts=True)
    with pytest.raises(qm.UserError, match="runs one test"):
        qm.run()
