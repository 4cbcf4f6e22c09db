"""Every ``python run.py ...`` the README and the docs show parses with quantmark's own parser
as the verb it names, and together they show every verb and the default job: a flag renamed
in the code and not in the manual fails here. (Moved from tests/quantmark/test_cli.py when
the manual moved from the README into docs/; it reads every page now.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs.pages import pages

COMMAND = re.compile(r"^\s*\S*python3? run\.py(?P<args>(?:\s.*)?)$")


def _page_forms(page: Path) -> list[tuple[str, str]]:
    """Every ``python run.py ...`` the page shows, in code blocks (with their continuation
    lines) and in inline code, as (page:line, the text after ``run.py``)."""
    lines = page.read_text().splitlines()
    where = page.relative_to(ROOT)
    found, in_code = [], False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            found += [(f"{where}:{number + 1}", form)
                      for form in re.findall(r"`\S*python3? run\.py([^`]*)`", line)]
            continue
        for segment in line.split("&&"):
            match = COMMAND.match(segment)
            if not match:
                continue
            text, following = match["args"], number + 1
            while text.rstrip().endswith("\\") or (following < len(lines) and re.match(
                    r"\s+\[", lines[following])):  # a backslash, or the synopsis' indent
                text = text.rstrip().rstrip("\\") + " " + lines[following].strip()
                following += 1
            found.append((f"{where}:{number + 1}", text))
    return found


def _forms() -> list[tuple[str, str]]:
    return [form for page in pages() for form in _page_forms(page)]


def _concrete(form: str) -> list[str]:
    """A synopsis made a command line: comments dropped, ``[A | B]`` -> A, ``[A]`` -> A,
    ``...`` dropped, ``{a,b}`` -> a, ``a|b`` -> a, and N/K/PCT numbers."""
    text = re.sub(r"\s+#.*$", "", form)
    while True:
        before = text
        text = re.sub(r"\[([^\[\]|]*)\]", r"\1", text)
        text = re.sub(r"\[([^\[\]|]*)\|[^\[\]]*\]", r"\1", text)
        if text == before:
            break
    text = re.sub(r",?\.\.\.", "", text)
    text = re.sub(r"\{([^,{}]+),[^{}]*\}", r"\1", text)
    text = re.sub(r"([^\s|]+)\|\S+", r"\1", text)
    return [{"N": "2", "K": "2", "PCT": "5"}.get(word, word) for word in shlex.split(text)]


def test_the_manual_shows_every_verb_and_the_default_forms():
    forms = [_concrete(form) for _, form in _forms()]
    assert len(forms) > 70  # the README held 70 before its manual moved into docs/
    assert [] in forms  # python run.py: the default job
    named = {form[0] for form in forms if form}
    from quantmark import commands

    assert set(commands.verbs()) - {"run"} <= named


def test_the_readme_shows_a_form_of_the_main_verbs():
    named = {form.split()[0] if form.split()[0][0] != "-" else "run"
             for _, form in _page_forms(ROOT / "README.md") if form.strip()}
    assert {"run", "sweep", "compare", "recommend"} <= named


@pytest.mark.parametrize("form", [form for _, form in _forms()],
                         ids=[where for where, _ in _forms()])
def test_every_command_line_shown_parses(form):
    from quantmark import cli, commands

    argv = _concrete(form)
    verb, args = cli.parse(argv)
    expected = argv[0] if argv and argv[0] in commands.verbs() else "run"
    assert verb.NAME == expected, (form, argv)
    assert "verb" not in vars(args)  # a verb's main sees its own flags only
