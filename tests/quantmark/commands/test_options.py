"""The flags several verbs take are declared once (commands/options.py) and mean the same
wherever they are given."""

from __future__ import annotations

import re

import pytest

from quantmark import cli
from quantmark.commands import options
from quantmark.ground.errors import UserError
from tests.conftest import ROOT

SHARED = ("--model", "--model-path", "--dataset-path", "--calibration-list", "--output",
          "--threads", "--sut-option", "--workers", "--batch-size", "--user-conf")


def test_shared_flags_are_declared_only_in_options():
    declared = {}
    for path in sorted((ROOT / "quantmark" / "commands").glob("*.py")):
        for flag in re.findall(r"add_argument\(\s*\"(--[a-z-]+)\"", path.read_text()):
            declared.setdefault(flag, set()).add(path.name)
    assert {flag: declared.get(flag) for flag in SHARED} == {
        flag: {"options.py"} for flag in SHARED}


@pytest.mark.parametrize("verb, default", [
    ("run", "results"), ("diagnose", "results"), ("train-bench", "results/train-bench"),
    ("report", None), ("sweep", None)])
def test_each_verb_gives_output_its_own_default(verb, default):
    argv = {"diagnose": ["--sut", "ort-int8"], "report": ["somewhere"]}.get(verb, [])
    _, args = cli.parse([verb, *argv])
    assert args.output == default


@pytest.mark.parametrize("verb, argv", [
    ("export", ["--sut", "tflite-fp32"]),
    ("submission", ["--results", "r", "--submitter", "s", "--division", "open"])])
def test_a_required_output_is_one_line(verb, argv):
    with pytest.raises(UserError, match=rf"required: --output \(see python run.py {verb} "):
        cli.parse([verb, *argv])


def test_threads_and_batch_size_are_whole_numbers_in_every_verb():
    for argv in (["--threads", "two"], ["diagnose", "--sut", "s", "--threads", "two"],
                 ["train-bench", "--batch-size", "8.5"], ["sweep", "--workers", "x"]):
        with pytest.raises(UserError, match="invalid int value"):
            cli.parse(argv)


def test_sut_options_are_key_value_pairs():
    assert options.key_values(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    assert options.key_values(None) == {}
    for bad in ("novalue", "=1", "k=", " = "):
        with pytest.raises(UserError, match="write KEY=VALUE"):
            options.key_values([bad])
