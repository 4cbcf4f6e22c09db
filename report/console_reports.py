"""``run.py report`` on the console: the characterization's tables (one row per configuration,
the ensembles' speed tables, training) and the percentile table of a results folder. The files
are written by ``sweep_report`` and ``run_table``; this prints the same figures.

Apart from ``console_tables`` because it needs the statistics (scipy), which the lean install
lacks and a single run does not need."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.metric import Metric
from quantmark.report import quality
from quantmark.report.characterize import Config, Study
from quantmark.report.console_tables import table, training_table
from quantmark.report.ensemble_tables import SPEED_HEADER, speed_cells
from quantmark.report.ensembles import speed_tables
from quantmark.report.intervals import (
    disturbed_lines,
    disturbed_text,
    metric_text,
    quality_columns,
    speedup_text,
    verdicts_note,
)
from quantmark.report.run_table import (
    console_cells,
    console_columns,
    disagreement_warnings,
    disturbed_warnings,
    incomplete_warnings,
    scored_by,
)
from quantmark.report.training import rows as training_rows

# the characterization's console columns: header -> the named field of a configuration it
# shows; then each metric's figure and agreement with FP32 (``columns``)
LEADING: dict[str, Callable[[Config], str]] = {
    "system": lambda c: c.system, "model": lambda c: c.model,
    "scenario": lambda c: c.scenario,
    "SUT": lambda c: f"{c.sut} ⚠" if c.derived["disturbed"] else c.sut,
    "batch": lambda c: str(c.batch_size), "validity": lambda c: c.derived["validity"],
    "disturbed": disturbed_text, "official metric [95%]": metric_text,
    "x fw FP32": lambda c: speedup_text(c, "speedup_vs_fp32")}


def columns(metrics: list[Metric]) -> dict[str, Callable[[Config], str]]:
    """The console columns for configurations scored by ``metrics`` (``report.quality``)."""
    return {**LEADING, **dict(quality_columns(metrics, change=False))}


def print_characterization(console: Console, folders: list[str], study: Study) -> None:
    """Every configuration with its interval and verdict, the disturbed runs, each ensemble's
    speed table, the training table and the cells that could not run (and why)."""
    if study.configs or study.explained:
        shown = columns(quality.in_order(c.derived["quality_metric"] for c in study.configs))
        console.print(table(f"characterization of {', '.join(folders)}", shown,
                            ([cell(config) for cell in shown.values()]
                             for config in study.configs)))
    if study.verdicts:
        console.print(escape(verdicts_note(study.verdicts)))
    for line in disturbed_lines(study.configs):
        console.print(f"[yellow]disturbed:[/] {escape(line)}")
    for found in speed_tables(study):  # the Ensembles section's speed tables
        console.print(table(f"ensemble {found.title}: {found.metric_name}", SPEED_HEADER,
                            (speed_cells(row) for row in found.rows)))
    if study.training:
        console.print(training_table(training_rows(study.training), "training (train-bench)"))
    for e in study.explained:
        console.print(f"[yellow]{escape(e.sut)} {escape(e.model)} "
                      f"{escape(e.scenario if e.mode != 'accuracy' else 'accuracy')}: "
                      f"{escape(e.status)}[/] {escape(e.message)}")
    for line in study.disagreements:
        console.print(f"[bold red]not LoadGen's:[/] {escape(line)}", soft_wrap=True)


def print_percentiles(console: Console, folder: str, rows: list[Any], csv_path: Path,
                      md_path: Path) -> None:
    """The percentile table of every run under ``folder``, cells taken by column name
    (``run_table.console_columns``), never by position, and its warnings."""
    root, metrics = Path(folder), scored_by(rows)
    made = Table(title=f"runs under {escape(folder)}")
    for label, _ in console_columns(metrics):
        made.add_column(label)
    for row in rows:
        made.add_row(*(escape(cell) for cell in console_cells(row, root, metrics)))
    console.print(made)
    for line in incomplete_warnings(rows, root) + disturbed_warnings(rows, root):
        console.print(f"[yellow]warning:[/] {escape(line)}")
    for line in disagreement_warnings(rows, root):
        console.print(f"[bold red]not LoadGen's:[/] {escape(line)}", soft_wrap=True)
    console.print("latencies in ms (LoadGen's nearest-rank); Offline runs are one query of every "
                  "sample, so their percentiles (n/a here, in the CSV as logged) are not a "
                  f"sample's latency; written {escape(str(csv_path))} "
                  f"and {escape(str(md_path))}")
