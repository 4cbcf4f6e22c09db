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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.config import sut_label
from quantmark.ground.fingerprint import system_name
from quantmark.ground.hashing import hash_json
from quantmark.ground.records import RunRecord, SweepManifest, UnreadableRecord, load_manifest
from quantmark.report import intervals
from quantmark.report.current_set import current_set, read_results
from quantmark.report.loadgen_log import LogError, RunSummary, summarize_file
from quantmark.report.measured import measured
from quantmark.report.stats import family_confidence
from quantmark.report.training import load as load_training
from quantmark.sut.info import SutInfo

log = logging.getLogger(__name__)

ENSEMBLE = "ensemble"  # the framework (and family) of the ensemble SUTs
# results.json "times" keys the runner itself writes; every other key is an artifact's
# conversion / quantization step (export_s, quantize_s, calibration_s, tflite_convert_s ...)
RUNNER_TIMES = ("prepare_s", "load_s", "warmup_s", "loadgen_wall_s", "loadgen_started_at",
                "loadgen_ended_at")


@dataclass
class Run:
    """One finished LoadGen performance run (one repeat of one configuration)."""

    folder: Path
    summary: RunSummary
    results: RunRecord
    tracked: dict[str, Any] = field(default_factory=dict)  # the sweep's entry for the cell


@dataclass
class Explained:
    """A configuration that has no result, and why."""

    system: str
    model: str
    sut: str
    scenario: str
    batch_size: int
    mode: str
    status: str
    message: str


@dataclass
class Config:
    """One (system, model, SUT, scenario, batch size): its repeats and derived figures."""

    system: str
    model: str
    sut: str
    scenario: str
    batch_size: int
    runs: list[Run]
    derived: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return family(self.sut)

    @property
    def variant(self) -> str:
        return variant(self.sut)

    @property
    def first(self) -> RunRecord:
        return self.runs[0].results

    @property
    def latency_metric(self) -> bool:
        return self.runs[0].summary.metric_unit == "ns"

    def valid_runs(self) -> list[Run]:
        """The runs a figure may use: an INVALID run (LoadGen's own verdict) measured
        something other than what was asked, so it is left out, and the validity column
        says how many were."""
        return [r for r in self.runs if r.summary.validity == "VALID"]

    def metric_values(self) -> list[float]:
        return [r.summary.metric_value for r in self.valid_runs()
                if r.summary.metric_value is not None]

    @property
    def metric(self) -> float | None:
        """The median over repeats: one run disturbed by another process moves it least."""
        values = self.metric_values()
        return statistics.median(values) if values else None


@dataclass
class Study:
    """Everything the report shows."""

    configs: list[Config]
    explained: list[Explained]
    accuracy: dict[tuple[str, str, str], dict[str, Any]]  # (system, model, sut) -> record
    machines: dict[str, dict[str, Any]]
    folders: list[Path]
    training: list[dict[str, Any]] = field(default_factory=list)  # train-bench records
    verdicts: int = 0  # speedup verdicts the report makes: what their intervals correct for

    def keys(self, *names: str) -> list[tuple]:
        """Distinct values of the named Config attributes, in first-seen order."""
        return list(dict.fromkeys(tuple(getattr(c, n) for n in names) for c in self.configs))


def _known(sut: str) -> SutInfo | None:
    """The registry's entry for ``sut``; None for a name it does not know (results written by an
    older quantmark, or by a framework plugin not installed here)."""
    from quantmark.sut.registry import SUTS

    return SUTS.get(sut)


def family(sut: str) -> str:
    """The framework (and device) part of a SUT name: ``ort`` of ``ort-int8``, ``ort-cuda`` of
    ``ort-cuda-fp16``. As its framework declares it; an unknown name up to its last dash."""
    sut = sut.partition(" ")[0]  # a label's SUT: ov-int8 of "ov-int8 ov_api=async"
    info = _known(sut)
    if info:
        return info.family
    return ENSEMBLE if sut.startswith(f"{ENSEMBLE}-") else sut.rsplit("-", 1)[0]


def variant(sut: str) -> str:
    """The precision part of a SUT name (``int8`` of ``ort-int8``, ``fp16`` of
    ``torch-cuda-fp16``). As its framework declares it; an unknown name after its last dash."""
    sut = sut.partition(" ")[0]
    info = _known(sut)
    if info:
        return info.variant
    if sut.startswith(f"{ENSEMBLE}-"):  # ensemble-sequential-vote -> sequential-vote
        return sut[len(ENSEMBLE) + 1:]
    return sut.rsplit("-", 1)[1] if "-" in sut else sut


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
    if _known(name):
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


def load(folders: list[str | Path]) -> Study:
    """Read every run under ``folders`` (quantmark results or sweep folders)."""
    runs: list[Run] = []
    explained: list[Explained] = []
    accuracy: dict[tuple[str, str, str], dict[str, Any]] = {}
    machines: dict[str, dict[str, Any]] = {}
    roots = [Path(f) for f in folders]
    for root in roots:
        manifest = _manifest(root)
        cells = manifest.cells if manifest else {}
        tracked = {entry["run_dir"]: entry for entry in cells.values()
                   if entry.get("run_dir")}
        host = ""
        for detail in sorted(root.rglob("mlperf_log_detail.txt")):
            folder = detail.parent
            relative = folder.relative_to(root)
            if any(part.startswith(".") for part in relative.parts):
                continue  # a run in progress
            results = read_results(folder)
            config = results.config if results else None
            if not results or not config or config.get("audit"):
                continue  # not quantmark's, or a compliance test
            label = sut_label(config["sut"], config.get("sut_options"))  # a variant: own rows
            try:
                summary = summarize_file(detail)
            except LogError:
                continue
            system = system_name(results.machine)
            host = host or system
            machine = {k: v for k, v in results.machine.items() if k != "thermal"}
            machines.setdefault(system, {**machine, "software": results.software})
            if folder.name.endswith(".failed"):
                if manifest:
                    continue  # the sweep's entry for the cell says why
                explained.append(Explained(system, config["model"], label,
                                           summary.scenario, config["batch_size"],
                                           config["mode"], "failed", f"logs in {relative}"))
            elif config["mode"] == "accuracy":
                accuracy[(system, config["model"], label)] = {
                    **(results.accuracy or {}), "folder": folder,
                    "weights": results.model.get("weights", ""),
                    "dataset_builtin": results.dataset.get("builtin") is True}
            else:
                runs.append(Run(folder, summary, results, tracked.get(str(relative), {})))
        for entry in cells.values():
            if entry.get("status") != "ok":
                explained.append(Explained(
                    entry.get("node") or host or "this machine", entry["model"],
                    sut_label(entry["sut"], entry.get("sut_options")), entry["scenario"],
                    entry["batch_size"], entry["mode"], entry["status"], entry.get("message", "")))
    grouped: dict[tuple, list[Run]] = {}
    for run in _newest_sets(runs):
        config = run.results.config
        key = (system_name(run.results.machine), config["model"],
               sut_label(config["sut"], config.get("sut_options")), run.summary.scenario,
               int(config["batch_size"]))
        grouped.setdefault(key, []).append(run)
    configs = [Config(*key, runs=group) for key, group in grouped.items()]
    training = load_training(roots)
    for record in training:  # the machine of a train-bench-only folder; its framework too
        entry = machines.setdefault(system_name(record.machine), {**record.machine, "software": {}})
        entry["software"] = {**record.software, **entry.get("software", {})}
    study = Study(configs, explained, accuracy, machines, roots, training)
    derive(study)
    return study


def _newest_sets(runs: list[Run]) -> list[Run]:
    """Only the newest repeat set of each performance folder: ``run_k`` left by an older,
    larger or interrupted set is not a repeat of this one (``report.current_set``)."""
    by_folder: dict[Path, dict[Path, Run]] = {}
    for run in runs:
        by_folder.setdefault(run.folder.parent, {})[run.folder] = run
    return [group[path] for group in by_folder.values() for path in current_set(list(group))]


def _gpu_identity(gpu: dict[str, Any]) -> list[Any]:
    """What of the GPU fingerprint decides a number: models and compute capability, driver,
    CUDA (not the memory size in MiB, which the model name already tells)."""
    return [[d.get("name"), d.get("compute_capability")] for d in gpu.get("devices", [])] + [
        gpu.get("driver"), gpu.get("cuda_driver_api"), gpu.get("cuda_runtime_torch")]


def fingerprint_id(results: RunRecord) -> str:
    """A short hash of what decides a number besides the SUT: software, machine (and its GPU),
    artifact, dataset, calibration and the run's settings. Equal ids: the same setup. A machine
    without a GPU hashes as before, so earlier results keep their ids."""
    machine, settings = results.machine, results.settings
    return hash_json({
        "software": results.software,
        "cpu": [machine.get("cpu_model"), machine.get("cpu_flags"), machine.get("usable_cpus")],
        **({"gpu": _gpu_identity(machine["gpu"])} if machine.get("gpu") else {}),
        "artifact": [results.model.get("key"), results.model.get("source_hash")],
        "dataset": results.dataset.get("fingerprint"),
        "calibration": (results.calibration or {}).get("hash"),
        "settings": [settings.get("mode"), settings.get("workers"),
                     results.config.get("threads")],
    }, length=12)


def throttling(runs: list[Run]) -> tuple[str, list[str]]:
    """"yes" (and why) if any run throttled, "no" if every run was seen not to, "" when that
    is unknown (folders from before the runner took thermal snapshots, no sensor)."""
    verdicts = [r.results.machine.get("thermal") or {} for r in runs]
    hot = [v for v in verdicts if v.get("throttled") is True]
    if hot:
        return "yes", list(dict.fromkeys(why for v in hot for why in v.get("why") or []))
    if verdicts and all(v.get("throttled") is False for v in verdicts):
        return "no", []
    return "", []


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
        top1 = study.accuracy.get(acc_key, {}).get("top1")
        fp32_top1 = study.accuracy.get(fp32_acc_key, {}).get("top1")
        throttled, throttling_reasons = throttling(config.runs)
        config.derived = {
            **measured(config),
            **intervals.derived(config, fp32, best, logs, (acc_key, fp32_acc_key),
                                family_confidence(study.verdicts)),
            "fp32_baseline": baseline(results),
            "best_fp32": best.sut if best else None,
            "top1": top1,
            "top1_change_vs_fp32": (top1 - fp32_top1 if top1 is not None and
                                    fp32_top1 is not None else None),
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


def batch_scan(study: Study) -> list[dict[str, Any]]:
    """Per (system, model, SUT): the Offline batch size with the best throughput, and the
    SingleStream latency at batch 1."""
    rows = []
    for system, model, sut in study.keys("system", "model", "sut"):
        mine = [c for c in study.configs if (c.system, c.model, c.sut) == (system, model, sut)]
        offline = [c for c in mine if c.scenario == "Offline" and c.derived["samples_per_s"]]
        single = next((c for c in mine if c.scenario == "SingleStream" and c.batch_size == 1),
                      None)
        best = max(offline, key=lambda c: c.derived["samples_per_s"]) if offline else None
        rows.append({
            "system": system, "model": model, "sut": sut,
            "batch_sizes": sorted(c.batch_size for c in offline),
            "best_batch": best.batch_size if best else None,
            "best_samples_per_s": best.derived["samples_per_s"] if best else None,
            "single_stream_ms": (single.metric / 1e6 if single and single.metric else None),
        })
    return rows


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower latency (x) and higher accuracy (y)
    at once. Sorted by latency."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best_accuracy = float("-inf")
    for i in order:
        if points[i][1] > best_accuracy:
            front.append(i)
            best_accuracy = points[i][1]
    return front
