"""The records of one kind under result folders: each section of the report (diagnoses,
profiles, recommendations) finds its own folders by their name prefix and reads their record."""

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
    found: list[R] = []
    for root in map(Path, folders):
        own = [root] if root.name.startswith(prefix) else []
        for folder in own + sorted(root.rglob(f"{prefix}*")):
            path = folder / file_name
            if any(part.startswith(".") for part in path.relative_to(root).parts) \
                    or not path.is_file():
                continue
            try:
                record = load_record(path, kind.KIND)
            except UnreadableRecord as exc:
                log.warning("skipping %s", exc)
                continue
            assert isinstance(record, kind)
            found.append(record)
    return found
