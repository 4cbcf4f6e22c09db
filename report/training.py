"""train-bench results in reports: read the JSONs, pair each AMP run with its FP32 run, tables.

One JSON per (framework, model, batch size, image size, precision), written by
``quantmark.train.step_bench``. The ratios (AMP / FP32 of step time, images/s and peak memory) are
computed here, in one place, for the train-bench summary and the characterization report alike.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from quantmark.ground.records import TrainBenchRecord
from quantmark.report.record_folders import hidden, read_records
from quantmark.report.table_formats import csv_text, html_table, markdown_table, number

# <framework>-<model>-b<batch>[-s<image size>]-<precision>.json
FILE_NAME = re.compile(r"^(torch|tf)-.+-b\d+(-s\d+)?-(fp32|amp)\.json$")
PRECISION_ORDER = ("fp32", "amp")


def file_name(framework: str, model: str, batch_size: int, image_size: int,
              default_size: int, precision: str) -> str:
    size = "" if image_size == default_size else f"-s{image_size}"
    return f"{framework}-{model}-b{batch_size}{size}-{precision}.json"


def load(folders: list[str | Path]) -> list[TrainBenchRecord]:
    """Every train-bench record under ``folders`` (by its file name), FP32 before AMP within a
    configuration; one that cannot be read is left out, and the log says so."""
    paths = [path for root in map(Path, folders) for path in sorted(root.rglob("*.json"))
             if FILE_NAME.match(path.name) and not hidden(path, root)]
    records = read_records(paths, TrainBenchRecord)
    return sorted(records, key=lambda r: (*_group(r), PRECISION_ORDER.index(r.precision)
                                          if r.precision in PRECISION_ORDER else 9))


def _group(record: TrainBenchRecord) -> tuple:
    """What an AMP run must share with its FP32 reference."""
    return (str(record.machine.get("hostname", "unknown")), record.framework, record.model,
            record.device, record.batch_size, record.image_size)


def _ratio(mine: float | None, theirs: float | None) -> float | None:
    return mine / theirs if mine and theirs else None


def rows(records: list[TrainBenchRecord]) -> list[dict[str, Any]]:
    """One flat row per record, with the AMP / FP32 ratios (1.0 on the FP32 row itself)."""
    fp32 = {_group(r): r for r in records if r.precision == "fp32"}
    out = []
    for r in records:
        ref = fp32.get(_group(r))
        memory, times, steps = r.memory, r.times, r.step_time_s
        same_memory = ref is not None and ref.memory["kind"] == memory["kind"]
        out.append({
            "system": _group(r)[0], "framework": r.framework, "model": r.model,
            "device": r.device, "device_name": r.device_name,
            "precision": r.precision, "executed_precision": r.executed_precision,
            "compute_dtype": r.amp["evidence"].get("compute_dtype", ""),
            "batch_size": r.batch_size, "image_size": r.image_size, "steps": r.steps,
            "warmup_steps": r.warmup_steps, "first_step_s": times["first_step_s"],
            "warmup_s": times["warmup_s"], "step_median_s": steps["median"],
            "step_mean_s": steps["mean"], "step_p90_s": steps["p90"],
            "images_per_s": r.images_per_s, "peak_memory_mb": memory["peak_mb"],
            "memory_kind": memory["kind"], "memory_source": memory["source"],
            "training_memory_mb": memory.get("training_increment_mb"),
            "loss_first": r.loss_first, "loss_last": r.loss_last, "loss_finite": r.loss_finite,
            "step_time_vs_fp32": _ratio(steps["median"],
                                        ref.step_time_s["median"] if ref else None),
            "images_per_s_vs_fp32": _ratio(r.images_per_s, ref.images_per_s if ref else None),
            "memory_vs_fp32": _ratio(memory["peak_mb"],
                                     ref.memory["peak_mb"] if same_memory else None),
            "path": str(r.source),
        })
    return out


CSV_HEADER = ["system", "framework", "model", "device", "device_name", "precision",
              "executed_precision", "compute_dtype", "batch_size", "image_size", "steps",
              "warmup_steps", "first_step_s", "warmup_s", "step_median_s", "step_mean_s",
              "step_p90_s", "images_per_s", "peak_memory_mb", "memory_kind", "memory_source",
              "training_memory_mb", "loss_first", "loss_last", "loss_finite",
              "step_time_vs_fp32", "images_per_s_vs_fp32", "memory_vs_fp32", "path"]


def to_csv(table: list[dict[str, Any]]) -> str:
    """Full precision (``repr`` of floats): the CSV must equal the JSONs, not a rounding."""
    return csv_text(CSV_HEADER, [[row[k] for k in CSV_HEADER] for row in table])


# (header, value) of the tables shown on the console, in Markdown and in HTML
COLUMNS = [
    ("framework", lambda r: r["framework"]),
    ("model", lambda r: r["model"]),
    ("device", lambda r: r["device"]),
    ("precision", lambda r: r["precision"]),
    ("executed", lambda r: r["executed_precision"]),
    ("batch", lambda r: str(r["batch_size"])),
    ("image", lambda r: str(r["image_size"])),
    ("steps", lambda r: str(r["steps"])),
    ("warm-up s", lambda r: number(r["warmup_s"], 2)),
    ("p50 ms", lambda r: number(r["step_median_s"] * 1e3, 1)),
    ("mean ms", lambda r: number(r["step_mean_s"] * 1e3, 1)),
    ("p90 ms", lambda r: number(r["step_p90_s"] * 1e3, 1)),
    ("images/s", lambda r: number(r["images_per_s"], 2)),
    ("peak MB", lambda r: f"{number(r['peak_memory_mb'], 0)} {r['memory_kind']}"),
    ("loss", lambda r: f"{r['loss_first']:.2f}→{r['loss_last']:.2f}"),
    ("step ×FP32", lambda r: number(r["step_time_vs_fp32"], 2, "×")),
    ("img/s ×FP32", lambda r: number(r["images_per_s_vs_fp32"], 2, "×")),
    ("mem ×FP32", lambda r: number(r["memory_vs_fp32"], 2, "×")),
]
HEADER = [h for h, _ in COLUMNS]


def cells(table: list[dict[str, Any]]) -> list[list[str]]:
    return [[f(r) for _, f in COLUMNS] for r in table]


NOTES = [
    "Synthetic data: one seeded batch of random images and random labels (1000 classes), "
    "reused every step; SGD with momentum, cross-entropy. Warm-up steps (graph building, "
    "compilation, allocator growth) are timed apart and left out of the step statistics.",
    "AMP on a GPU: fp16 autocast + GradScaler (torch), mixed_float16 + LossScaleOptimizer (TF); "
    "on a CPU: bf16 autocast (torch), mixed_bfloat16 (TF). `executed` is what ran; the JSON "
    "holds the evidence (the dtype a convolution produced).",
    "p50/mean/p90 ms: per-step wall time (nearest-rank p90); loss: first warm-up step → last "
    "timed step. images/s = batch / median step time. Peak memory: (gpu) the framework "
    "allocator's peak on the GPU; (cpu) the process's peak resident memory (getrusage "
    "ru_maxrss), which includes the framework itself, so its ratio understates the training's "
    "own difference.",
    "×FP32: the AMP figure over the FP32 figure of the same framework, model, device, batch "
    "and image size (step time below 1× and images/s above 1× mean AMP is faster).",
]


def markdown(table: list[dict[str, Any]], level: str = "##") -> list[str]:
    lines = [f"{level} Training (train-bench)", ""] + markdown_table(HEADER, cells(table))
    return lines + [""] + [f"- {n}" for n in NOTES]


def to_html(table: list[dict[str, Any]]) -> str:
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in NOTES)
    return f"<h2>Training (train-bench)</h2>{html_table(HEADER, cells(table))}<ul>{notes}</ul>"
