"""The percentile table of every run under a folder, as rows, CSV and Markdown.

Rows come from LoadGen's detail logs (``report.loadgen_log``); ``results.json`` beside a log
adds what LoadGen does not know (SUT, model, quick or official, accuracy).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.hashing import atomic_write_text
from report.loadgen_log import PERCENTILES, LogError, RunSummary, summarize_file


@dataclass
class Row:
    """One run in the report."""

    path: Path
    system: str
    sut: str
    model: str
    scenario: str
    mode: str
    run_kind: str  # "quick" | "official" | "unknown"
    summary: RunSummary
    accuracy: float | None
    executed_precision: str = ""  # what the SUT proved ran (see each SUT's describe())
    calibration_hash: str = ""  # the shared calibration set of static INT8 runs
    throttled: str = ""  # "yes" / "no" from the board's thermal snapshots, "" when unknown
    throttling_reasons: str = ""

    def metric_text(self) -> str:
        value = self.summary.metric_value
        if value is None:
            return "-"
        if self.summary.metric_unit == "ns":
            return f"{value / 1e6:.3f} ms"
        return f"{value:.2f} samples/s"


def find_runs(root: str | Path) -> list[Row]:
    """Every ``mlperf_log_detail.txt`` under ``root`` (hidden temp folders skipped)."""
    base = Path(root)
    rows: list[Row] = []
    for detail in sorted(base.rglob("mlperf_log_detail.txt")):
        if any(part.startswith(".") for part in detail.relative_to(base).parts):
            continue
        try:
            summary = summarize_file(detail)
        except LogError:
            continue
        rows.append(_row(detail.parent, summary))
    return rows


def _row(folder: Path, summary: RunSummary) -> Row:
    results: dict[str, Any] = {}
    results_file = folder / "results.json"
    if results_file.is_file():
        results = json.loads(results_file.read_text())
    config = results.get("config", {})
    settings = results.get("settings", {})
    accuracy = (results.get("accuracy") or {}).get("top1")
    thermal = (results.get("machine") or {}).get("thermal") or {}
    if accuracy is None and (folder / "accuracy.txt").is_file():
        first = (folder / "accuracy.txt").read_text().split(",")[0]
        if first.startswith("accuracy="):
            accuracy = float(first.split("=")[1].rstrip("%"))
    return Row(
        path=folder,
        system=results.get("system_id", ""),
        sut=config.get("sut", ""),
        model=config.get("model", ""),
        scenario=summary.scenario,
        # a compliance test shows as TEST01/TEST04, not as another performance run
        mode=config.get("audit") or config.get(
            "mode", "accuracy" if "Accuracy" in summary.mode else "performance"),
        # a SUT failure's logs are kept in run_1.failed: shown, and marked
        run_kind="FAILED" if folder.name.endswith(".failed") else settings.get("mode", "unknown"),
        summary=summary,
        accuracy=accuracy,
        executed_precision=str(results.get("sut", {}).get("executed_precision", "")),
        calibration_hash=str((results.get("calibration") or {}).get("hash", "")),
        throttled={True: "yes", False: "no"}.get(thermal.get("throttled"), ""),
        throttling_reasons="; ".join(thermal.get("why") or []) if thermal.get("throttled") else "",
    )


HEADER = ["system", "sut", "executed_precision", "model", "scenario", "mode", "run",
          "validity", "metric", "metric_value", "metric_unit", "samples_per_s", "min_ms",
          "mean_ms", "max_ms", *[f"p{p.rstrip('0').rstrip('.')}_ms" for p in PERCENTILES],
          "accuracy_top1", "calibration_hash", "path", "throttled"]


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value / 1e6:.3f}"


def row_values(row: Row, root: Path) -> list[str]:
    s = row.summary
    return [
        row.system, row.sut, row.executed_precision, row.model, row.scenario, row.mode,
        row.run_kind, s.validity,
        s.metric_name, "" if s.metric_value is None else f"{s.metric_value:.6g}", s.metric_unit,
        "" if s.samples_per_second is None else f"{s.samples_per_second:.2f}",
        _ms(s.min_latency_ns), _ms(s.mean_latency_ns), _ms(s.max_latency_ns),
        *[_ms(s.percentiles_ns.get(p)) for p in PERCENTILES],
        "" if row.accuracy is None else f"{row.accuracy:.3f}", row.calibration_hash,
        _relative(row.path, root), row.throttled,
    ]


def to_csv(rows: list[Row], root: Path) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    for row in rows:
        writer.writerow(row_values(row, root))
    return buffer.getvalue()


def to_markdown(rows: list[Row], root: Path) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in rows:
        lines.append("| " + " | ".join(v or "-" for v in row_values(row, root)) + " |")
    note = ("\nLatencies are LoadGen's own nearest-rank percentiles in ms. Runs marked `quick` "
            "are development runs, not valid for submission.\n")
    hot = [row for row in rows if row.throttled == "yes"]
    if hot:
        note += ("\n**Warning: the board throttled during these runs; their numbers are not its "
                 "steady speed (cool it and run them again):**\n\n" + "".join(
                     f"- {_relative(row.path, root)}: {row.throttling_reasons}\n" for row in hot))
    return "\n".join(lines) + "\n" + note


def write_report(root: str | Path) -> tuple[list[Row], Path, Path]:
    """Write ``report.csv`` and ``report.md`` into ``root``; return rows and both paths."""
    base = Path(root)
    rows = find_runs(base)
    csv_path, md_path = base / "report.csv", base / "report.md"
    atomic_write_text(csv_path, to_csv(rows, base))
    atomic_write_text(md_path, to_markdown(rows, base))
    return rows, csv_path, md_path
