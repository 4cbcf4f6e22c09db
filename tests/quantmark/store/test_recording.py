"""``record(path)``, what a job calls after promoting its result: into the store the
environment names, never failing the run, nothing at all with QUANTMARK_STORE=off."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.records import RESULTS, load_run
from quantmark.store import recording
from quantmark.store.results_store import open_store
from tests.quantmark.store.run_folders import make_run
from tests.quantmark.test_cli import tiny_onnx


@pytest.fixture(autouse=True)
def _fresh_stores(monkeypatch):
    # run.py's logging (quantmark.ground.logs) stops quantmark's lines at its own handler: let
    # them reach caplog's
    monkeypatch.setattr(logging.getLogger("quantmark"), "propagate", True)
    yield
    recording._close_all()


def test_a_run_is_recorded_into_the_store_the_environment_names(store_url, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("QUANTMARK_STORE", store_url)
    run = make_run(tmp_path / "results")
    assert recording.record(run) == 1
    assert recording.record(run) == 0  # a caller that records twice adds nothing
    with open_store(store_url) as store:
        assert [p.run_dir for p in store.points()] == [str(run)]


def test_without_a_store_named_it_goes_to_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("QUANTMARK_STORE", raising=False)
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    assert recording.record(make_run(tmp_path / "results")) == 1
    assert (tmp_path / "cache" / "store" / "results.sqlite").is_file()


def test_off_records_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("QUANTMARK_STORE", "off")
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    assert recording.record(make_run(tmp_path / "results")) == 0
    assert not (tmp_path / "cache" / "store").exists()


def test_a_store_that_cannot_be_written_costs_one_warning_not_the_run(tmp_path, monkeypatch,
                                                                      caplog):
    broken = tmp_path / "broken.sqlite"
    broken.write_text("not a database\n" * 100)
    monkeypatch.setenv("QUANTMARK_STORE", str(broken))
    run = make_run(tmp_path / "results")
    with caplog.at_level(logging.WARNING, logger="quantmark.store.recording"):
        assert recording.record(run) == 0
    [warning] = caplog.records
    text = warning.getMessage()
    assert text.startswith(f"results store {broken}: {run} not recorded (cannot use the results "
                           f"store {broken}: ")
    assert "set QUANTMARK_STORE to another one (or off)" in text and "store import" in text
    assert "\n" not in text


def test_a_server_that_is_down_costs_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("QUANTMARK_STORE",
                       f"postgresql+psycopg://nobody@/none?host={tmp_path}&port=1")
    with caplog.at_level(logging.WARNING, logger="quantmark.store.recording"):
        assert recording.record(make_run(tmp_path / "results")) == 0
    [warning] = caplog.records
    assert "not recorded" in warning.getMessage() and "\n" not in warning.getMessage()


def test_a_real_run_recorded_by_its_parent_carries_its_interference(tmp_path, monkeypatch):
    """A LoadGen run, launched as run.py launches one; recorded after the launcher added the
    interference file, as the call site in the parent does."""
    from quantmark.run.launch import launch

    store_url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    monkeypatch.setenv("QUANTMARK_STORE", store_url)
    model = tiny_onnx(tmp_path / "tiny.onnx")
    result = launch(RunConfig(scenario="SingleStream", sut="ort-fp32",
                              model="efficientnet-lite0", model_path=str(model),
                              output=str(tmp_path / "results"), threads=1,
                              quick_duration_ms=1000), quiet=True)
    assert result.status == "ok", result.message
    assert recording.record(result.run_dir) == 1
    record = load_run(Path(result.run_dir) / RESULTS)
    with open_store(store_url) as store:
        [point] = store.points()
    assert point.series.label() == "efficientnet-lite0 ort-fp32 SingleStream latency_ms"
    assert point.value == record.summary["percentiles_ns"]["90.00"] / 1e6
    assert point.valid == (record.validity == "VALID")
    assert point.disturbed == bool(record.interference["disturbed"])
    assert point.environment["settings.threads"] == 1
    assert point.environment["software.onnxruntime"] == record.software["onnxruntime"]
