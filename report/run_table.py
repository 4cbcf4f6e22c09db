"""The percentile table of every run under a folder, as rows, CSV and Markdown.

Rows come from LoadGen's logs (``report.logged_run``, the one reader of a run's figure and
validity); ``results.json`` beside a log adds what LoadGen does not know (SUT, model, quick or
official, accuracy in its task's metric: ``report.quality`` names the column, one per metric
the runs are scored by). Every output form (console, CSV, Markdown) takes its cells by column
name from one record per run (``row_record``), so no form can drift a column off its header. A
log LoadGen did not finish is a marked row (validity INCOMPLETE) with a warning, never a plain
one; so is a run that other processes disturbed (results.json ``interference``), and so is one
whose results.json says other than its logs (the figures shown are LoadGen's).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.metric import TOP1, Metric
from quantmark.ground.records import RunRecord
from quantmark.report import quality
from quantmark.report.current_set import read_results
from quantmark.report.loadgen_log import PERCENTILES, RunSummary
from quantmark.report.logged_run import verify
from quantmark.report.percentiles import why_not
from quantmark.report.table_formats import markdown_table, ordered


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
    disturbed: str = ""  # "yes" / "no": other processes used the machine; "" when unknown
    disturbed_why: str = ""
    metric: Metric = TOP1  # what ``accuracy`` is in: the run's task's (top-1, mAP ...)
    #: where its results.json says other than LoadGen's logs (``report.logged_run``)
    disagrees: tuple[str, ...] = ()

    def metric_text(self) -> str:
        value = self.summary.metric_value
        if value is None:
            return "-"
        if self.summary.metric_unit == "ns":
            return f"{value / 1e6:.3f} ms"
        return f"{value:.2f} samples/s"


def find_runs(root: str | Path) -> list[Row]:
    """Every ``mlperf_log_detail.txt`` under ``root`` (hidden temp folders skipped); one that
    LoadGen did not finish, or that does not parse at all, is a row marked INCOMPLETE, and one
    whose results.json disagrees with its logs is flagged (``disagreement_warnings``)."""
    base = Path(root)
    rows: list[Row] = []
    for detail in sorted(base.rglob("mlperf_log_detail.txt")):
        if any(part.startswith(".") for part in detail.relative_to(base).parts):
            continue
        results = read_results(detail.parent)  # none: the log alone names the run
        logged = verify(detail.parent, results)
        rows.append(_row(detail.parent, logged.summary, results or RunRecord(),
                         logged.mismatches))
    return rows


def _mode(loadgen_mode: str) -> str:
    """LoadGen's test mode as the report names it; "" where the log does not say."""
    if not loadgen_mode:
        return ""
    return "accuracy" if "Accuracy" in loadgen_mode else "performance"


def _row(folder: Path, summary: RunSummary, results: RunRecord,
         disagrees: tuple[str, ...] = ()) -> Row:
    config, settings = results.config, results.settings
    metric = quality.metric_of(results)
    accuracy = quality.figure(results.accuracy, metric)
    thermal = results.machine.get("thermal") or {}
    interference = results.interference or {}
    if accuracy is None and quality.classifies(metric) and (folder / "accuracy.txt").is_file():
        first = (folder / "accuracy.txt").read_text().split(",")[0]
        if first.startswith("accuracy="):
            accuracy = float(first.split("=")[1].rstrip("%"))
    return Row(
        path=folder,
        system=results.system_id,
        sut=config.get("sut", ""),
        model=config.get("model", ""),
        # a log cut before its settings lacks the scenario: the runner's record names the run
        scenario=summary.scenario or str(config.get("scenario", "")),
        # a compliance test shows as TEST01/TEST04, not as another performance run
        mode=config.get("audit") or config.get("mode") or _mode(summary.mode),
        # a SUT failure's logs are kept in run_1.failed: shown, and marked
        run_kind="FAILED" if folder.name.endswith(".failed") else settings.get("mode", "unknown"),
        summary=summary,
        accuracy=accuracy,
        executed_precision=str(results.sut.get("executed_precision", "")),
        calibration_hash=str((results.calibration or {}).get("hash", "")),
        throttled={True: "yes", False: "no"}.get(thermal.get("throttled"), ""),
        throttling_reasons="; ".join(thermal.get("why") or []) if thermal.get("throttled") else "",
        disturbed={True: "yes", False: "no"}.get(interference.get("disturbed"), ""),
        disturbed_why=("; ".join(map(str, interference.get("why") or []))
                       if interference.get("disturbed") else ""),
        metric=metric,
        disagrees=disagrees,
    )


def _label(percentile: str) -> str:
    """``99.90`` -> ``p99.9``."""
    return f"p{percentile.rstrip('0').rstrip('.')}"


def _accuracy_key(metric: Metric) -> str:
    """The CSV column of an accuracy run's figure: ``accuracy_top1``, ``accuracy_map``."""
    return f"accuracy_{metric.key}"


def scored_by(rows: list[Row]) -> list[Metric]:
    """The metrics the rows' runs are scored by, first seen first (top-1 without any)."""
    return quality.in_order(row.metric for row in rows)


def header(metrics: list[Metric]) -> list[str]:
    """The CSV and Markdown columns: an accuracy column per metric."""
    return ["system", "sut", "executed_precision", "model", "scenario", "mode", "run",
            "validity", "metric", "metric_value", "metric_unit", "samples_per_s", "queries",
            "min_ms", "mean_ms", "max_ms", *[f"{_label(p)}_ms" for p in PERCENTILES],
            *[_accuracy_key(m) for m in metrics], "calibration_hash", "path", "throttled",
            "disturbed"]


def console_columns(metrics: list[Metric]) -> list[tuple[str, str]]:
    """The console table: (column label, field of row_record or "metric_text"); "-" for
    blanks."""
    return [("sut", "sut"), ("executed", "executed_precision"), ("model", "model"),
            ("scenario", "scenario"), ("mode", "mode"), ("run", "run"), ("validity", "validity"),
            ("metric", "metric_text"), ("samples/s", "samples_per_s"),
            *[(_label(p), f"{_label(p)}_ms") for p in PERCENTILES],
            *[(quality.value_label(m, unit=False), _accuracy_key(m)) for m in metrics],
            ("throttled", "throttled"), ("disturbed", "disturbed")]


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value / 1e6:.3f}"


def row_record(row: Row, root: Path, metrics: list[Metric] | None = None) -> dict[str, str]:
    """One run's cells by column name (the names of ``header(metrics)``; the row's own
    metric's alone without ``metrics``). A percentile is blank for Offline and where it rests
    on too few queries (``report.percentiles``); another metric's accuracy is blank."""
    s = row.summary
    return {
        "system": row.system, "sut": row.sut, "executed_precision": row.executed_precision,
        "model": row.model, "scenario": row.scenario, "mode": row.mode, "run": row.run_kind,
        "validity": s.validity, "metric": s.metric_name,
        "metric_value": "" if s.metric_value is None else f"{s.metric_value:.6g}",
        "metric_unit": s.metric_unit,
        "samples_per_s": "" if s.samples_per_second is None else f"{s.samples_per_second:.2f}",
        "min_ms": _ms(s.min_latency_ns), "mean_ms": _ms(s.mean_latency_ns),
        "max_ms": _ms(s.max_latency_ns),
        "queries": "" if s.query_count is None else str(s.query_count),
        **{f"{_label(p)}_ms": "" if why_not(row.scenario, p, s.query_count)
           else _ms(s.percentiles_ns.get(p)) for p in PERCENTILES},
        **{_accuracy_key(m): "" if row.accuracy is None or m != row.metric else
           f"{row.accuracy:.3f}" for m in metrics or [row.metric]},
        "calibration_hash": row.calibration_hash, "path": _relative(row.path, root),
        "throttled": row.throttled, "disturbed": row.disturbed,
    }


def _shown(row: Row, root: Path, metrics: list[Metric] | None = None) -> dict[str, str]:
    """``row_record`` as people read it: a percentile not shown says why (``n/a`` for Offline,
    one query of every sample; ``n/a (k queries)`` where it would be the slowest query)."""
    record = row_record(row, root, metrics)
    for p in PERCENTILES:
        record[f"{_label(p)}_ms"] = (why_not(row.scenario, p, row.summary.query_count)
                                     or record[f"{_label(p)}_ms"])
    return record


def console_cells(row: Row, root: Path, metrics: list[Metric] | None = None) -> list[str]:
    """The cells in ``console_columns(metrics)`` order, "-" where a value is blank."""
    metrics = metrics or [row.metric]
    record = {**_shown(row, root, metrics), "metric_text": row.metric_text()}
    return [record[field] or "-" for _, field in console_columns(metrics)]


def incomplete_warnings(rows: list[Row], root: Path) -> list[str]:
    """One line per run whose logs LoadGen did not finish: where, and what is missing."""
    return [f"{_relative(row.path, root)}: LoadGen's log is incomplete: "
            f"{row.summary.incomplete}. Its numbers are partial or missing; run it again."
            for row in rows if row.summary.incomplete]


def disagreement_warnings(rows: list[Row], root: Path) -> list[str]:
    """One line per run whose results.json says other than LoadGen's logs: what differs; the
    figures the report shows are LoadGen's."""
    return [f"{_relative(row.path, root)}: results.json disagrees with LoadGen's logs "
            f"({'; '.join(row.disagrees)}); the figures shown are LoadGen's. Restore the "
            "folder as the run left it, or run it again."
            for row in rows if row.disagrees]


def disturbed_warnings(rows: list[Row], root: Path) -> list[str]:
    """One line per run that other processes disturbed: where, and what they took."""
    return [f"{_relative(row.path, root)}: other processes disturbed this run "
            f"({row.disturbed_why or 'see results.json interference'}); its numbers may be "
            "slower than the machine's own. Run it again on a quiet machine."
            for row in rows if row.disturbed == "yes"]


def to_csv(rows: list[Row], root: Path) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    metrics = scored_by(rows)
    writer.writerow(header(metrics))
    for row in rows:
        writer.writerow(ordered(header(metrics), row_record(row, root, metrics)))
    return buffer.getvalue()


def to_markdown(rows: list[Row], root: Path) -> str:
    metrics = scored_by(rows)
    lines = markdown_table(header(metrics), [
        [v or "-" for v in ordered(header(metrics), _shown(row, root, metrics))] for row in rows])
    note = ("\nLatencies are LoadGen's own nearest-rank percentiles in ms. None for Offline "
            "(one query of every sample); a percentile p needs more than 1/(1-p) queries "
            "(p99: 101, p99.9: 1001), else it would be the slowest query and reads n/a (k "
            "queries). Runs marked `quick` are development runs, not valid for submission.\n")
    disagree = disagreement_warnings(rows, root)
    if disagree:
        note += ("\n**Warning: these runs' results.json disagree with LoadGen's logs; the "
                 "figures shown are LoadGen's:**\n\n" + "".join(f"- {line}\n" for line in disagree))
    broken = incomplete_warnings(rows, root)
    if broken:
        note += ("\n**Warning: some runs' LoadGen logs are incomplete (truncated); they are "
                 "marked INCOMPLETE:**\n\n" + "".join(f"- {line}\n" for line in broken))
    hot = [row for row in rows if row.throttled == "yes"]
    if hot:
        note += ("\n**Warning: the board throttled during these runs; their numbers are not its "
                 "steady speed (cool it and run them again):**\n\n" + "".join(
                     f"- {_relative(row.path, root)}: {row.throttling_reasons}\n" for row in hot))
    disturbed = disturbed_warnings(rows, root)
    if disturbed:
        note += ("\n**Warning: other processes used the machine during these runs:**\n\n"
                 + "".join(f"- {line}\n" for line in disturbed))
    return "\n".join(lines) + "\n" + note


def write_report(root: str | Path) -> tuple[list[Row], Path, Path]:
    """Write ``report.csv`` and ``report.md`` into ``root``; return rows and both paths."""
    base = Path(root)
    rows = find_runs(base)
    csv_path, md_path = base / "report.csv", base / "report.md"
    atomic_write_text(csv_path, to_csv(rows, base))
    atomic_write_text(md_path, to_markdown(rows, base))
    return rows, csv_path, md_path
