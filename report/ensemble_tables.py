"""The Ensembles section as text: Markdown, HTML, the console's cells and its CSVs.

The numbers come from ``report.ensembles``; every form takes its cells by column name from one
record per row (``table_formats.ordered``), so no form can shift a column off its header.
"""

from __future__ import annotations

import html
from typing import Any

from quantmark.report.ensembles import (
    BASELINE,
    AccuracyTable,
    Section,
    SpeedRow,
    SpeedTable,
)
from quantmark.report.intervals import metric_text
from quantmark.report.stats import AccuracyChange, Ratio
from quantmark.report.table_formats import csv_text, html_table, markdown_table, number, ordered

NOTES = [
    "`members alone, combined`: the members run one after another. For SingleStream and "
    "MultiStream this is the sum of their latencies; for Offline and Server it is "
    "1 / Σ(1 / samples/s). It is computed per repeat index when every member ran the same "
    "repeats; otherwise it comes from their medians (n=1, no interval).",
    "`× members combined`: how many times faster the ensemble is than that (above 1×: faster; "
    "for latencies, combined / ensemble). `× sequential`: concurrent against sequential, with "
    "the same combine. Either is 'no measurable difference' when its 95% interval holds 1×.",
    "Peak RSS: results.json `memory.peak_rss_mb` (the test process), the largest of the "
    "repeats. The members' sum counts the runtime and dataset once per member, so an ensemble "
    "can need less. Time share: each member's share of the ensemble's busy time in LoadGen's "
    "window (median of the repeats).",
    "Accuracy: each member's top-1 on the ensemble's samples (its answers inside the ensemble "
    "run) and in its own accuracy run. Δ vs best member: the ensemble minus its best member, in "
    "points. The paired figure compares them image by image (95% interval; p from a "
    "t test over source photos where crops share one, else the Bonett-Price test). It "
    "uses the best member's answers in the same run, else its own accuracy run on the same "
    "samples.",
]
SPEED_HEADER = ["row", "n", "validity", "official metric [95%]", "× members combined",
                "× sequential", "peak RSS MB", "RSS × members", "time share"]
ACCURACY_HEADER = ["row", "top-1 % on the ensemble's samples", "top-1 % own run",
                   "Δ vs best member", "paired Δ vs best member", "combine check"]
AGREEMENT_HEADER = ["members", "same class, % of samples"]


def _ratio_text(found: Ratio | str | None) -> str:
    return found.text() if isinstance(found, Ratio) else found or "-"


def _shares(row: SpeedRow, sep: str = ", ", fmt: str = "{} {:.0%}") -> str:
    return sep.join(fmt.format(s.removeprefix("ensemble-"), v) for s, v in row.time_share.items())


def speed_cells(row: SpeedRow) -> list[str]:
    """A speed table row as text, in ``SPEED_HEADER`` order."""
    c = row.config
    return ordered(SPEED_HEADER, {
        "row": row.label, "n": str(c.derived["n"]) if c else "-",
        "validity": c.derived["validity"] if c else "not measured",
        "official metric [95%]": metric_text(c) if c else "-",
        "× members combined": _ratio_text(row.vs_combined),
        "× sequential": _ratio_text(row.vs_sequential),
        "peak RSS MB": number(row.peak_rss_mb, 0),
        "RSS × members": number(row.rss_vs_members, 2, "×"), "time share": _shares(row) or "-"})


def accuracy_records(table: AccuracyTable) -> list[dict[str, Any]]:
    """The accuracy table's rows as values: the members, then each ensemble SUT."""
    best = table.best()
    rows = [{"row": m.name, "kind": "member", "is_best": m == best,
             "top1": table.member_top1(m), "own": table.own.get(m.name), "gain": None,
             "best": None, "change": None, "paired_with": "", "check": {}}
            for m in table.members]
    for run in table.runs:
        found = table.best(run)
        rows.append({"row": run.sut, "kind": "ensemble", "is_best": False, "top1": run.top1,
                     "own": None,
                     "gain": table.gain(run), "best": found.name if found else None,
                     "change": run.change, "paired_with": run.paired_with,
                     "check": run.record.get("combined_check") or {}})
    return rows


def accuracy_cells(record: dict[str, Any]) -> list[str]:
    """An accuracy row as text, in ``ACCURACY_HEADER`` order."""
    check, gain = record["check"], record["gain"]
    return ordered(ACCURACY_HEADER, {
        "row": record["row"] + (" (best)" if record["is_best"] else ""),
        "top-1 % on the ensemble's samples": number(record["top1"]),
        "top-1 % own run": number(record["own"]),
        "Δ vs best member": "-" if gain is None else f"{gain:+.2f} pt ({record['best']})",
        "paired Δ vs best member": (f"{record['change'].text()} (vs {record['paired_with']})"
                                    if record["change"] else "-"),
        "combine check": (f"{check.get('mismatches')} of {check.get('checked')} differ"
                          if check else "-")})


Tables = list[tuple[list[str], list[list[str]]]]  # (header, rows) of each table


def _subsections(section: Section) -> list[tuple[str, str, Tables]]:
    """(heading, the line under it, tables) of each subsection, by machine and ensemble."""
    out: list[tuple[str, str, Tables]] = []
    for key in section.keys():
        for t in (t for t in section.speed if (t.system, t.name) == key):
            out.append((t.title, f"Official metric: {t.metric_name}.",
                        [(SPEED_HEADER, [speed_cells(r) for r in t.rows])]))
        for t in (t for t in section.accuracy if (t.system, t.name) == key):
            tables: Tables = [(ACCURACY_HEADER, [accuracy_cells(r)
                                                 for r in accuracy_records(t)])]
            if t.agreement():
                tables.append((AGREEMENT_HEADER, [[k, f"{v:.1f}"] for k, v in t.agreement()]))
            out.append((f"{t.name} — accuracy — {t.system}", "", tables))
    return out


def markdown(section: Section) -> list[str]:
    """The section's Markdown lines; none without ensembles."""
    if not section.keys():
        return []
    lines = ["", "## Ensembles", ""] + [f"- {n}" for n in NOTES]
    for heading, lead, tables in _subsections(section):
        lines += ["", f"### {heading}"] + (["", lead] if lead else [])
        for header, rows in tables:
            lines += [""] + markdown_table(header, rows)
    return lines


def to_html(section: Section) -> str:
    """The section as HTML; empty without ensembles."""
    if not section.keys():
        return ""
    parts = ["<h2>Ensembles</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in NOTES)
             + "</ul>"]
    for heading, lead, tables in _subsections(section):
        parts.append(f"<h3>{html.escape(heading)}</h3>"
                     + (f"<p>{html.escape(lead)}</p>" if lead else ""))
        parts += [html_table(header, rows, header.index("validity") if "validity" in header
                             else None) for header, rows in tables]
    return "\n".join(parts)


def _ratio_fields(name: str, found: Ratio | str | None) -> dict[str, Any]:
    r = found if isinstance(found, Ratio) else None
    return {name: r.point if r else (1.0 if found == BASELINE else None),
            f"{name}_low": r and r.low, f"{name}_high": r and r.high,
            f"{name}_verdict": r.verdict if r else found}


SPEED_CSV = ["system", "ensemble", "scenario", "batch_size", "row", "kind", "n", "validity",
             "metric_name", "metric_unit", "metric_median", "metric_low", "metric_high",
             *[f"{n}{s}" for n in ("vs_combined", "vs_sequential")
               for s in ("", "_low", "_high", "_verdict")],
             "peak_rss_mb", "rss_vs_members", "time_share"]
ACCURACY_CSV = ["system", "ensemble", "row", "kind", "top1", "top1_own_run",
                "gain_vs_best_member_pts", "best_member", "paired_change_pts", "paired_low_pts",
                "paired_high_pts", "paired_p", "paired_test", "paired_verdict", "paired_with",
                "agreement_pct", "combined_checked", "combined_mismatches"]


def _speed_record(t: SpeedTable, row: SpeedRow) -> dict[str, Any]:
    c = row.config
    found = c.derived["metric_interval"] if c else None
    return {"system": t.system, "ensemble": t.name, "scenario": t.scenario,
            "batch_size": t.batch_size, "row": row.label, "kind": row.kind,
            "n": c.derived["n"] if c else None, "validity": c.derived["validity"] if c else None,
            "metric_name": c.runs[0].summary.metric_name if c else None,
            "metric_unit": c.runs[0].summary.metric_unit if c else None,
            "metric_median": found and found.point, "metric_low": found and found.low,
            "metric_high": found and found.high, **_ratio_fields("vs_combined", row.vs_combined),
            **_ratio_fields("vs_sequential", row.vs_sequential), "peak_rss_mb": row.peak_rss_mb,
            "rss_vs_members": row.rss_vs_members, "time_share": _shares(row, "; ", "{}={}")}


def _accuracy_rows(t: AccuracyTable) -> list[dict[str, Any]]:
    empty = dict.fromkeys(ACCURACY_CSV)
    rows = []
    for r in accuracy_records(t):
        change: AccuracyChange | None = r["change"]
        rows.append({**empty, "system": t.system, "ensemble": t.name, "row": r["row"],
                     "kind": r["kind"], "top1": r["top1"], "top1_own_run": r["own"],
                     "gain_vs_best_member_pts": r["gain"], "best_member": r["best"],
                     "paired_change_pts": change and change.delta_points,
                     "paired_low_pts": change and change.low,
                     "paired_high_pts": change and change.high,
                     "paired_p": change and change.p_value,
                     "paired_test": change and change.method,
                     "paired_verdict": change and change.verdict,
                     "paired_with": r["paired_with"],
                     "combined_checked": r["check"].get("checked"),
                     "combined_mismatches": r["check"].get("mismatches")})
    return rows + [{**empty, "system": t.system, "ensemble": t.name, "row": pair,
                    "kind": "agreement", "agreement_pct": value} for pair, value in t.agreement()]


def csv_texts(section: Section) -> list[tuple[str, str]]:
    """(file name, CSV) of the section's tables, at full precision; none without ensembles."""
    texts = []
    if section.speed:
        texts.append(("ensemble_speed.csv", csv_text(SPEED_CSV, [
            ordered(SPEED_CSV, _speed_record(t, r)) for t in section.speed for r in t.rows])))
    if section.accuracy:
        texts.append(("ensemble_accuracy.csv", csv_text(ACCURACY_CSV, [
            ordered(ACCURACY_CSV, r) for t in section.accuracy for r in _accuracy_rows(t)])))
    return texts
