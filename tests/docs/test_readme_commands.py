"""The README's examples run in order, as a user would type them in a folder of their own, on
the small built-in model with short runs (``guide_commands``: the substitution table). A file
of its own so that the slow tier's two workers share the docs' runs (``--dist loadfile``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs.guide_commands import run_page


@pytest.mark.slow
def test_the_readmes_examples_run_in_order(tmp_path: Path, record_property) -> None:
    run_page(ROOT / "README.md", tmp_path, record_property)
