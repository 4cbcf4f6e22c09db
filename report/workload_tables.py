"""When a report's runs differ in input size or dataset: each reduced precision's speedup over
FP32 as a function of input size, per framework, and each precision's accuracy change on each
dataset (the seed study's "models, datasets, image sizes" comparison).

Every row is one configuration's own figure, as ``characterize.derive`` made it: its speedup
over the FP32 SUT of the same framework on the same machine, model, input size, dataset, SUT
options, scenario and batch (repeats paired by index; the interval corrected for the report's
number of speedup verdicts), and its paired change in its task's metric over that FP32's
accuracy run (``report.quality`` labels it: top-1, a detector's mAP; a table of rows scored by
several metrics has one column per metric). Nothing is pooled across sizes, datasets or
options: they only sit side by side here.
"""

from __future__ import annotations

import html
from typing import Any

from quantmark.ground.metric import Metric
from quantmark.report import quality
from quantmark.report.characterize import Config, Study, is_fp32
from quantmark.report.intervals import quality_columns, speedup_text, verdict
from quantmark.report.table_formats import csv_text, html_table, markdown_table, ordered

SIZE_TITLE = "Speedup over FP32 by input size"
DATASET_TITLE = "Accuracy change by dataset"
SIZE_HEADER = ["system", "model", "dataset", "scenario", "batch", "SUT", "input size",
               "× fw FP32", "verdict"]  # then each metric's change (``quality_columns``)
DATASET_HEADER = ["system", "model", "input size", "dataset", "SUT"]  # then the quality's
SIZE_CSV_HEADER = ["system", "model", "dataset", "scenario", "batch_size", "sut", "framework",
                   "precision", "input_height", "input_width", "speedup_vs_fp32",
                   "speedup_low", "speedup_high", "speedup_confidence", "speedup_verdict",
                   "speedup_paired", "n", "fp32_baseline"]  # then each metric's change
CHANGE_SUFFIXES = ("change_pts", "change_low_pts", "change_high_pts")


def _names(metrics: list[Metric]) -> str:
    return " or ".join(metric.name for metric in metrics)


def size_note(metrics: list[Metric]) -> str:
    return ("Each row: one configuration's speedup over its framework's FP32 at the same input "
            "size, dataset, SUT options, scenario and batch (median over repeats, paired by "
            "repeat; its interval corrected for the report's number of speedup verdicts), and "
            f"its {_names(metrics)} change over that FP32, paired image by image. A speedup "
            "whose interval holds 1× is 'no measurable difference'.")


def dataset_note(metrics: list[Metric]) -> str:
    return (f"Each row: one SUT's {_names(metrics)} on one dataset, and its change over its "
            "framework's FP32 on the same dataset and input size, paired image by image (95% "
            "interval).")


def scored_by(configs: list[Config]) -> list[Metric]:
    """The metrics ``configs`` are scored by (``report.quality``), first seen first."""
    return quality.in_order(c.derived["quality_metric"] for c in configs)

Group = tuple[str, str, str, str, int]  # system, model, dataset, scenario, batch


def _area(config: Config) -> int:
    size = config.workload.size if config.workload else None
    return size[0] * size[1] if size else 0


def size_groups(study: Study) -> dict[Group, list[Config]]:
    """The reduced-precision configurations to compare across input sizes: per (system, model,
    dataset, scenario, batch), where that group ran two sizes or more; by SUT, then size."""
    groups: dict[tuple, list[Config]] = {}
    for c in study.configs:
        w = c.workload
        if w is None or w.size is None or is_fp32(c.sut) or not c.derived["fp32_baseline"]:
            continue  # an ensemble has no FP32 of its own
        groups.setdefault((c.system, w.model, w.dataset_id, c.scenario, c.batch_size),
                          []).append(c)
    return {(system, configs[0].workload.model, configs[0].workload.dataset, scenario, batch):
            sorted(configs, key=lambda c: (c.sut, _area(c)))
            for (system, _, _, scenario, batch), configs in groups.items()
            if len({c.workload.size for c in configs}) > 1}


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
                                                c.workload.dataset, c.family, not is_fp32(c.sut)))


def _size_cells(group: Group, c: Config) -> dict[str, str]:
    system, model, dataset, scenario, batch = group
    return {"system": system, "model": model, "dataset": dataset, "scenario": scenario,
            "batch": str(batch), "SUT": c.sut, "input size": c.workload.size_text,
            "× fw FP32": speedup_text(c, "speedup_vs_fp32"),
            "verdict": verdict(c, "speedup_vs_fp32") or "-"}


def _size_table(study: Study) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the speedup-by-size table: each metric's change after the speedup."""
    groups = size_groups(study)
    changes = quality_columns(scored_by([c for configs in groups.values() for c in configs]),
                              figure=False, agreement=False)
    header = SIZE_HEADER + [h for h, _ in changes]
    return header, [ordered(header, {**_size_cells(group, c), **{h: f(c) for h, f in changes}})
                    for group, configs in groups.items() for c in configs]


def size_rows(study: Study) -> list[list[str]]:
    return _size_table(study)[1]


def _dataset_table(study: Study) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the accuracy-by-dataset table: each metric's figure and change, and
    agreement with FP32 where a metric classifies."""
    configs = dataset_configs(study)
    shown = quality_columns(scored_by(configs))
    header = DATASET_HEADER + [h for h, _ in shown]
    return header, [ordered(header, {
        "system": c.system, "model": c.workload.model, "input size": c.workload.size_text,
        "dataset": c.workload.dataset, "SUT": c.sut, **{h: f(c) for h, f in shown}})
        for c in configs]


def dataset_rows(study: Study) -> list[list[str]]:
    return _dataset_table(study)[1]


def _size_record(group: Group, c: Config, metrics: list[Metric]) -> dict[str, Any]:
    """One configuration's row of ``speedup_by_size.csv``, at full precision: its change in
    its own metric's columns, the other metrics' blank."""
    system, model, dataset, scenario, batch = group
    found, change = c.derived["speedup_vs_fp32_ratio"], c.derived["quality_change"]
    changes = (c.derived["quality_change_vs_fp32"], change and change.low,
               change and change.high)
    height, width = c.workload.size
    return {"system": system, "model": model, "dataset": dataset, "scenario": scenario,
            "batch_size": batch, "sut": c.sut, "framework": c.family, "precision": c.variant,
            "input_height": height, "input_width": width,
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
    """``speedup_by_size.csv`` where the report's runs differ in input size."""
    groups = size_groups(study)
    if not groups:
        return []
    metrics = scored_by([c for configs in groups.values() for c in configs])
    header = SIZE_CSV_HEADER + [quality.csv_key(metric, suffix) for metric in metrics
                                for suffix in CHANGE_SUFFIXES]
    return [("speedup_by_size.csv", csv_text(header, [
        ordered(header, _size_record(group, c, metrics))
        for group, configs in groups.items() for c in configs]))]


def _tables(study: Study) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, header, rows) of each table the study has rows for."""
    sizes = [c for configs in size_groups(study).values() for c in configs]
    found = [(SIZE_TITLE, size_note(scored_by(sizes)), *_size_table(study)),
             (DATASET_TITLE, dataset_note(scored_by(dataset_configs(study))),
              *_dataset_table(study))]
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
