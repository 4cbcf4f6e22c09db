"""Which source each evaluation image was cut from: ``val_groups.txt`` beside ``val_map.txt``.

Crops of one photo are not independent samples, so an accuracy interval has to resample whole
sources, not images. The file lists ``<relative image path> <group name>``, one line per
``val_map.txt`` line; the built-in dataset writes it (the group is the source photo's name),
and any other folder may carry one. Absent, each image is its own source.
"""

from __future__ import annotations

import os
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.qsl.containment import quoted

VAL_GROUPS = "val_groups.txt"
_FORMAT = "'<relative image path> <group name>' lines"


def read_groups(dataset_dir: str | os.PathLike) -> dict[str, str] | None:
    """Image path -> group name from ``dataset_dir/val_groups.txt``; None when there is no such
    file. A malformed file is a one-line UserError naming the file and line."""
    path = Path(dataset_dir) / VAL_GROUPS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc}); fix it or remove it "
                        f"(it holds {_FORMAT})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; write it as {_FORMAT}") from None
    groups: dict[str, str] = {}
    first: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2:
            raise UserError(f"{path}:{number}: malformed line {quoted(line)}; expected {_FORMAT}")
        rel, group = parts
        if rel in groups:
            raise UserError(f"{path}:{number}: {quoted(rel)} is listed again (first at line "
                            f"{first[rel]}); remove the duplicate")
        groups[rel] = group
        first[rel] = number
    if not groups:
        raise UserError(f"{path} lists no images; write it as {_FORMAT} or remove it")
    return groups

