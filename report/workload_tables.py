"""When a report's runs differ in input size (a text model's sequence length) or dataset: each
reduced precision's speedup over FP32 as a function of input size or sequence length, per
framework (one table per ``workload_axes.Axis``), and each precision's accuracy change on each
dataset (the seed study's "models, datasets, image sizes" comparison).

Every row is one configuration's own figure, as ``characterize.derive`` made it: its speedup
over the FP32 SUT of the same framework on the same machine, model, input size or sequence
length, dataset, SUT options, scenario and batch (repeats paired by index; the interval
corrected for the report's number of speedup verdicts), and its paired change in its task's
metric over that FP32's accuracy run (``report.quality`` labels it: top-1, a detector's mAP, a
text encoder's cosine to FP32; a table of rows scored by several metrics has one column per
metric). Nothing is pooled across sizes, lengths, datasets or options: they only sit side by
side here.
"""

from __future__ import annotations

import html
from typing import Any

from quantmark.ground.metric import Metric
from quantmark.report import quality
from quantmark.report.characterize import Config, Study, is_fp32
from quantmark.report.intervals import quality_columns, speedup_text, verdict
from quantmark.report.table_formats import csv_text, html_table, markdown_table, ordered
from quantmark.report.workload_axes import AXES, SEQ_LEN, SIZE, Axis, Group, groups, shape_text

SIZE_TITLE = SIZE.title
SEQ_LEN_TITLE = SEQ_LEN.title
DATASET_TITLE = "Accuracy change by dataset"
DATASET_HEADER = ["system", "model", "input size", "dataset", "SUT"]  # then the quality's
CHANGE_SUFFIXES = ("change_pts", "change_low_pts", "change_high_pts")


def speedup_header(axis: Axis) -> list[str]:
    """A speedup table's columns; then each metric's change (``quality_columns``)."""
    return ["system", "model", "dataset", "scenario", "batch", "SUT", axis.name, "× fw FP32",
            "verdict"]


def speedup_csv_header(axis: Axis) -> list[str]:
    """A speedup CSV's columns; then each metric's change (``CHANGE_SUFFIXES``)."""
    return ["system", "model", "dataset", "scenario", "batch_size", "sut", "framework",
            "precision", *axis.csv_columns, "speedup_vs_fp32", "speedup_low", "speedup_high",
            "speedup_confidence", "speedup_verdict", "speedup_paired", "n", "fp32_baseline"]


SIZE_HEADER = speedup_header(SIZE)
SIZE_CSV_HEADER = speedup_csv_header(SIZE)


def _names(metrics: list[Metric]) -> str:
    return " or ".join(metric.name for metric in metrics)


def size_note(metrics: list[Metric], axis: Axis = SIZE) -> str:
    return (f"Each row: one configuration's speedup over its framework's FP32 at the same "
            f"{axis.same}, dataset, SUT options, scenario and batch (median over repeats, "
            "paired by repeat; its interval corrected for the report's number of speedup "
            f"verdicts), and its {_names(metrics)} change over that FP32, paired {axis.paired}. "
            "A speedup whose interval holds 1× is 'no measurable difference'.")


def dataset_note(metrics: list[Metric]) -> str:
    return (f"Each row: one SUT's {_names(metrics)} on one dataset, and its change over its "
            "framework's FP32 on the same dataset and input size, paired image by image (95% "
            "interval).")


def scored_by(configs: list[Config]) -> list[Metric]:
    """The metrics ``configs`` are scored by (``report.quality``), first seen first."""
    return quality.in_order(c.derived["quality_metric"] for c in configs)

def _area(config: Config) -> int:
    size = config.workload.size if config.workload else None
    return size[0] * size[1] if size else 0


def size_groups(study: Study) -> dict[Group, list[Config]]:
    """The reduced-precision configurations to compare across input sizes
    (``workload_axes.groups``)."""
    return groups(study, SIZE)


def seq_len_groups(study: Study) -> dict[Group, list[Config]]:
    """... and a text model's across sequence lengths."""
    return groups(study, SEQ_LEN)


def dataset_configs(study: Study) -> list[Config]:
    """One configuration per (system, model label, SUT) of the models that ran on several
    datasets here: its derived figure and paired change are the accuracy runs'."""
    datasets: dict[tuple[str, str], set[str]] = {}
    for c in study.configs:
        if c.workload is not None:
            datasets.setdefault((c.system, c.workload.model), set()).add(c.workload.dataset_id)
    seen: dict[tuple[str, str, str], Config] = {}
    for c in study.configs:
        if c.workload is not None and len(datasets[(c.system, c.workload.model)]) > 1:
            seen.setdefault((c.system, c.model, c.sut), c)
    return sorted(seen.values(), key=lambda c: (c.system, c.workload.model, _area(c),
                                                c.workload.seq_len or 0, c.workload.dataset,
                                                c.family, not is_fp32(c.sut)))


def _speedup_cells(group: Group, c: Config, axis: Axis) -> dict[str, str]:
    system, model, dataset, scenario, batch = group
    return {"system": system, "model": model, "dataset": dataset, "scenario": scenario,
            "batch": str(batch), "SUT": c.sut, axis.name: axis.text(c.workload),
            "× fw FP32": speedup_text(c, "speedup_vs_fp32"),
            "verdict": verdict(c, "speedup_vs_fp32") or "-"}


def _speedup_table(study: Study, axis: Axis) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the speedup-by-``axis`` table: each metric's change after the
    speedup."""
    found = groups(study, axis)
    changes = quality_columns(scored_by([c for configs in found.values() for c in configs]),
                              figure=False, agreement=False)
    header = speedup_header(axis) + [h for h, _ in changes]
    return header, [ordered(header, {**_speedup_cells(group, c, axis),
                                     **{h: f(c) for h, f in changes}})
                    for group, configs in found.items() for c in configs]


def size_rows(study: Study) -> list[list[str]]:
    return _speedup_table(study, SIZE)[1]


def seq_len_rows(study: Study) -> list[list[str]]:
    return _speedup_table(study, SEQ_LEN)[1]


def _dataset_table(study: Study) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the accuracy-by-dataset table: each metric's figure and change, and
    agreement with FP32 where a metric classifies."""
    configs = dataset_configs(study)
    shown = quality_columns(scored_by(configs))
    header = DATASET_HEADER + [h for h, _ in shown]
    return header, [ordered(header, {
        "system": c.system, "model": c.workload.model, "input size": shape_text(c.workload),
        "dataset": c.workload.dataset, "SUT": c.sut, **{h: f(c) for h, f in shown}})
        for c in configs]


def dataset_rows(study: Study) -> list[list[str]]:
    return _dataset_table(study)[1]


def _speedup_record(group: Group, c: Config, metrics: list[Metric], axis: Axis
                    ) -> dict[str, Any]:
    """One configuration's row of ``axis.csv_file`` (``speedup_by_size.csv`` ...), at full
    precision: its change in its own metric's columns, the other metrics' blank."""
    system, model, dataset, scenario, batch = group
    found, change = c.derived["speedup_vs_fp32_ratio"], c.derived["quality_change"]
    changes = (c.derived["quality_change_vs_fp32"], change and change.low,
               change and change.high)
    return {"system": system, "model": model, "dataset": dataset, "scenario": scenario,
            "batch_size": batch, "sut": c.sut, "framework": c.family, "precision": c.variant,
            **dict(zip(axis.csv_columns, axis.csv_values(c.workload), strict=True)),
            "speedup_vs_fp32": c.derived["speedup_vs_fp32"],
            "speedup_low": found and found.low, "speedup_high": found and found.high,
            "speedup_confidence": found and found.confidence,
            "speedup_verdict": verdict(c, "speedup_vs_fp32"),
            "speedup_paired": found and found.paired, "n": c.derived["n"],
            "fp32_baseline": c.derived["fp32_baseline"],
            **{quality.csv_key(metric, suffix): (value if metric == c.derived["quality_metric"]
                                                 else None)
               for metric in metrics
               for suffix, value in zip(CHANGE_SUFFIXES, changes, strict=True)}}


def csv_texts(study: Study) -> list[tuple[str, str]]:
    """``speedup_by_size.csv`` where the report's runs differ in input size,
    ``speedup_by_seq_len.csv`` where a text model's differ in sequence length."""
    texts = []
    for axis in AXES:
        found = groups(study, axis)
        if not found:
            continue
        metrics = scored_by([c for configs in found.values() for c in configs])
        header = speedup_csv_header(axis) + [quality.csv_key(metric, suffix)
                                             for metric in metrics
                                             for suffix in CHANGE_SUFFIXES]
        texts.append((axis.csv_file, csv_text(header, [
            ordered(header, _speedup_record(group, c, metrics, axis))
            for group, configs in found.items() for c in configs])))
    return texts


def _tables(study: Study) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, header, rows) of each table the study has rows for."""
    found = []
    for axis in AXES:
        rows = [c for configs in groups(study, axis).values() for c in configs]
        found.append((axis.title, size_note(scored_by(rows), axis),
                      *_speedup_table(study, axis)))
    found.append((DATASET_TITLE, dataset_note(scored_by(dataset_configs(study))),
                  *_dataset_table(study)))
    return [table for table in found if table[3]]


def markdown(study: Study) -> list[str]:
    """The tables as Markdown lines (none when every run shares one size and dataset)."""
    lines: list[str] = []
    for title, note, header, rows in _tables(study):
        lines += ["", f"## {title}", "", note, ""] + markdown_table(header, rows)
    return lines


def to_html(study: Study) -> str:
    """The tables as HTML ("" when every run shares one size and dataset)."""
    return "".join(f"<h2>{html.escape(title)}</h2><p>{html.escape(note)}</p>"
                   + html_table(header, rows) for title, note, header, rows in _tables(study))
