"""The manual builds as a site with nothing to warn about (a broken link, a missing anchor, a
page the nav names that does not exist, an API reference that does not resolve), and the
README stays a short front page that still holds the two set-up commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT

#: the README's set-up, exactly as the README has always given it (CI runs these two lines)
INSTALL = ('python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e ".[cpu,dev]" '
           "&& .venv/bin/python run.py")
TESTS = ".venv/bin/python -m pytest -q"


def test_the_strict_build_passes_without_a_warning(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert [line for line in output.splitlines() if "WARNING" in line] == []
    api = (tmp_path / "site" / "api" / "index.html").read_text()  # mkdocstrings rendered both
    assert 'id="quantmark.api.public.run"' in api
    assert 'id="quantmark.api.results.RunResult"' in api


def test_the_readme_is_short_and_keeps_the_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    lines = readme.splitlines()
    assert INSTALL in lines and TESTS in lines


def _nav_pages(entries: list) -> list[str]:
    found = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += _nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_page_of_the_manual_is_in_the_nav() -> None:
    """Pages outside the nav are reachable only by a link; only the checked-in example reports
    (generated, linked from the pages) are left out of it."""
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    docs = ROOT / "docs"
    written = {str(p.relative_to(docs)) for p in docs.rglob("*.md")
               if not p.relative_to(docs).parts[0].startswith("example-")}
    assert sorted(written) == sorted(nav)
