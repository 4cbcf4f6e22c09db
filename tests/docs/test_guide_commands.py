"""Every command the guides show runs, page by page in page order, as a user would type it in
a folder of their own, on the small built-in model with short runs (``guide_commands``: the
substitution table), and exits 0 (the README's examples: test_readme_commands.py). The quick
tier checks that every command of the guides and the README is covered by that table (a new
verb or a job no rule makes short fails here, not silently in CI) and that what a page reads,
its setup or an earlier command of the page made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.guide_commands import (
    SHORT_BY,
    Uncovered,
    guide_pages,
    page_commands,
    run_page,
    runnable,
    substitute,
    value_of,
)
from tests.docs.guide_files import files_of
from tests.docs.summary import FOUND

#: the flag that keeps a verb's runs short, which every command of the verb must end up with
SHORT_FLAG = {"run": "--user-conf", "sweep": "--seconds", "recommend": "--budget"}
#: where a verb writes when the command names no --output
DEFAULT_OUTPUT = {"run": "results", "sweep": "sweep", "recommend": "results",
                  "profile": "results"}


def test_the_guides_and_the_readme_show_commands_and_each_is_covered(record_property) -> None:
    commands = [command for page in guide_pages() for command in page_commands(page)]
    assert len([c for c in commands if c.not_run is None]) >= 15
    assert {c.page.name for c in commands} >= {"README.md", "int8-faster.md", "deploy.md",
                                              "own-model.md", "regressions.md",
                                              "why-not-faster.md"}
    for command in commands:
        if command.not_run is not None:
            continue
        argv = substitute(command.shown)  # Uncovered: the table has no rule for it
        assert command.verb in SHORT_BY, command.where
        for flag in ("--model", "--models"):
            assert value_of(argv, flag) in (None, "digits-cnn"), (command.where, argv)
        assert value_of(argv, "--suts") not in ("cpu", "gpu", "all"), (command.where, argv)
        if command.verb in SHORT_FLAG and command.shown:  # what bounds its runs (not the
            # default job's: python run.py runs as shown)
            assert value_of(argv, SHORT_FLAG[command.verb]), (command.where, argv)
    covered = len([c for c in commands if c.not_run is None])
    record_property(FOUND, f"{covered} guide commands covered by the substitution table")


def test_a_command_no_rule_makes_short_is_refused_not_run_long() -> None:
    with pytest.raises(Uncovered):
        substitute(("diagnose", "--sut", "ort-int8", "--model", "resnet50"))


def test_the_default_job_runs_as_shown() -> None:
    assert substitute(()) == []


def _positionals(argv: list[str]) -> list[str]:
    """A reading verb's folder arguments: its words less the verb, flags and their values."""
    valued = {"--output"}
    words = argv[1:]
    return [word for index, word in enumerate(words) if not word.startswith("-")
            and not (index and words[index - 1] in valued)]


@pytest.mark.parametrize("page", guide_pages(), ids=lambda page: page.name)
def test_what_a_page_reads_is_made_by_its_setup_or_an_earlier_command(page: Path) -> None:
    """A page's files come from its setup (``guide_files.FILES``), its folders from the
    commands before: the page runs in an empty folder, as a reader's would start."""
    written = files_of(page)
    for command in runnable(page):
        argv = substitute(command.shown)
        for flag in ("--model-path", "--dataset-path", "--calibration-list"):
            named = value_of(argv, flag)
            assert named is None or named in written, f"{command.where}: {named} is made by " \
                "nothing: add it to tests/docs/guide_files.py's FILES"
        if command.verb in ("compare", "report"):
            for folder in _positionals(argv):
                assert folder in written, f"{command.where}: {folder} is written by no " \
                    "earlier command of the page"
        written.add(value_of(argv, "--output") or DEFAULT_OUTPUT.get(command.verb, ""))


#: pages whose runs must have the machine to themselves (tests/machine_share.py), and why
ALONE = {"deploy.md": "recommend under an accuracy limit races until its answer has quiet "
                      "runs: beside another test every run is disturbed and the search runs "
                      "on to its 6.5-minute budget"}


def _guides() -> list:
    """The guides with a command to run (the README's run in test_readme_commands.py: the
    two files balance the slow tier's two workers)."""
    return [pytest.param(page, id=page.name, marks=[pytest.mark.alone] if page.name in ALONE
                         else []) for page in guide_pages()
            if page.name != "README.md" and runnable(page)]


@pytest.mark.slow
@pytest.mark.parametrize("page", _guides())
def test_a_guides_commands_run_in_page_order(page: Path, tmp_path: Path,
                                             record_property) -> None:
    run_page(page, tmp_path, record_property)
