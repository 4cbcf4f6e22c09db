"""The Python the manual shows: every ``python`` block compiles, and every one runs as a user
would paste it, in a fresh interpreter in an empty folder of its own (with the files its page
names, ``guide_files``) and a results store of its own, and exits 0 (slow tier: they run
LoadGen on the small built-in ``digits-cnn``, their runs kept short on the page itself). A
block the slow tier does not run says why on the line before its fence
(``<!-- example: not run: REASON -->``), and the test log names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_python
from tests.docs.guide_files import prepare
from tests.docs.pages import NOT_RUN, Block, blocks, pages
from tests.docs.summary import FOUND

BLOCK_TIMEOUT_S = 900


def python_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page) if block.lang == "python"]


def _runnable() -> list[Block]:
    return [block for block in python_blocks() if block.not_run is None]


def test_every_python_block_compiles(record_property) -> None:
    found = python_blocks()
    assert len(found) >= 4
    for block in found:
        compile(block.text, block.name, "exec")
    record_property(FOUND, f"{len(found)} Python blocks compiled")


def test_every_marker_stands_before_a_code_block_and_says_why() -> None:
    """A marker anywhere else would leave nothing unrun, or hide a block without a reason;
    the old ``<!-- example: run -->`` opt-in is gone (every block runs)."""
    for page in pages():
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            if not line.strip().startswith("<!-- example"):
                continue
            where = f"{page}:{number + 1}"
            assert NOT_RUN.match(line.strip()), f"{where}: not `<!-- example: not run: WHY -->`"
            assert number + 1 < len(lines) and lines[number + 1].startswith("```"), where
    assert len(_runnable()) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("block", _runnable(), ids=[block.name for block in _runnable()])
def test_every_python_block_runs(block: Block, tmp_path: Path, record_property) -> None:
    prepare(block.page, tmp_path)
    proc = run_python(block.text, timeout=BLOCK_TIMEOUT_S, cwd=str(tmp_path),
                      env={"QUANTMARK_STORE": f"sqlite:///{tmp_path / 'store.db'}"})
    record_property("docs_python_block", block.name)
    assert proc.returncode == 0, (f"{block.name} exited {proc.returncode}\n--- stderr (tail)\n"
                                  f"{proc.stderr[-3000:]}\n--- stdout (tail)\n"
                                  f"{proc.stdout[-1500:]}")
