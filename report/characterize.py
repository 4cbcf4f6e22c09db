"""The characterization table: every configuration of one or more sweeps (or results folders).

Numbers come from LoadGen's own detail logs; ``results.json`` beside each log says what ran
(SUT, model, batch size, executed precision, times, artifact, whether the board throttled);
a sweep's ``sweep.json`` adds the cells that did not run (the reason) and what was tracked
from outside the run (peak RSS, energy). Folders from several machines merge: configurations
are keyed by the machine that ran them. Derived figures (speedups, accuracy change, agreement)
are computed here, in one place, from those numbers; their intervals and verdicts come from
``report.intervals``: a figure is the median of its repeats, with a 95% interval.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground.config import sut_label
from quantmark.ground.fingerprint import system_name
from quantmark.ground.records import RunRecord, SweepManifest, UnreadableRecord, load_manifest
from quantmark.report import intervals, quality
from quantmark.report.best_points import batch_scan, pareto_front  # noqa: F401 (read from here)
from quantmark.report.current_set import current_set, read_results
from quantmark.report.loadgen_log import RunSummary
from quantmark.report.logged_run import verify
from quantmark.report.measured import measured
from quantmark.report.setup_identity import fingerprint_id, throttling
from quantmark.report.stats import family_confidence
from quantmark.report.study import (
    ENSEMBLE,
    Config,
    Explained,
    Run,
    Study,
    family,
    known_sut,
    variant,
)
from quantmark.report.training import load as load_training
from quantmark.report.workloads import entry_label, labeller, workload

log = logging.getLogger(__name__)

# results.json "times" keys the runner itself writes; every other key is an artifact's
# conversion / quantization step (export_s, quantize_s, calibration_s, tflite_convert_s ...)
RUNNER_TIMES = ("prepare_s", "load_s", "warmup_s", "loadgen_wall_s", "loadgen_started_at",
                "loadgen_ended_at")


def baseline(results: RunRecord) -> str:
    """The FP32 SUT a run is compared with, as the runner recorded it: its framework's FP32 on
    the same device (``ort-trt-int8`` -> ``ort-cuda-fp32``). For results written before the
    runner recorded it: the registry's baseline of a known SUT, else ``<family>-fp32``. An
    ensemble has none: ``""``."""
    if is_ensemble(results):
        return ""  # several models at once: no FP32 of its own, its speedups are n/a
    sut = results.sut
    name = str(sut.get("name", ""))
    options = results.config.get("sut_options")  # a variant's: same options
    if sut.get("fp32_baseline"):
        return sut_label(str(sut["fp32_baseline"]), options)
    if known_sut(name):
        from quantmark.sut.registry import fp32_baseline

        found = fp32_baseline(name)
        if found:
            return sut_label(found, options)
    return sut_label(f"{family(name)}-fp32", options)


def is_ensemble(results: RunRecord) -> bool:
    """The run is an ensemble SUT's (several models per sample), not one model's."""
    return bool(results.ensemble) or results.sut.get("framework") == ENSEMBLE


def is_fp32(sut: str) -> bool:
    return variant(sut) == "fp32"


def _manifest(root: Path) -> SweepManifest | None:
    """The sweep's manifest in ``root``; None for a plain results folder, or (said in the log)
    for a manifest that cannot be read: its runs are still reported."""
    try:
        return load_manifest(root)
    except UnreadableRecord as exc:
        log.warning("%s; the cells that did not run are not reported", exc)
        return None


@dataclass
class _Found:
    """A finished quantmark run found under a folder, before the report labels it."""

    folder: Path
    relative: Path
    results: RunRecord
    summary: RunSummary
    tracked: dict[str, Any]
    system: str
    has_manifest: bool


def _scan(root: Path, machines: dict[str, dict[str, Any]], disagreements: list[str]
          ) -> tuple[list[_Found], list[Explained]]:
    """Every quantmark run under ``root`` (not a compliance test, not one in progress), its
    figures LoadGen's (``logged_run``: a results.json that says otherwise is a line of
    ``disagreements``), and the cells of its sweep that have no result, with why; the
    machines they ran on."""
    manifest = _manifest(root)
    cells = manifest.cells if manifest else {}
    tracked = {entry["run_dir"]: entry for entry in cells.values() if entry.get("run_dir")}
    found: list[_Found] = []
    for detail in sorted(root.rglob("mlperf_log_detail.txt")):
        folder = detail.parent
        relative = folder.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue  # a run in progress
        results = read_results(folder)
        if not results or not results.config or results.config.get("audit"):
            continue  # not quantmark's, or a compliance test
        logged = verify(folder, results)
        if not logged.parsed:
            continue  # a detail log that does not parse: the percentile table marks it
        if logged.mismatches:
            disagreements.append(logged.disagreement(
                relative, "the report shows LoadGen's figures"))
        summary = logged.summary
        system = system_name(results.machine)
        machine = {k: v for k, v in results.machine.items() if k != "thermal"}
        machines.setdefault(system, {**machine, "software": results.software})
        found.append(_Found(folder, relative, results, summary, tracked.get(str(relative), {}),
                            system, bool(manifest)))
    host = found[0].system if found else ""
    padding = str((manifest.spec if manifest else {}).get("padding") or "")  # a text sweep's
    return found, [Explained(
        entry.get("node") or host or "this machine", entry_label(entry, padding),
        sut_label(entry["sut"], entry.get("sut_options")), entry["scenario"],
        entry["batch_size"], entry["mode"], entry["status"], entry.get("message", ""))
        for entry in cells.values() if entry.get("status") != "ok"]


def _keep(f: _Found, model: str, runs: list[Run],
          accuracy: dict[tuple[str, str, str], dict[str, Any]], explained: list[Explained]
          ) -> None:
    """File a found run under its model's label: a performance run, an accuracy run (its
    record, for the quality figures), or a failed run of a plain folder (why it has none)."""
    config, results = f.results.config, f.results
    sut = sut_label(config["sut"], config.get("sut_options"))  # a variant: own rows
    if f.folder.name.endswith(".failed"):
        if not f.has_manifest:  # else the sweep's entry for the cell says why
            explained.append(Explained(f.system, model, sut, f.summary.scenario,
                                       config["batch_size"], config["mode"], "failed",
                                       f"logs in {f.relative}"))
    elif config["mode"] == "accuracy":
        accuracy[(f.system, model, sut)] = {
            **(results.accuracy or {}), "folder": f.folder, "metric": quality.metric_of(results),
            "weights": results.model.get("weights", ""),
            "dataset_builtin": results.dataset.get("builtin") is True}
    else:
        runs.append(Run(f.folder, f.summary, results, f.tracked))


def load(folders: list[str | Path]) -> Study:
    """Read every run under ``folders`` (quantmark results or sweep folders). A run's model
    is labelled with its input size and dataset where they set it apart (``workloads``)."""
    runs: list[Run] = []
    explained: list[Explained] = []
    accuracy: dict[tuple[str, str, str], dict[str, Any]] = {}
    machines: dict[str, dict[str, Any]] = {}
    roots = [Path(f) for f in folders]
    disagreements: list[str] = []
    scanned = [_scan(root, machines, disagreements) for root in roots]
    label = labeller([f.results for found, _ in scanned for f in found])
    models: dict[Path, str] = {}
    for found, cells in scanned:
        for f in found:
            models[f.folder] = label(f.results)
            _keep(f, models[f.folder], runs, accuracy, explained)
        explained.extend(cells)  # after a folder's runs, its sweep's cells without a result
    grouped: dict[tuple, list[Run]] = {}
    for run in _newest_sets(runs):
        config = run.results.config
        key = (system_name(run.results.machine), models[run.folder],
               sut_label(config["sut"], config.get("sut_options")), run.summary.scenario,
               int(config["batch_size"]))
        grouped.setdefault(key, []).append(run)
    configs = [Config(*key, runs=group, workload=workload(group[0].results))
               for key, group in grouped.items()]
    training = load_training(roots)
    for record in training:  # the machine of a train-bench-only folder; its framework too
        entry = machines.setdefault(system_name(record.machine), {**record.machine, "software": {}})
        entry["software"] = {**record.software, **entry.get("software", {})}
    study = Study(configs, explained, accuracy, machines, roots, training,
                  disagreements=disagreements)
    derive(study)
    return study


def _newest_sets(runs: list[Run]) -> list[Run]:
    """Only the newest repeat set of each performance folder: ``run_k`` left by an older,
    larger or interrupted set is not a repeat of this one (``report.current_set``)."""
    by_folder: dict[Path, dict[Path, Run]] = {}
    for run in runs:
        by_folder.setdefault(run.folder.parent, {})[run.folder] = run
    return [group[path] for group in by_folder.values() for path in current_set(list(group))]


def _references(study: Study, config: Config, by_key: dict[tuple, Config]
                ) -> tuple[Config | None, Config | None]:
    """(its framework's FP32, the fastest FP32 of any framework) of ``config``: same machine,
    model, scenario and batch size."""
    fp32 = by_key.get((config.system, config.model, baseline(config.first), config.scenario,
                       config.batch_size))
    fp32_peers = [c for c in study.configs
                  if is_fp32(c.sut) and (c.system, c.model, c.scenario, c.batch_size) ==
                  (config.system, config.model, config.scenario, config.batch_size)
                  and c.metric]
    best = (min(fp32_peers, key=lambda c: c.metric) if config.latency_metric else
            max(fp32_peers, key=lambda c: c.metric)) if fp32_peers else None
    return fp32, best


def derive(study: Study) -> None:
    """Fill every config's ``derived`` figures (medians over repeats with their intervals,
    speedups with their verdicts, the paired accuracy change, disturbed runs). The speedups'
    intervals are corrected for how many verdicts the report makes (``intervals.family_size``)."""
    by_key = {(c.system, c.model, c.sut, c.scenario, c.batch_size): c for c in study.configs}
    logs = intervals.AccuracyLogs(study.accuracy)
    references = {id(c): _references(study, c, by_key) for c in study.configs}
    study.verdicts = intervals.family_size([(c, r) for c in study.configs
                                            for r in references[id(c)]])
    for config in study.configs:
        results = config.first
        fp32, best = references[id(config)]
        acc_key = (config.system, config.model, config.sut)
        fp32_acc_key = (config.system, config.model, baseline(results))
        metric = quality.metric_of(results)  # the task's: top-1, a detector's mAP ...
        figure = quality.figure(study.accuracy.get(acc_key), metric)
        fp32_figure = quality.figure(study.accuracy.get(fp32_acc_key), metric)
        throttled, throttling_reasons = throttling(config.runs)
        config.derived = {
            **measured(config),
            **intervals.derived(config, fp32, best, logs, (acc_key, fp32_acc_key),
                                family_confidence(study.verdicts)),
            "fp32_baseline": baseline(results),
            "best_fp32": best.sut if best else None,
            "quality_metric": metric,
            "quality": figure,
            "quality_change_vs_fp32": (figure - fp32_figure if figure is not None and
                                       fp32_figure is not None else None),
            "weights": results.model.get("weights", ""),
            "model_size_mb": (results.model.get("size_bytes") or 0) / 2**20 or None,
            **_costs(config),
            "executed_precision": str(results.sut.get("executed_precision", "")),
            "fingerprint": fingerprint_id(results),
            "workers": results.settings.get("workers"),
            "throttled": throttled,
            "throttling_reasons": throttling_reasons,
        }


def _costs(config: Config) -> dict[str, Any]:
    """What the config cost beside its metric: conversion and load times, memory, energy."""
    times = [r.results.times for r in config.runs]
    conversion = {k: v for k, v in times[0].items()
                  if k not in RUNNER_TIMES and isinstance(v, int | float)}
    tracked = [r.tracked for r in config.runs]
    energy = [e for t in tracked if (e := (t.get("trackers") or {}).get("energy"))]
    # the sweep's wait4 figure, else the one the test process recorded itself (results.json)
    rss = [rss for t, r in zip(tracked, config.runs, strict=True)
           if (rss := t.get("peak_rss_mb") or r.results.memory.get("peak_rss_mb"))]
    gpu = [g for t in tracked if (g := (t.get("trackers") or {}).get("gpu_memory_mb"))
           is not None]
    return {
        "conversion_s": sum(conversion.values()) if conversion else None,
        "conversion_steps": conversion,
        "prepare_s": statistics.fmean(t.get("prepare_s", 0.0) for t in times),
        "load_s": statistics.fmean(t.get("load_s", 0.0) for t in times),
        "warmup_s": (statistics.fmean(t["warmup_s"] for t in times)
                     if all("warmup_s" in t for t in times) else None),
        "peak_rss_mb": max(rss) if rss else None,
        "gpu_memory_mb": max(gpu) if gpu else None,
        "energy_j_per_sample": (statistics.fmean(e["joules_per_sample"] for e in energy)
                                if energy and all(e.get("joules_per_sample")
                                                  for e in energy) else None),
        "power_w": statistics.fmean(e["watts"] for e in energy) if energy else None,
    }
