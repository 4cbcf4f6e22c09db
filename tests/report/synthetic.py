"""Hand-made configurations with known repeat values, for the report's interval tests: no
LoadGen run, so each test states exactly which numbers went in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quantmark.ground.records import RunRecord
from quantmark.report.characterize import Config, Run, Study, derive
from quantmark.report.loadgen_log import RunSummary
from tests.report.test_accuracy import hexf, write_val_map

SYSTEM, MODEL = "box", "m"
OFFLINE = ("Offline", "samples per second", "result_samples_per_second", "samples/s")
SINGLE = ("SingleStream", "90th percentile latency", "early_stopping_latency_ss", "ns")


def summary(value: float, scenario: tuple[str, str, str, str] = OFFLINE) -> RunSummary:
    name, metric, key, unit = scenario
    return RunSummary(scenario=name, mode="PerformanceOnly", validity="VALID", metric_name=metric,
                      metric_key=key, metric_value=value, metric_unit=unit, min_latency_ns=1,
                      mean_latency_ns=2.0, max_latency_ns=3, percentiles_ns={"90.00": 2},
                      samples_per_second=value if unit != "ns" else 1e9 / value)


def run(sut: str, value: float, *, sweep_repeat: int | None = None,
        runner_repeat: int | None = None, disturbed: bool | None = None,
        why: tuple[str, ...] = (), scenario: tuple[str, str, str, str] = OFFLINE) -> Run:
    """One run of ``sut``; its repeat index as a sweep cell tracks it or as ``--repeats``
    records it; ``disturbed`` as the interference monitor records it (None: no record)."""
    results: dict[str, Any] = {
        "config": {"sut": sut, "model": MODEL, "batch_size": 1, "mode": "performance"},
        "sut": {"name": sut, "fp32_baseline": sut.rsplit("-", 1)[0] + "-fp32",
                "executed_precision": sut.rsplit("-", 1)[1]},
        "machine": {"hostname": SYSTEM}, "settings": {"mode": "quick"}, "model": {},
    }
    if runner_repeat is not None:
        results["repeat"] = {"index": runner_repeat, "of": 3, "set": "s1"}
    if disturbed is not None:
        results["interference"] = {"disturbed": disturbed, "why": list(why)}
    tracked = {"repeat": sweep_repeat} if sweep_repeat is not None else {}
    return Run(Path(f"/runs/{sut}"), summary(value, scenario), RunRecord.of(results), tracked)


def config(sut: str, values: list[float], *, paired: bool = True,
           scenario: tuple[str, str, str, str] = OFFLINE, **kwargs: Any) -> Config:
    """``sut`` measured once per value; repeat k (from 1) tracked by the sweep when
    ``paired``, no repeat index otherwise."""
    runs = [run(sut, v, sweep_repeat=k if paired else None, scenario=scenario, **kwargs)
            for k, v in enumerate(values, start=1)]
    return Config(SYSTEM, MODEL, sut, scenario[0], 1, runs)


def study(*configs: Config, accuracy: dict | None = None) -> Study:
    """A derived study of ``configs``."""
    made = Study(list(configs), [], accuracy or {}, {SYSTEM: {"cpu_model": "x"}},
                 [Path("/runs")])
    derive(made)
    return made


def accuracy_run(folder: Path, predictions: list[int], labels: list[int], *,
                 builtin: bool) -> dict[str, Any]:
    """An accuracy run folder (log and val_map) and its record as ``characterize.load`` keeps
    it."""
    folder.mkdir(parents=True)
    entries = [{"seq_id": i, "qsl_idx": i, "data": hexf(p)} for i, p in enumerate(predictions)]
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    write_val_map(folder / "val_map.txt", labels)
    good = sum(p == label for p, label in zip(predictions, labels, strict=True))
    return {"top1": 100 * good / len(labels), "good": good, "total": len(labels),
            "folder": folder, "weights": "pretrained", "dataset_builtin": builtin}
