"""What the newest job of a series is compared with: ``--baseline`` TAG, DATE or VERSION.

Without one, the history is every earlier job of the series. A date keeps the jobs that
started before it; a tag the jobs carrying it; a version the jobs measured by that quantmark.
The word is read as whichever of those the store knows; where it could be two, a prefix says
which (``tag:nightly``, ``version:0.1.0``, ``date:2026-11-01``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from quantmark.ground.errors import UserError
from quantmark.store.points import Point

KINDS = ("tag", "date", "version")


@dataclass(frozen=True)
class Baseline:
    """Which jobs form a series' history; ``kind`` None: every job before the newest."""

    kind: str | None = None
    value: str = ""
    before: datetime | None = None  # a date's instant (UTC)

    def selects(self, point: Point) -> bool:
        if self.kind == "tag":
            return self.value in point.tags
        if self.kind == "version":
            return point.version == self.value
        if self.kind == "date":
            assert self.before is not None
            return instant(point.when) < self.before
        return True

    def text(self) -> str:
        if self.kind is None:
            return "every earlier job"
        if self.kind == "date":
            return f"jobs before {self.value}"
        return f"jobs with {self.kind} {self.value}"


def instant(when: str) -> datetime:
    """A point's ISO 8601 time as an aware UTC datetime (naive times are UTC)."""
    moment = datetime.fromisoformat(when.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _date(text: str) -> datetime | None:
    try:
        return instant(text)
    except ValueError:
        return None


def parse_baseline(text: str | None, points: Sequence[Point]) -> Baseline:
    """``--baseline`` read against what the store holds; a word it does not know, or one
    that names two things, is one line saying which to write."""
    if not text:
        return Baseline()
    kind, _, value = text.partition(":")
    if kind in KINDS and value:
        return _checked(kind, value, points)
    tags = {t for p in points for t in p.tags}
    versions = {p.version for p in points if p.version}
    found = [k for k, hit in (("tag", text in tags), ("version", text in versions),
                              ("date", _date(text) is not None)) if hit]
    if len(found) > 1:
        raise UserError(f"--baseline {text} is both a {found[0]} and a {found[1]} in the "
                        f"store; write {found[0]}:{text} or {found[1]}:{text}")
    if not found:
        raise UserError(f"--baseline {text} is neither a date (YYYY-MM-DD), a tag "
                        f"({_few(tags)}) nor a quantmark version ({_few(versions)}) in the "
                        "store; pass one of those")
    return _checked(found[0], text, points)


def _checked(kind: str, value: str, points: Sequence[Point]) -> Baseline:
    if kind == "date":
        moment = _date(value)
        if moment is None:
            raise UserError(f"--baseline date:{value} is not a date; write YYYY-MM-DD or an "
                            "ISO 8601 time")
        return Baseline("date", value, moment)
    known = {t for p in points for t in p.tags} if kind == "tag" else \
        {p.version for p in points if p.version}
    if value not in known:
        raise UserError(f"--baseline {kind}:{value}: no job in the store has that {kind} "
                        f"({_few(known)}); pass one it has")
    return Baseline(kind, value)


def _few(names: set[str]) -> str:
    shown = sorted(names)[:8]
    if not shown:
        return "none recorded"
    return "known: " + ", ".join(shown) + (", ..." if len(names) > len(shown) else "")
