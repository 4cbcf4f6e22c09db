"""The pages the documentation is made of: README.md and every Markdown file under docs/ (the
checked-in example reports included), and the code blocks they hold."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, language, text and the
    line just before the fence (where a marker such as ``<!-- example: run -->`` sits)."""

    page: Path
    line: int
    lang: str
    text: str
    before: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


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
