"""Plain table output shared by the reports: numbers for people, CSV at full precision,
Markdown and HTML tables."""

from __future__ import annotations

import csv
import html
import io
from typing import Any


def number(value: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _raw(value: Any) -> str:
    """Full precision for the CSVs: they must equal LoadGen's logs, not a rounding of them."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def ordered(header: list[str], record: dict[str, Any]) -> list[Any]:
    """``record``'s values in ``header`` order. Tables are built from named fields: a name
    missing or extra is a bug caught here, not a column silently shifted under its header."""
    missing = [name for name in header if name not in record]
    extra = [name for name in record if name not in header]
    if missing or extra:
        raise ValueError(f"table record does not match its header: missing {missing}, "
                         f"extra {extra}")
    return [record[name] for name in header]


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    """A CSV of ``rows`` under ``header``, every value at full precision (``_raw``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[_raw(v) for v in row] for row in rows])
    return buffer.getvalue()


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return lines


def html_table(header: list[str], rows: list[list[str]], bad_column: int | None = None,
               yes_is_bad: tuple[int, ...] = ()) -> str:
    """An HTML table; cells shown red: ``bad_column``'s that are not VALID, and those of the
    ``yes_is_bad`` columns that say yes (a run throttled, disturbed)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            bad = ((i == bad_column and not value.startswith("VALID")) or
                   (i in yes_is_bad and value.startswith("yes")))
            flag = ' class="bad"' if bad else ""
            cells.append(f"<td{flag}>{html.escape(value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="wrap"><table><tr>{head}</tr>{"".join(body)}</table></div>'
