"""The Python the manual shows: every ``python`` block compiles, and every block marked
runnable (the line before its fence is ``<!-- example: run -->``) runs as a user would paste
it, in a fresh interpreter in an empty folder, and exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_python
from tests.docs.pages import Block, blocks, pages

MARKER = "<!-- example: run -->"


def _python_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page) if block.lang == "python"]


def _runnable() -> list[Block]:
    return [block for block in _python_blocks() if block.before == MARKER]


def test_every_python_block_compiles() -> None:
    found = _python_blocks()
    assert len(found) >= 4
    for block in found:
        compile(block.text, block.name, "exec")


def test_every_marker_stands_before_a_python_block() -> None:
    """A marker before anything else would leave its example silently unrun."""
    marked = 0
    for page in pages():
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() == MARKER:
                marked += 1
                assert lines[number + 1].strip() == "```python", f"{page}:{number + 1}"
    assert marked == len(_runnable()) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("block", _runnable(), ids=[block.name for block in _runnable()])
def test_a_runnable_example_runs(block: Block, tmp_path: Path) -> None:
    """On the small built-in ``digits-cnn``: a real LoadGen run or a few, seconds each."""
    proc = run_python(block.text, timeout=900, cwd=str(tmp_path),
                      env={"QUANTMARK_STORE": f"sqlite:///{tmp_path / 'store.db'}"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "the example printed nothing"
