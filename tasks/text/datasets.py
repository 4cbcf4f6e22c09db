"""A user's labelled (or unlabelled) text: a CSV file with a header holding a ``text`` column
and optionally ``label``, or a JSONL file of objects with ``text`` and optionally ``label``.

String labels become ids in sorted order (``label_names[id]`` is the name); integer labels are
kept as given. Every problem is one line naming the file, the line and the fix: a run that
quietly skipped rows would score a different set than the one the user named.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.paths import require_path

SUFFIXES = (".csv", ".jsonl")
TEXT, LABEL = "text", "label"
_INTEGER = re.compile(r"[+-]?\d+")
_FIX = (f"a CSV needs a header with a '{TEXT}' column (and optionally '{LABEL}'); a JSONL file "
        f'one object per line, {{"{TEXT}": "...", "{LABEL}": ...}}')


@dataclass(frozen=True, eq=False)
class TextDataset:
    """Texts and, when every row has one, their labels (int64, ``None`` when unlabelled);
    ``label_names`` the names string labels map from (empty for integer labels)."""

    texts: tuple[str, ...]
    labels: np.ndarray | None
    label_names: tuple[str, ...]
    source: Path
    sha256: str
    description: str

    def __len__(self) -> int:
        return len(self.texts)


#: one row as read: (line number, text, raw label or None)
_Row = tuple[int, str, "str | int | None"]


def read_text_dataset(path: Path) -> TextDataset:
    """Read ``path`` (.csv or .jsonl, UTF-8)."""
    path = Path(path)
    require_path(path, "text dataset", f"pass a .csv or .jsonl file; {_FIX}")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(f"text dataset {path} has the unknown suffix {path.suffix or '(none)'!r};"
                        f" pass a .csv or .jsonl file")
    data = path.read_bytes()
    text = _decode(path, data)
    if not text.strip():
        raise UserError(f"text dataset {path} is empty; {_FIX}")
    rows = _csv_rows(path, text) if suffix == ".csv" else _jsonl_rows(path, text)
    if not rows:
        raise UserError(f"text dataset {path} holds no rows; {_FIX}")
    labels, names = _labels(path, rows)
    texts = tuple(row[1] for row in rows)
    digest = hashlib.sha256(data).hexdigest()
    return TextDataset(texts=texts, labels=labels, label_names=names, source=path,
                       sha256=digest, description=_describe(path, texts, labels, names, digest))


def _decode(path: Path, data: bytes) -> str:
    """UTF-8 (a byte-order mark allowed); the first bad byte's line otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"text dataset {path} is not UTF-8 (byte {exc.start}, line {line}); "
                        "save it as UTF-8") from None


def _csv_rows(path: Path, text: str) -> list[_Row]:
    """(line, text, label) per CSV record; the line is where the record starts."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except csv.Error as exc:
        raise UserError(f"text dataset {path} line 1 is not CSV ({exc}); {_FIX}") from None
    columns = [name.strip() for name in header]
    if TEXT not in columns:
        raise UserError(f"text dataset {path} has no '{TEXT}' column (its header: "
                        f"{', '.join(repr(c) for c in columns)}); {_FIX}")
    at_text = columns.index(TEXT)
    at_label = columns.index(LABEL) if LABEL in columns else None
    rows: list[_Row] = []
    start = reader.line_num + 1
    try:
        for record in reader:
            if any(field.strip() for field in record):  # a blank line is no row
                value = record[at_text] if at_text < len(record) else ""
                label = record[at_label].strip() if at_label is not None \
                    and at_label < len(record) else ""
                rows.append((start, _text(path, start, value), label or None))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise UserError(f"text dataset {path} line {start} is not CSV ({exc}); {_FIX}") from None
    return rows


def _jsonl_rows(path: Path, text: str) -> list[_Row]:
    """(line, text, label) per JSON object; blank lines are skipped."""
    rows: list[_Row] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise UserError(f"text dataset {path} line {number} is not JSON ({exc.args[0]}); "
                            f"{_FIX}") from None
        if not isinstance(record, dict) or TEXT not in record:
            what = "has no 'text' field" if isinstance(record, dict) else "is not an object"
            raise UserError(f"text dataset {path} line {number} {what}; {_FIX}")
        if not isinstance(record[TEXT], str):
            raise UserError(f"text dataset {path} line {number}: 'text' is a "
                            f"{type(record[TEXT]).__name__}, not a string; {_FIX}")
        label = record.get(LABEL)
        if isinstance(label, bool) or not isinstance(label, int | str | None):
            raise UserError(f"text dataset {path} line {number}: label {label!r} is neither "
                            "a whole number nor a string; use class ids (0, 1, ...) or names")
        rows.append((number, _text(path, number, record[TEXT]), label))
    return rows


def _text(path: Path, line: int, value: str) -> str:
    if not value.strip():
        raise UserError(f"text dataset {path} has an empty text on line {line}; remove the row "
                        "or give it a text")
    return value


def _labels(path: Path, rows: list[_Row]) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """int64 labels and the names string labels map from; None when no row has one."""
    given = [(line, label) for line, _, label in rows if label is not None and label != ""]
    if not given:
        return None, ()
    if len(given) < len(rows):
        line = next(line for line, _, label in rows if label is None or label == "")
        raise UserError(f"text dataset {path} mixes labelled and unlabelled rows (line {line} "
                        f"has no label, line {given[0][0]} has one); label every row or none")
    values = [label for _, label in given]
    if all(isinstance(v, int) for v in values) or \
            all(isinstance(v, str) and _INTEGER.fullmatch(v) for v in values):
        return np.array([int(v) for v in values], dtype=np.int64), ()
    if not all(isinstance(v, str) for v in values):
        line = next(line for line, label in given if isinstance(label, int))
        raise UserError(f"text dataset {path} mixes number and string labels (line {line}); "
                        "use one kind for every row")
    names = tuple(sorted(set(values)))
    ids = {name: index for index, name in enumerate(names)}
    return np.array([ids[v] for v in values], dtype=np.int64), names


def _describe(path: Path, texts: tuple[str, ...], labels: np.ndarray | None,
              names: tuple[str, ...], digest: str) -> str:
    if labels is None:
        kind = "unlabelled"
    elif names:
        kind = f"labelled with {len(names)} classes ({', '.join(names[:5])}" + \
            (", ...)" if len(names) > 5 else ")")
    else:
        kind = f"labelled with {len(np.unique(labels))} class ids"
    return f"{len(texts)} texts from {path.name}, {kind}, sha256 {digest[:12]}"
