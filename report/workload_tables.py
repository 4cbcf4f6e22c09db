"""When a report's runs differ in input size or dataset: each reduced precision's speedup over
FP32 as a function of input size, per framework, and each precision's accuracy change on each
dataset (the seed study's "models, datasets, image sizes" comparison).

Every row is one configuration's own figure, as ``characterize.derive`` made it: its speedup
over the FP32 SUT of the same framework on the same machine, model, input size, dataset, SUT
options, scenario and batch (repeats paired by index; the interval corrected for the report's
number of speedup verdicts), and its paired top-1 change over that FP32's accuracy run. Nothing
is pooled across sizes, datasets or options: they only sit side by side here.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from quantmark.report.characterize import Config, Study, is_fp32
from quantmark.report.intervals import speedup_text, top1_change_text, verdict
from quantmark.report.table_formats import csv_text, html_table, markdown_table, number, ordered

if TYPE_CHECKING:
    from quantmark.report.figures import Figure

SIZE_TITLE = "Speedup over FP32 by input size"
DATASET_TITLE = "Accuracy change by dataset"
SIZE_NOTE = ("Each row: one configuration's speedup over its framework's FP32 at the same input "
             "size, dataset, SUT options, scenario and batch (median over repeats, paired by "
             "repeat; its interval corrected for the report's number of speedup verdicts), and "
             "its top-1 change over that FP32, paired image by image. A speedup whose interval "
             "holds 1× is 'no measurable difference'.")
DATASET_NOTE = ("Each row: one SUT's top-1 on one dataset, and its change over its framework's "
                "FP32 on the same dataset and input size, paired image by image (95% interval).")
SIZE_HEADER = ["system", "model", "dataset", "scenario", "batch", "SUT", "input size",
               "× fw FP32", "verdict", "Δ top-1 vs fw FP32"]
DATASET_HEADER = ["system", "model", "input size", "dataset", "SUT", "top-1 %",
                  "Δ top-1 vs fw FP32", "agree FP32 %"]
SIZE_CSV_HEADER = ["system", "model", "dataset", "scenario", "batch_size", "sut", "framework",
                   "precision", "input_height", "input_width", "speedup_vs_fp32",
                   "speedup_low", "speedup_high", "speedup_confidence", "speedup_verdict",
                   "speedup_paired", "n", "fp32_baseline", "top1_change_pts",
                   "top1_change_low_pts", "top1_change_high_pts"]

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
    datasets here: its derived top-1 and paired change are the accuracy runs'."""
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
            "verdict": verdict(c, "speedup_vs_fp32") or "-",
            "Δ top-1 vs fw FP32": top1_change_text(c)}


def size_rows(study: Study) -> list[list[str]]:
    return [ordered(SIZE_HEADER, _size_cells(group, c))
            for group, configs in size_groups(study).items() for c in configs]


def dataset_rows(study: Study) -> list[list[str]]:
    return [ordered(DATASET_HEADER, {
        "system": c.system, "model": c.workload.model, "input size": c.workload.size_text,
        "dataset": c.workload.dataset, "SUT": c.sut, "top-1 %": number(c.derived["top1"], 2),
        "Δ top-1 vs fw FP32": top1_change_text(c),
        "agree FP32 %": number(c.derived["agreement_with_fp32"], 1)})
        for c in dataset_configs(study)]


def _size_record(group: Group, c: Config) -> dict[str, Any]:
    """One configuration's row of ``speedup_by_size.csv``, at full precision."""
    system, model, dataset, scenario, batch = group
    found, change = c.derived["speedup_vs_fp32_ratio"], c.derived["top1_change"]
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
            "top1_change_pts": c.derived["top1_change_vs_fp32"],
            "top1_change_low_pts": change and change.low,
            "top1_change_high_pts": change and change.high}


def csv_texts(study: Study) -> list[tuple[str, str]]:
    """``speedup_by_size.csv`` where the report's runs differ in input size."""
    groups = size_groups(study)
    if not groups:
        return []
    return [("speedup_by_size.csv", csv_text(SIZE_CSV_HEADER, [
        ordered(SIZE_CSV_HEADER, _size_record(group, c))
        for group, configs in groups.items() for c in configs]))]


def _tables(study: Study) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, note, header, rows) of each table the study has rows for."""
    found = [(SIZE_TITLE, SIZE_NOTE, SIZE_HEADER, size_rows(study)),
             (DATASET_TITLE, DATASET_NOTE, DATASET_HEADER, dataset_rows(study))]
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


def figures(study: Study) -> list[Figure]:
    """The speedup-by-size figures (``report.size_figure``, which reads these groups)."""
    from quantmark.report.size_figure import size_figures

    return size_figures(study)
