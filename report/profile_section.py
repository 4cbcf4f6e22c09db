"""The "Profile" section: where a SUT's inference time goes, layer by layer, beside the
diagnoses in ``run.py report``.

Reads the record ``run.py profile`` writes (``"kind": "profile"``, in a ``profile-<sut>-vs-
<against>/`` folder) and renders it: the layers where the SUT is slower than its reference,
ranked by milliseconds lost and named by the canonical ONNX layer; every SUT side by side where
several were compared; each SUT's INT8/float/overhead shares and whether its layers add up to
its end-to-end time (a framework that could not profile is one line); and the figure drawn
when it ran. The tables are ``profile_tables``', as ``run.py profile`` prints them.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

from quantmark.ground.records import RESULTS, ProfileRecord
from quantmark.report import profile_tables
from quantmark.report.quality import metric_of
from quantmark.report.record_folders import records_under
from quantmark.report.table_formats import html_table, markdown_table

log = logging.getLogger(__name__)

FOLDER_PREFIX = "profile-"  # <output>/<system>/<model>/profile-<sut>-vs-<against>/


def load(folders: list[str | Path]) -> list[ProfileRecord]:
    """Every profile under ``folders``: the record in each ``profile-*/`` folder (a folder
    named so that holds another kind, or an unreadable file, is left out and said)."""
    return records_under(folders, FOLDER_PREFIX, RESULTS, ProfileRecord)


def title(record: ProfileRecord) -> str:
    against = ", ".join(record.references or [record.against])
    model = f" (references on {record.against_model_path})" if record.against_model_path else ""
    return f"{record.model}: {record.sut} against {against}{model}, batch {record.batch_size}"


def summary_lines(record: ProfileRecord) -> list[str]:
    """How the layers are named, then each SUT's shares and sum check (or why it has none)."""
    named = (f"layers named by the canonical ONNX model {record.onnx_model}"
             if record.onnx_model else record.vocabulary or "layers keep their own names")
    task = record.task or {}
    scored = (f"; task {task.get('name')} (scored by {metric_of(record).name})"
              if task.get("name") else "")
    return [f"{named}; {record.iterations} profiled inferences after {record.warmup} "
            f"warm-up{scored}", *profile_tables.share_lines(record.to_dict()),
            *profile_tables.role_lines(record.to_dict())]


def _tables(record: ProfileRecord) -> list[tuple[str, list[str], list[list[str]]]]:
    """(heading, header, rows): the slower layers, then a text model's time by role, or
    every SUT side by side."""
    found = record.to_dict()
    out = []
    if record.slower:
        out.append((f"where {record.sut} is slower than {record.against}, by ms lost",
                    list(profile_tables.LAYER_HEADER),
                    [list(row) for row in profile_tables.layer_rows(record.slower)]))
    elif record.layers:
        out.append((f"{record.sut} is nowhere slower than {record.against}", [], []))
    rows = profile_tables.role_rows(found)
    if rows:  # a text model: its time by role, in place of its hundreds of nodes side by side
        out.append(("where the time goes, by role", list(profile_tables.role_header(found)),
                    [list(row) for row in rows]))
    elif record.side_by_side:
        out.append(("every SUT by ONNX layer", list(profile_tables.side_header(found)),
                    [list(row) for row in profile_tables.side_rows(found)]))
    return out


def markdown(record: ProfileRecord, level: str = "##") -> list[str]:
    lines = [f"{level} Profile: {title(record)}", ""]
    lines += [f"- {line}" for line in summary_lines(record)]
    for heading, header, rows in _tables(record):
        lines += ["", f"{level}# {heading}", ""] + (markdown_table(header, rows) if header
                                                    else [])
    return lines


def to_html(record: ProfileRecord) -> str:
    parts = [f"<h2>Profile: {html.escape(title(record))}</h2><ul>"
             + "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(record))
             + "</ul>"]
    for heading, header, rows in _tables(record):
        parts.append(f"<h3>{html.escape(heading)}</h3>")
        if header:
            parts.append(html_table(header, rows))
    return "\n".join(parts)


def markdown_all(records: list[ProfileRecord]) -> list[str]:
    return [line for record in records for line in ["", *markdown(record)]]


def figures(records: list[ProfileRecord]) -> list[Any]:
    """Each profile's figure (drawn when it ran) for the report's Figures section."""
    from quantmark.report.figures import Figure

    found = []
    for record in records:
        path = Path(record.source).parent / (record.figure or "") if record.source else None
        if record.figure and path is not None and path.is_file():
            against = "+".join(record.references or [record.against])
            name = f"profile-{record.model}-{record.sut}-vs-{against}.png"
            found.append(Figure("profile", f"Profile: {title(record)}", name, path.read_bytes(),
                                f"where {record.sut}'s time goes",
                                "One bar per SUT: INT8 compute, float compute, overhead and "
                                "other (a text model: its time by role), in ms per inference; "
                                "black tick: the end-to-end time of the same loop."))
    return found


def print_profiles(console: Any, records: list[ProfileRecord]) -> None:
    """Each profile's slower layers, SUTs side by side and shares, for ``run.py report``."""
    from rich.markup import escape

    for record in records:
        console.print(f"[bold]Profile: {escape(title(record))}[/]", soft_wrap=True)
        profile_tables.print_profile(console, record.to_dict(), every_layer=False)
