"""Accuracy runs in the store by their task's metric: a detector's mAP is recorded with its
metric's key and name, ``history --model <detector>`` shows it as mAP (a table, and a panel
of ``--plot``), the dashboard lists it, and it never shares a series with a classifier's
top-1; a record of before tasks keeps the detail it always had."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from quantmark import cli
from quantmark.ground.metric import TOP1, Metric
from quantmark.store.job_facts import read_job
from quantmark.store.results_store import open_store
from tests.quantmark.store.run_folders import ACCURACY_RUN, T0, make_run, template, write_run

MAP = Metric(key="map", name="mAP@[.5:.95]", unit="%")


def accuracy_run(root: Path, *, model: str, sut: str, metric: Metric | None,
                 accuracy: dict[str, Any], started_at: float = T0) -> Path:
    """An accuracy run's folder (Offline); ``metric`` None: a record of before tasks."""
    data = copy.deepcopy(template("Offline"))
    data["config"].update(model=model, sut=sut, scenario="Offline", mode="accuracy")
    data["accuracy"] = accuracy
    data["times"]["loadgen_started_at"] = started_at
    if metric is not None:
        data["task"] = {"name": "detection" if metric == MAP else "classification",
                        "metric": metric.to_record()}
    return write_run(root / f"vm-{sut}" / model / "Offline" / "accuracy", data, ACCURACY_RUN)


def study(root: Path) -> Path:
    """A detection study beside a classifier's: each an accuracy run and a performance run."""
    accuracy_run(root, model="det", sut="ort-int8", metric=MAP,
                 accuracy={"map": 12.5, "map50": 30.25, "images": 96})
    accuracy_run(root, model="det", sut="ort-fp32", metric=MAP,
                 accuracy={"map": 13.0, "map50": 31.0, "images": 96}, started_at=T0 + 5)
    accuracy_run(root, model="resnet50", sut="ort-int8", metric=TOP1,
                 accuracy={"top1": 75.5})
    make_run(root / "perf", model="det", sut="ort-int8", scenario="Offline", value=300.0)
    make_run(root / "perf", model="resnet50", sut="ort-int8", scenario="Offline", value=90.0)
    return root


def test_an_accuracy_run_records_its_tasks_metric(tmp_path: Path) -> None:
    folder = accuracy_run(tmp_path, model="det", sut="ort-int8", metric=MAP,
                          accuracy={"map": 12.5, "map50": 30.25, "images": 96})
    facts = read_job(folder / "results.json")
    assert facts.kind == "accuracy" and facts.series is None
    assert facts.detail == {"map": 12.5, "metric": MAP.to_record(), "task": "detection",
                            "model": "det", "sut": "ort-int8", "scenario": "Offline"}
    legacy = accuracy_run(tmp_path / "old", model="resnet50", sut="ort-int8", metric=None,
                          accuracy={"top1": 71.25})
    assert read_job(legacy / "results.json").detail == {"top1": 71.25}


def test_history_of_the_detector_shows_map(store_url: str, tmp_path: Path, capsys) -> None:
    root = study(tmp_path / "study")
    assert cli.main(["store", "import", str(root), "--store", store_url]) == 0
    capsys.readouterr()
    assert cli.main(["history", "--model", "det", "--store", store_url,
                     "--plot", str(tmp_path / "trend.png")]) == 0
    out = capsys.readouterr().out
    assert "det ort-int8 accuracy (mAP@[.5:.95])" in out
    assert "det ort-fp32 accuracy (mAP@[.5:.95])" in out
    assert "12.50" in out and "13.00" in out and "det ort-int8 Offline (samples_per_s)" in out
    assert "top-1" not in out and "resnet50" not in out and "75.50" not in out
    assert "trend of 3 series" in out and (tmp_path / "trend.png").stat().st_size > 0


def test_a_detectors_map_never_shares_a_series_with_a_classifiers_top1(
        store_url: str, tmp_path: Path) -> None:
    with open_store(store_url) as store:
        store.record(study(tmp_path / "study"))
        found = store.quality_points(sut="ort-int8")
        assert {(p.model, p.metric.key, p.value) for p in found} == \
            {("det", "map", 12.5), ("resnet50", "top1", 75.5)}
        assert len({p.series for p in found}) == 2
        assert store.quality_points(scenario="SingleStream") == []
        points = store.points()
    # the performance series (regress's) are keyed by model: never one across the two tasks
    assert {p.series.model for p in points} == {"det", "resnet50"}
    assert len({p.series for p in points}) == 2


def test_the_dashboard_lists_accuracy_by_metric(store_url: str, tmp_path: Path) -> None:
    from quantmark.store.dashboard import write_store_dashboard

    with open_store(store_url) as store:
        store.record(study(tmp_path / "study"))
    written, _ = write_store_dashboard(store_url, tmp_path / "out")
    page = written.read_text()
    assert "<h2>Accuracy</h2>" in page and "det ort-int8 (mAP@[.5:.95])" in page
    assert "resnet50 ort-int8 (top-1)" in page and "12.50" in page
