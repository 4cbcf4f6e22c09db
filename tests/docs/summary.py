"""The count the issue asks for, in the test log: how many guide commands and Python blocks of
the manual ran, and which did not and why. A pytest plugin (tests/conftest.py names it in
``pytest_plugins``): under pytest-xdist only the controller writes the summary, and it loads
no conftest below tests/. The runs are counted from the properties the tests record
(``docs_guide_command``, ``docs_python_block``), which reach the controller in their
reports."""

from __future__ import annotations

import pytest

RAN = ("docs_guide_command", "docs_python_block")
FOUND = "docs_examples_found"


def _recorded(reporter: pytest.TerminalReporter) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {key: set() for key in (*RAN, FOUND)}
    for reports in reporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key in found:
                    found[key].add(str(value))
    return found


def _not_run() -> list[str]:
    """Every guide command and Python block a marker keeps out of the slow tier, with why."""
    from tests.docs.guide_commands import guide_pages, page_commands
    from tests.docs.test_examples import python_blocks

    named = [f"{c.where} `{c.text}`: {c.not_run}" for page in guide_pages()
             for c in page_commands(page) if c.not_run]
    return named + [f"{b.name} (Python): {b.not_run}" for b in python_blocks() if b.not_run]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    recorded = _recorded(terminalreporter)
    if not any(recorded.values()):
        return  # no docs example test ran in this session
    not_run = _not_run()
    commands, python = (len(recorded[key]) for key in RAN)
    if commands or python:
        head = f"docs examples: {commands} guide commands and {python} Python blocks ran"
    else:  # the quick tier: what it checked
        head = f"docs examples: {', '.join(sorted(recorded[FOUND]))}; the slow tier runs them"
    terminalreporter.write_line(f"{head} ({len(not_run)} not run{': ' if not_run else ''}"
                                f"{'; '.join(not_run)})")
