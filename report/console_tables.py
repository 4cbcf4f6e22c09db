"""What the verbs print on the console: a run's summary line, the SUT list, the training table
and a diagnosis' tables. The commands decide what to run; the wording and the tables live here,
beside the report's other forms of the same data. Light on purpose (rich and the report's small
modules only): every verb imports it, the lean Raspberry Pi install included.

The figures of many runs (the characterization and the percentile table) are in
``console_reports``, which needs the statistics the lean install lacks."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.report import diagnosis_section as diagnosis
from quantmark.report import training
from quantmark.report.quality import classifies, metric_of

if TYPE_CHECKING:
    from quantmark.ground.records import DiagnosisRecord
    from quantmark.report.stats import Interval


def make_console() -> Console:
    """The verbs' console: piped output (CI, files) gets a wide one instead of rich's
    80-column default."""
    return Console(width=None if sys.stdout.isatty() else 200)


def clock(seconds: float | None) -> str:
    """Seconds as H:MM:SS for a progress line; "?" when not known."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def table(title: str, header: Iterable[str], rows: Iterable[Iterable[str]],
          overflow: str | None = None) -> Table:
    """A rich table of plain text cells (escaped: a name is never read as markup)."""
    made = Table(title=escape(title))
    for column in header:
        made.add_column(escape(column), overflow=overflow)  # type: ignore[arg-type]
    for row in rows:
        made.add_row(*map(escape, row))
    return made


def suts_table(rows: list[dict[str, Any]]) -> Table:
    """``--list-suts``: every SUT, whether it runs here and why not."""
    made = Table(title="quantmark SUTs")
    for column in ("SUT", "framework", "precision", "device", "runs here", "why not"):
        made.add_column(column)
    for row in rows:
        made.add_row(row["name"], row["framework"], row["precision"], row["device"],
                     "[green]yes[/]" if row["available"] else "[red]no[/]",
                     escape(row["reason"]))
    return made


def run_text(results: dict[str, Any], invalid_why: str) -> str:
    """One run's summary: its SUT, scenario, audit, its speed or its task's accuracy (top-1,
    with the counts of right answers, for a classifier), and why it is INVALID
    (``invalid_why``), which repeat it was and why it was rerun."""
    summary = results.get("summary", {})
    audit = results["config"].get("audit")
    text = f"{results['config']['sut']} {summary.get('scenario')} {audit + ' ' if audit else ''}"
    accuracy = results.get("accuracy")
    task, metric = results.get("task") or {}, metric_of(results)
    if task.get("name", "classification") != "classification":
        text += f"[{task['name']}] "
    if accuracy and classifies(metric):
        text += (f"accuracy: {accuracy[metric.key]:.3f}% {metric.name} "
                 f"({accuracy['good']}/{accuracy['total']})")
    elif accuracy:
        unit = metric.unit if metric.unit == "%" else f" {metric.unit}"
        text += f"accuracy: {accuracy[metric.key]:.3f}{unit} {metric.name}"
        if accuracy.get("total") or accuracy.get("images"):
            text += f" ({accuracy.get('total') or accuracy.get('images')} samples)"
    else:
        text += f"performance: {summary.get('validity')}"
        value, unit = summary.get("metric_value"), summary.get("metric_unit")
        if value is not None:
            text += f", {value / 1e6:.3f} ms" if unit == "ns" else f", {value:.2f} samples/s"
        if summary.get("validity") == "INVALID":
            text += f" ({invalid_why})"
    repeat = results.get("repeat") or {}
    if (repeat.get("of") or 1) > 1:
        text += f" (repeat {repeat.get('index')} of {repeat.get('of')})"
    if results["config"].get("rerun"):
        text += f" (rerun: {results['config']['rerun'].get('why')})"
    return text


def workload_text(results: dict[str, Any]) -> str | None:
    """What model and data a run measured, where it is not a built-in model at its own size on
    the built-in photos: its input, classes, weights, preprocessing and dataset."""
    from quantmark.models.zoo import MODELS

    model, dataset = results.get("model") or {}, results.get("dataset") or {}
    shape = model.get("input")
    known = MODELS.get(model.get("name", ""))
    if not shape or (known is not None and known.builtin_dataset == "photos"
                     and not model.get("weights_note") and dataset.get("builtin")
                     and "height" in shape
                     and (shape["height"], shape["width"], model.get("num_classes")) ==
                     (known.input_size, known.input_width, known.num_classes)):
        return None
    data = dataset.get("description") or dataset.get("path", "")
    if "seq_len" in shape:  # a text model's tokens
        return (f"model {model.get('name')}: {shape['seq_len']} tokens, {shape['padding']} "
                f"padding; dataset: {data}")
    note = f"; {model['weights_note']}" if model.get("weights_note") else ""
    return (f"model {model.get('name')}: {shape['channels']}x{shape['height']}x{shape['width']} "
            f"{shape['dtype']} input, {model.get('num_classes')} classes{note}; preprocessing: "
            f"{model.get('preprocessing')}; dataset: {data}")


def print_run(console: Console, results: dict[str, Any], run_dir: str, invalid_why: str,
              disturbed: str | None) -> None:
    """A finished run: its summary line and folder, then what makes its figures not the SUT's
    quiet, steady speed (other processes, a throttled board)."""
    console.print(f"{escape(run_text(results, invalid_why))}  ->  {run_dir}")
    workload = workload_text(results)
    if workload:
        console.print(escape(workload), soft_wrap=True)
    if disturbed:
        console.print(f"[bold red]{escape(disturbed)}[/]: this run's figures are not the "
                      "SUT's quiet speed; rerun on a quiet machine or read the median of "
                      "--repeats")
    thermal = results.get("machine", {}).get("thermal") or {}
    if thermal.get("throttled"):
        console.print(f"[yellow]the board throttled during this run "
                      f"({escape('; '.join(thermal.get('why') or []))}): its numbers are not its "
                      "steady speed; cool it and run again[/]")


def repeat_set_line(sut: str, scenario: str, interval: Interval, latency: bool, note: str,
                    disturbed: int) -> str:
    """``--repeats``' headline: the median over the VALID runs with its 95% interval, in ms
    (a latency metric, stored in ns) or samples/s, and what was left out or disturbed."""
    unit, scale, fmt = (" ms", 1e6, "{:.3f}") if latency else (" samples/s", 1.0, "{:.2f}")
    shown = replace(interval, point=interval.point / scale,
                    low=None if interval.low is None else interval.low / scale,
                    high=None if interval.high is None else interval.high / scale)
    return (f"{escape(sut)} {scenario}: median of {interval.n} {'VALID ' if note else ''}runs "
            f"{shown.text(fmt)}{unit} (95% interval, {interval.method})"
            + (f"; [bold red]{escape(note)}[/]" if note else "")
            + (f"; [bold red]{disturbed} disturbed[/]" if disturbed else ""))


def training_table(rows: list[dict[str, Any]], title: str) -> Table:
    """train-bench's records, one row per framework, model and precision."""
    return table(title, training.HEADER, training.cells(rows), overflow="fold")


def print_diagnosis(console: Console, record: DiagnosisRecord) -> None:
    """A diagnosis: what was matched, the worst layers, the recovery curve."""
    for line in diagnosis.summary_lines(record):
        console.print(escape(line), soft_wrap=True)
    console.print(table(f"worst layers: {diagnosis.title(record)}", diagnosis.WORST_HEADER,
                        diagnosis.worst_rows(record)))
    if not record.recovery:
        return
    rows = record.recovery["rows"]
    metric = metric_of(record)
    console.print(table(f"recovery: worst layers kept in FP32 ({metric.name} paired against K=0; "
                        "speed in interleaved rounds)", *diagnosis.recovery_table(record)))
    for row in rows:
        if row.get("disturbed_rounds"):
            console.print(f"[yellow]disturbed:[/] {escape(row['label'])}: "
                          f"{escape('; '.join(row['disturbed_why']))}", soft_wrap=True)
    costs = diagnosis.cost_rows(record)
    if costs:
        console.print(table(diagnosis.cost_title(record), diagnosis.COST_HEADER, costs))


def print_agreement(console: Console, records: list[DiagnosisRecord]) -> None:
    """Where diagnoses share a reference: each one's worst layers under the reference's
    names."""
    for heading, header, rows in diagnosis.agreement(records):
        console.print(table(heading, header, rows))
