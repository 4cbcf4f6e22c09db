"""The dimensions a report's runs may differ in beside their SUT: an image model's input size
and a text model's sequence length (``run.py sweep --image-sizes`` / ``--seq-lens``).

Each has its table of speedups over FP32 and CSV (``workload_tables``) and its figure
(``size_figure``), built the same way from its ``Axis``: what the runs are grouped by, how a
value is written and ordered, and the words that name it. A group holds one model (a text
model at one padding) on one dataset, scenario and batch, and only where its runs took two
values or more of the axis: nothing is pooled across values, they only sit side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quantmark.report.characterize import Config, Study, is_fp32
from quantmark.report.workloads import Workload, model_label

Group = tuple[str, str, str, str, int]  # system, model, dataset, scenario, batch


@dataclass(frozen=True)
class Axis:
    """One dimension: its words, its files and how its values are read from a workload."""

    name: str  # the table's column and the words: "input size"
    same: str  # what a speedup's FP32 shares with it, in words: "input size"
    unit: str  # the figure's axis unit: "pixels"
    slug: str  # in the figure's file name: "size"
    paired: str  # how a quality change pairs its runs: "image by image"
    csv_file: str
    csv_columns: tuple[str, ...]
    value: Callable[[Workload], Any]  # None where the run is not on this axis
    position: Callable[[Workload], float]  # its order, and the figure's x
    text: Callable[[Workload], str]
    csv_values: Callable[[Workload], tuple[Any, ...]]

    @property
    def title(self) -> str:
        return f"Speedup over FP32 by {self.name}"


def _pixels(w: Workload) -> float:
    height, width = w.size or (0, 0)
    return math.sqrt(height * width)


SIZE = Axis("input size", "input size", "pixels", "size", "image by image",
            "speedup_by_size.csv", ("input_height", "input_width"), lambda w: w.size, _pixels,
            lambda w: w.size_text, lambda w: tuple(w.size or (None, None)))
SEQ_LEN = Axis("sequence length", "sequence length, padding", "tokens", "seq-len",
               "sentence by sentence", "speedup_by_seq_len.csv", ("seq_len", "padding"),
               lambda w: w.seq_len, lambda w: float(w.seq_len or 0),
               lambda w: str(w.seq_len), lambda w: (w.seq_len, w.padding or "fixed"))
AXES = (SIZE, SEQ_LEN)


def shape_text(w: Workload) -> str:
    """What a run's input was, on whichever axis it has: ``128``, ``224x320``, ``32 tokens``."""
    if w.size is None and w.seq_len:
        return f"{w.seq_len} tokens"
    return w.size_text


def groups(study: Study, axis: Axis) -> dict[Group, list[Config]]:
    """The reduced-precision configurations to compare across ``axis``: per (system, model,
    dataset, scenario, batch), where that group ran two values or more; by SUT, then value.
    A text model's padding is part of its model (``minilm padding=dynamic``)."""
    found: dict[tuple, list[Config]] = {}
    for c in study.configs:
        w = c.workload
        if w is None or axis.value(w) is None or is_fp32(c.sut) or \
                not c.derived["fp32_baseline"]:
            continue  # an ensemble has no FP32 of its own
        found.setdefault((c.system, w.model, w.padding, w.dataset_id, c.scenario,
                          c.batch_size), []).append(c)
    return {(system, model_label(model, "", "", padding=padding), configs[0].workload.dataset,
             scenario, batch): sorted(configs, key=lambda c: (c.sut, axis.position(c.workload)))
            for (system, model, padding, _, scenario, batch), configs in found.items()
            if len({axis.value(c.workload) for c in configs}) > 1}
