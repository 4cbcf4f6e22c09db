"""The records of one kind under result folders: each section of the report (diagnoses,
profiles, recommendations) finds its own folders by their name prefix and reads their record;
the training section finds its files by name and reads them the same way (``read_records``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypeVar

from quantmark.ground.records import Record, UnreadableRecord, load_record

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Record)


def records_under(folders: list[str | Path], prefix: str, file_name: str,
                  kind: type[R]) -> list[R]:
    """Every ``kind`` record in a ``<prefix>*/<file_name>`` folder under ``folders`` (or a
    given folder that is one), hidden folders skipped; one this version cannot read, or of
    another kind, is left out and said."""
    paths = []
    for root in map(Path, folders):
        own = [root] if root.name.startswith(prefix) else []
        for folder in own + sorted(root.rglob(f"{prefix}*")):
            path = folder / file_name
            if not hidden(path, root) and path.is_file():
                paths.append(path)
    return read_records(paths, kind)


def hidden(path: Path, root: Path) -> bool:
    """A part of ``path`` below ``root`` starts with a dot."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read_records(paths: list[Path], kind: type[R]) -> list[R]:
    """The ``kind`` record of each path, in order; one this version cannot read, or of
    another kind, is left out and said."""
    found: list[R] = []
    for path in paths:
        try:
            record = load_record(path, kind.KIND)
        except UnreadableRecord as exc:
            log.warning("left out: %s", exc)
            continue
        assert isinstance(record, kind)
        found.append(record)
    return found
