"""The pages the documentation is made of: README.md and every Markdown file under docs/ (the
checked-in example reports included), and the code blocks they hold. Every Python block and
every guide command runs in the slow tier unless the line right before its fence says why not:
``<!-- example: not run: REASON -->`` (counted and named in the test log)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
NOT_RUN = re.compile(r"^<!-- example: not run: (?P<why>\S.*?) -->$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, language, text and the
    line just before the fence (where a ``<!-- example: not run: REASON -->`` marker sits)."""

    page: Path
    line: int
    lang: str
    text: str
    before: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """Why the slow tier does not run this block, where its marker says so."""
        match = NOT_RUN.match(self.before)
        return match["why"] if match else None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The page's fenced code blocks, in order."""
    lines = page.read_text().splitlines()
    found, start = [], None
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if start is None and match:
            start, lang = number, match["lang"]
        elif start is not None and line.startswith("```"):
            found.append(Block(page, start + 1, lang, "\n".join(lines[start + 1:number]) + "\n",
                               lines[start - 1].strip() if start else ""))
            start = None
    assert start is None, f"{page}:{start + 1}: a code block is never closed"
    return found
