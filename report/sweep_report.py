"""Write the characterization report: report.md, report.csv, runs.csv, report.html, figures/.

``report.csv`` has one row per configuration (medians over repeats with their 95% intervals,
speedups with their verdicts, the paired change in the task's metric (top-1, a detector's mAP:
``report.quality`` labels it), the runs other processes disturbed);
``runs.csv`` one row per LoadGen run, every number as LoadGen logged it. ``report.html`` is
self-contained (figures embedded), so it can be mailed or attached as one file.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import quantmark.report.profile_section as profile_section  # run.py profile's records
import quantmark.report.recommend_section as recommend_section  # run.py recommend's
import quantmark.report.workload_tables as workload_tables  # by size, length, dataset
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_text
from quantmark.ground.metric import TOP1, Metric
from quantmark.report import diagnosis_section, ensemble_tables, ensembles, quality, training
from quantmark.report.characterize import Config, Run, Study, batch_scan, load
from quantmark.report.ensemble_figure import ensemble_figures
from quantmark.report.figures import Figure, all_figures
from quantmark.report.intervals import (
    disturbed_text,
    metric_text,
    quality_columns,
    repeat_index,
    speedup_text,
    verdict,
)
from quantmark.report.loadgen_log import PERCENTILES
from quantmark.report.machine_table import MACHINE_HEADER, machine_rows
from quantmark.report.percentiles import CSV_COLUMNS, csv_cells, why_not
from quantmark.report.reportable import require_reportable
from quantmark.report.size_figure import size_figures
from quantmark.report.study_notes import metrics, notes, opening_warnings
from quantmark.report.table_formats import csv_text, html_table, markdown_table, number, ordered


@dataclass
class Written:
    study: Study
    files: list[Path]
    diagnoses: list[dict[str, Any]] = field(default_factory=list)  # ``run.py diagnose``'s


def _pct(config: Config, key: str) -> str:
    """The percentile's median over repeats in ms, its interval from 3 runs on; ``n/a`` for
    Offline and ``n/a (k queries)`` where it would be the slowest query (``percentiles``)."""
    return config.derived["percentiles"][key].text()


Column = tuple[str, Callable[[Config], str]]
# (header, value) of the summary tables shown in Markdown and HTML: before the quality columns
LEADING: list[Column] = [
    ("SUT", lambda c: f"{c.sut} ⚠" if c.derived["disturbed"] else c.sut),
    ("executed", lambda c: c.derived["executed_precision"] or "-"),
    ("batch", lambda c: str(c.batch_size)),
    ("n", lambda c: str(c.derived["n"])),
    ("validity", lambda c: c.derived["validity"]),
    ("throttled", lambda c: c.derived["throttled"] or "-"),
    ("disturbed", disturbed_text),
    ("official metric", metric_text),
    ("samples/s", lambda c: number(c.derived["samples_per_s"], 1)),
    ("× fw FP32", lambda c: speedup_text(c, "speedup_vs_fp32")),
    ("× best FP32", lambda c: speedup_text(c, "speedup_vs_best_fp32")),
]
# ... and after them
TRAILING: list[Column] = [
    ("p50 ms", lambda c: _pct(c, "50.00")),
    ("p90 ms", lambda c: _pct(c, "90.00")),
    ("p95 ms", lambda c: _pct(c, "95.00")),
    ("p97 ms", lambda c: _pct(c, "97.00")),
    ("p99 ms", lambda c: _pct(c, "99.00")),
    ("p99.9 ms", lambda c: _pct(c, "99.90")),
    ("size MB", lambda c: number(c.derived["model_size_mb"], 1)),
    ("convert s", lambda c: number(c.derived["conversion_s"], 1)),
    ("load s", lambda c: number(c.derived["load_s"], 2)),
    ("warm-up s", lambda c: number(c.derived["warmup_s"], 2)),
    ("peak RSS MB", lambda c: number(c.derived["peak_rss_mb"], 0)),
    ("J/sample*", lambda c: number(c.derived["energy_j_per_sample"], 4)),
    ("fingerprint", lambda c: c.derived["fingerprint"]),
]


def columns(scored_by: list[Metric]) -> list[Column]:
    """The summary table's columns for rows scored by ``scored_by`` (``report.quality``): a
    figure and a paired change per metric, agreement with FP32 where a metric classifies."""
    return [*LEADING, *quality_columns(scored_by), *TRAILING]


COLUMNS = columns([TOP1])  # a classification table's, as before tasks


def _label(percentile: str) -> str:
    """``99.90`` -> ``p99.9``."""
    return f"p{percentile.rstrip('0').rstrip('.')}"


def _ratio_columns(name: str) -> list[str]:
    """A speedup's report.csv columns: its point, interval and the interval's level (corrected
    for the report's number of verdicts), verdict, whether paired."""
    return [name, f"{name}_low", f"{name}_high", f"{name}_confidence", f"{name}_verdict",
            f"{name}_paired"]


# a metric's report.csv columns (``quality.csv_key``): top1, top1_change_vs_fp32_pts ...
QUALITY_SUFFIXES = ("", "change_vs_fp32_pts", "change_low_pts", "change_high_pts", "change_p",
                    "change_test", "change_verdict", "change_samples", "change_groups",
                    "change_left_out")


def csv_header(scored_by: list[Metric]) -> list[str]:
    """report.csv's columns: one group per metric the rows are scored by (``QUALITY_SUFFIXES``)."""
    return ["system", "model", "sut", "framework", "precision", "scenario", "batch_size", "n",
            "run_kind", "validity", "metric_name", "metric_unit", "metric_median", "metric_low",
            "metric_high", "metric_interval_method", "metric_mean", "metric_std", "metric_min",
            "metric_max", "samples_per_s_median", "samples_per_s_low", "samples_per_s_high",
            "samples_per_s_mean", "samples_per_s_std", "queries_min", *CSV_COLUMNS,
            *_ratio_columns("speedup_vs_fp32"), *_ratio_columns("speedup_vs_best_fp32"),
            "best_fp32", *[quality.csv_key(metric, suffix) for metric in scored_by
                           for suffix in QUALITY_SUFFIXES],
            "agreement_with_fp32_pct", "agreement_low_pct", "agreement_high_pct", "weights",
            "model_size_mb", "conversion_s", "conversion_steps", "prepare_s", "load_s",
            "warmup_s", "peak_rss_mb",
            "gpu_memory_mb", "energy_j_per_sample_informative", "power_w_informative",
            "executed_precision", "fingerprint", "workers", "throttled", "throttling_reasons",
            "disturbed_runs", "disturbance_checked_runs", "disturbed_why"]


def _agreement_record(d: dict[str, Any]) -> dict[str, Any]:
    """The agreement's interval (blank where there is none: too few sources, or no pair)."""
    found = d.get("agreement_interval")
    return {"agreement_low_pct": None if found is None else found.low,
            "agreement_high_pct": None if found is None else found.high}


RUNS_HEADER = ["system", "model", "sut", "scenario", "batch_size", "repeat", "validity",
               "metric_name", "metric_value", "metric_unit", "samples_per_s", "queries",
               "min_latency_ns", "mean_latency_ns", "max_latency_ns",
               *[f"{_label(p)}_latency_ns" for p in PERCENTILES], "path"]


def _ratio_record(c: Config, name: str) -> dict[str, Any]:
    """A speedup's cells (``RATIO_COLUMNS``)."""
    found = c.derived[f"{name}_ratio"]
    return {name: c.derived[name], f"{name}_low": found and found.low,
            f"{name}_high": found and found.high, f"{name}_confidence": found and found.confidence,
            f"{name}_verdict": verdict(c, name),
            f"{name}_paired": found and found.paired}


def _quality_record(d: dict[str, Any], scored_by: list[Metric]) -> dict[str, Any]:
    """The row's figure and its paired change in its own metric's columns; the other metrics'
    blank. A change without a p-value (a bootstrap's) leaves it blank too."""
    change, own = d["quality_change"], d["quality_metric"]
    p_value = change and change.p_value
    values = (d["quality"], d["quality_change_vs_fp32"], change and change.low,
              change and change.high, None if p_value != p_value else p_value,
              change and change.method, change and change.verdict, change and change.n_samples,
              change and change.n_groups, change and change.left_out)
    return {quality.csv_key(metric, suffix): value if metric == own else None
            for metric in scored_by
            for suffix, value in zip(QUALITY_SUFFIXES, values, strict=True)}


def _interval_record(d: dict[str, Any]) -> dict[str, Any]:
    """The metric's and samples/s's median and 95% interval."""
    metric, samples = d["metric_interval"], d["samples_per_s_interval"]
    return {
        "metric_median": d["metric"], "metric_low": metric and metric.low,
        "metric_high": metric and metric.high, "metric_interval_method": metric and metric.method,
        "samples_per_s_median": d["samples_per_s"], "samples_per_s_low": samples and samples.low,
        "samples_per_s_high": samples and samples.high,
    }


def _config_record(c: Config, scored_by: list[Metric] | None = None) -> dict[str, Any]:
    """One configuration's report.csv cells by column name (``csv_header(scored_by)``; its
    own metric's alone without ``scored_by``)."""
    d = c.derived
    return {
        "system": c.system, "model": c.model, "sut": c.sut, "framework": c.family,
        "precision": c.variant, "scenario": c.scenario, "batch_size": c.batch_size, "n": d["n"],
        "run_kind": d["run_kind"], "validity": d["validity"], "metric_name": d["metric_name"],
        "metric_unit": d["metric_unit"], **_interval_record(d), "metric_mean": d["metric_mean"],
        "metric_std": d["metric_std"], "metric_min": d["metric_min"],
        "metric_max": d["metric_max"], "samples_per_s_mean": d["samples_per_s_mean"],
        "samples_per_s_std": d["samples_per_s_std"],
        "queries_min": d["queries"], **csv_cells(d["percentiles"]),
        **_ratio_record(c, "speedup_vs_fp32"), **_ratio_record(c, "speedup_vs_best_fp32"),
        "best_fp32": d["best_fp32"], **_quality_record(d, scored_by or [d["quality_metric"]]),
        "agreement_with_fp32_pct": d["agreement_with_fp32"], **_agreement_record(d),
        "weights": d["weights"],
        "model_size_mb": d["model_size_mb"], "conversion_s": d["conversion_s"],
        "conversion_steps": "; ".join(f"{k}={v}" for k, v in d["conversion_steps"].items()),
        "prepare_s": d["prepare_s"], "load_s": d["load_s"], "warmup_s": d["warmup_s"],
        "peak_rss_mb": d["peak_rss_mb"], "gpu_memory_mb": d["gpu_memory_mb"],
        "energy_j_per_sample_informative": d["energy_j_per_sample"],
        "power_w_informative": d["power_w"], "executed_precision": d["executed_precision"],
        "fingerprint": d["fingerprint"], "workers": d["workers"], "throttled": d["throttled"],
        "throttling_reasons": "; ".join(d["throttling_reasons"]),
        "disturbed_runs": d["disturbed"], "disturbance_checked_runs": d["disturbance_checked"],
        "disturbed_why": "; ".join(d["disturbed_why"]),
    }


def report_csv(study: Study) -> str:
    scored_by = metrics(study)
    header = csv_header(scored_by)
    return csv_text(header, [ordered(header, _config_record(c, scored_by))
                             for c in study.configs])


def _run_record(c: Config, run: Run) -> dict[str, Any]:
    """One LoadGen run's runs.csv cells by column name (``RUNS_HEADER``), as LoadGen logged."""
    s = run.summary
    return {
        "system": c.system, "model": c.model, "sut": c.sut, "scenario": c.scenario,
        "batch_size": c.batch_size, "repeat": repeat_index(run) or 1,
        "validity": s.validity, "metric_name": s.metric_name, "metric_value": s.metric_value,
        "metric_unit": s.metric_unit, "samples_per_s": s.samples_per_second,
        "min_latency_ns": s.min_latency_ns, "mean_latency_ns": s.mean_latency_ns,
        "max_latency_ns": s.max_latency_ns, "queries": s.query_count,
        **{f"{_label(p)}_latency_ns": None if why_not(c.scenario, p, s.query_count)
           else s.percentiles_ns.get(p) for p in PERCENTILES},
        "path": str(run.folder),
    }


def runs_csv(study: Study) -> str:
    return csv_text(RUNS_HEADER, [ordered(RUNS_HEADER, _run_record(c, run))
                                  for c in study.configs for run in c.runs])


def _sections(study: Study) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) per machine, model and scenario, the fp32 of each framework
    first; the quality columns those of the metric its rows are scored by (one model: one)."""
    out = []
    for system, model, scenario in sorted(study.keys("system", "model", "scenario")):
        mine = [c for c in study.configs if (c.system, c.model, c.scenario) ==
                (system, model, scenario)]
        shown = columns(quality.in_order(c.derived["quality_metric"] for c in mine))
        out.append((f"{model} — {scenario} — {system}", [h for h, _ in shown],
                    [[f(c) for _, f in shown] for c in mine]))
    return out


def _explained_rows(study: Study) -> list[list[str]]:
    return [ordered(EXPLAINED_HEADER, {
        "system": e.system, "model": e.model, "SUT": e.sut,
        "run": e.scenario if e.mode != "accuracy" else "accuracy", "batch": str(e.batch_size),
        "status": e.status, "why": e.message}) for e in study.explained]


EXPLAINED_HEADER = ["system", "model", "SUT", "run", "batch", "status", "why"]
SCAN_HEADER = ["system", "model", "SUT", "Offline batch sizes", "best batch", "best samples/s",
               "SingleStream ms (batch 1)"]


def _scan_rows(study: Study) -> list[list[str]]:
    return [ordered(SCAN_HEADER, {
        "system": r["system"], "model": r["model"], "SUT": r["sut"],
        "Offline batch sizes": ",".join(map(str, r["batch_sizes"])) or "-",
        "best batch": str(r["best_batch"] or "-"),
        "best samples/s": number(r["best_samples_per_s"], 1),
        "SingleStream ms (batch 1)": number(r["single_stream_ms"], 3)})
        for r in batch_scan(study)]


def to_markdown(study: Study, figures: list[Figure],
                section: ensembles.Section | None = None,
                diagnoses: list[dict[str, Any]] | None = None, profiles: list[Any] = (),
                recommendations: list[Any] = ()) -> str:
    lines = ["# quantmark characterization report", "",
             "Sources: " + ", ".join(f"`{f}`" for f in study.folders), ""]
    for heading, warned in opening_warnings(study):
        lines += [f"**{heading}**", ""] + [f"- {t}" for t in warned] + [""]
    lines += ["## Machines", ""]
    lines += markdown_table(MACHINE_HEADER, machine_rows(study))
    inference = bool(study.configs) or not (study.training or diagnoses or profiles
                                             or recommendations)
    if inference:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes(study)]
    for title, header, rows in _sections(study):
        lines += ["", f"## {title}", ""] + markdown_table(header, rows)
    lines += ensemble_tables.markdown(section or ensembles.build(study))
    if inference:
        lines += ["", "## Batch-size scan", ""] + markdown_table(SCAN_HEADER, _scan_rows(study))
        lines += workload_tables.markdown(study)
    if study.training:
        lines += [""] + training.markdown(training.rows(study.training))
    for record in diagnoses or []:
        lines += [""] + diagnosis_section.markdown(record, figure_link=False)
    lines += diagnosis_section.agreement_markdown(diagnoses or [])
    lines += profile_section.markdown_all(list(profiles))
    lines += recommend_section.markdown_all(list(recommendations))
    if study.explained:
        lines += ["", "## Cells without a result", ""]
        lines += markdown_table(EXPLAINED_HEADER, _explained_rows(study))
    lines += ["", "## Figures", ""] if figures else []
    lines += [f"### {f.title}\n\n![{f.alt}](figures/{f.filename})\n"
              + (f"\n{f.caption}\n" if f.caption else "") for f in figures]
    return "\n".join(lines) + "\n"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:8px 0 20px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
.bad{color:#b00}img{max-width:100%;border:1px solid #eee;margin:6px 0 18px}
.wrap{overflow-x:auto}li{margin:3px 0}"""


def to_html(study: Study, figures: list[Figure], section: ensembles.Section | None = None,
            diagnoses: list[dict[str, Any]] | None = None, profiles: list[Any] = (),
            recommendations: list[Any] = ()) -> str:
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
             "<title>quantmark characterization report</title>", f"<style>{CSS}</style>",
             "</head><body><h1>quantmark characterization report</h1>",
             "<p>Sources: " + ", ".join(html.escape(str(f)) for f in study.folders) + "</p>"]
    for heading, warned in opening_warnings(study):
        parts += [f"<p class='bad'><strong>{html.escape(heading)}</strong></p>"
                  "<ul class='bad'>" + "".join(f"<li>{html.escape(t)}</li>" for t in warned)
                  + "</ul>"]
    parts += ["<h2>Machines</h2>", html_table(MACHINE_HEADER, machine_rows(study))]
    inference = bool(study.configs) or not (study.training or diagnoses or profiles
                                             or recommendations)
    if inference:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>"
                                                    for n in notes(study)) + "</ul>")
    for title, headers, rows in _sections(study):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(html_table(headers, rows, headers.index("validity"),
                                (headers.index("throttled"), headers.index("disturbed"))))
    parts.append(ensemble_tables.to_html(section or ensembles.build(study)))
    if inference:
        parts += ["<h2>Batch-size scan</h2>", html_table(SCAN_HEADER, _scan_rows(study)),
                  workload_tables.to_html(study)]
    if study.training:
        parts.append(training.to_html(training.rows(study.training)))
    parts += [diagnosis_section.to_html(record) for record in diagnoses or []]
    parts.append(diagnosis_section.agreement_html(diagnoses or []))
    parts += [profile_section.to_html(record) for record in profiles]
    parts += [recommend_section.to_html(record) for record in recommendations]
    if study.explained:
        parts += ["<h2>Cells without a result</h2>",
                  html_table(EXPLAINED_HEADER, _explained_rows(study))]
    if figures:
        parts.append("<h2>Figures</h2>")
    for figure in figures:
        data = base64.b64encode(figure.png).decode()
        parts.append(f"<h3>{html.escape(figure.title)}</h3><img alt='{html.escape(figure.alt)}'"
                     f" src='data:image/png;base64,{data}'>"
                     + (f"<p>{html.escape(figure.caption)}</p>" if figure.caption else ""))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(folders: list[str | Path], output: str | Path) -> Written:
    """Read ``folders`` and write every report file into ``output``."""
    study = load(folders)
    out = Path(output)
    section = ensembles.build(study)  # once: its paired top-1 changes read accuracy logs
    diagnoses, profiles = diagnosis_section.load(folders), profile_section.load(folders)
    recommendations = recommend_section.load(folders)
    # refused: nothing written
    require_reportable(study, [*diagnoses, *profiles, *recommendations], folders)
    figures = all_figures(study) + size_figures(study) + ensemble_figures(section) + \
        diagnosis_section.figures(diagnoses) + profile_section.figures(profiles) + \
        recommend_section.figures(recommendations)
    files = []
    for figure in figures:
        path = out / "figures" / figure.filename
        atomic_write_bytes(path, figure.png)
        files.append(path)
    for stale in (out / "figures").glob("*.png"):  # from an earlier report of other cells
        if stale not in files:
            stale.unlink()
    texts = [("report.csv", report_csv(study)), ("runs.csv", runs_csv(study)),
             ("report.md", to_markdown(study, figures, section, diagnoses, profiles,
                                       recommendations)),
             ("report.html", to_html(study, figures, section, diagnoses, profiles,
                                     recommendations)),
             *ensemble_tables.csv_texts(section), *workload_tables.csv_texts(study)]
    if study.training:
        texts.append(("train_bench.csv", training.to_csv(training.rows(study.training))))
    for name, text in texts:
        atomic_write_text(out / name, text)
        files.append(out / name)
    return Written(study, files, diagnoses)
