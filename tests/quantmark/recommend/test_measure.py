"""The recommend measurer: short runs and accuracy as a sweep cell runs them, faults as one
line per candidate, the commands that reproduce a run; and (slow) real runs of digits-cnn."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.records import RunRecord
from quantmark.recommend.candidates import Candidate
from quantmark.recommend.measure import (
    LoadGenMeasurer,
    accuracy_key,
    measurement_of,
    run_command,
    vendor_command,
)

MODEL = "digits-cnn"


def _record(folder: Path, **fields: Any) -> Path:
    """A run folder holding a results.json of these fields."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(RunRecord(**fields).to_dict()))
    return folder


def _summary(validity: str = "VALID") -> dict[str, Any]:
    return {"validity": validity, "metric_value": 1.0, "samples_per_second": 250.0,
            "percentiles_ns": {"50.00": 1_000_000, "90.00": 2_500_000, "99.00": 4_000_000},
            "unmet_checks": [] if validity == "VALID" else ["min duration"]}


def test_a_finished_entry_gives_the_scenarios_percentile_and_rate(tmp_path: Path) -> None:
    _record(tmp_path / "runs" / "a", summary=_summary())
    entry = {"status": "ok", "run_dir": "runs/a", "peak_rss_mb": 321.5, "disturbed": True}
    single = measurement_of(entry, tmp_path, "SingleStream", 4.0)
    assert (single.latency_ms, single.samples_per_s, single.valid, single.disturbed) == \
        (2.5, 250.0, True, True)
    assert (single.memory_mb, single.seconds, single.why) == (321.5, 4.0, "")
    assert single.run_dir == str(tmp_path / "runs" / "a")
    assert measurement_of(entry, tmp_path, "Server", 4.0).latency_ms == 4.0
    assert measurement_of(entry, tmp_path, "Offline", 4.0).latency_ms is None
    _record(tmp_path / "runs" / "b", summary=_summary("INVALID"))
    invalid = measurement_of({**entry, "run_dir": "runs/b", "disturbed": None}, tmp_path,
                             "Offline", 1.0)
    assert not invalid.valid and not invalid.disturbed and invalid.why == ""


def test_a_failed_entry_is_its_one_line_why(tmp_path: Path) -> None:
    entry = {"status": "crashed", "message": "Traceback\n  ...\nRuntimeError: boom\n",
             "peak_rss_mb": None}
    found = measurement_of(entry, tmp_path, "Offline", 2.0)
    assert found.why == "crashed: RuntimeError: boom" and not found.valid
    assert found.samples_per_s is None and found.latency_ms is None
    missing = measurement_of({"status": "ok", "run_dir": "gone"}, tmp_path, "Offline", 1.0)
    assert "no readable results.json" in missing.why and not missing.valid


def test_vendor_command_is_the_recorded_one(tmp_path: Path) -> None:
    command = "benchmark_app -m model.xml -d CPU -b 8"
    assert vendor_command(_record(tmp_path / "ov", speed_settings={
        "vendor_command": command})) == command
    assert vendor_command(_record(tmp_path / "ort", speed_settings={"threads": 2})) is None
    assert vendor_command(tmp_path / "nothing") is None


def test_run_command_reproduces_the_candidates_settings() -> None:
    candidate = Candidate("ov-int8", 8, 2, (("ov_api", "async"),))
    line = run_command(candidate, "Offline", "resnet50", model_path="/m y/model.onnx")
    assert shlex.split(line) == [
        "python", "run.py", "--scenario", "Offline", "--sut", "ov-int8", "--model",
        "resnet50", "--model-path", "/m y/model.onnx", "--batch-size", "8", "--threads", "2",
        "--sut-option", "ov_api=async"]
    assert "--threads" not in run_command(Candidate("ort-fp32"), "SingleStream", MODEL)


def test_accuracy_depends_on_the_artifact_and_the_options_that_change_the_model() -> None:
    assert accuracy_key(Candidate("ov-int8", 8, 2, (("ov_api", "async"),))) == \
        accuracy_key(Candidate("ov-int8"))
    assert accuracy_key(Candidate("trt-int8", settings=(("trt_int8_route", "qdq"),))) != \
        accuracy_key(Candidate("trt-int8", settings=(("trt_int8_route", "calibrator"),)))


def test_a_fault_is_that_candidates_why_never_an_exception(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        calls.append(cell.sut)
        raise OSError("disk on fire")

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", broken)
    measurer = LoadGenMeasurer("Offline", MODEL, tmp_path, references=("ort-fp32",))
    found = measurer.run(Candidate("ort-int8", 8), 1.0)
    assert found.why == "OSError: disk on fire" and not found.valid
    result = measurer.accuracy(Candidate("ort-int8"))
    assert result.why == "OSError: disk on fire" and math.isnan(result.change_points)
    again = measurer.accuracy(Candidate("ort-int8", 8, 2))  # same artifact: not run again
    assert again.why == result.why and again.seconds == 0.0
    assert calls == ["ort-int8", "ort-int8"]
    mixed = measurer.run(Candidate("ort-int8", keep_float=("conv1",)), 1.0)
    assert mixed.why == "OSError: disk on fire" and calls == ["ort-int8"] * 3


def test_no_reference_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        if cell.sut == "ort-fp32":
            return {"status": "user_error", "message": "the FP32 model is missing"}
        _record(root / "acc", accuracy={"top1": 90.0}, model={"size_bytes": 3 * 2 ** 20})
        return {"status": "ok", "run_dir": "acc"}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    result = LoadGenMeasurer("Offline", MODEL, tmp_path,
                             references=("ort-fp32",)).accuracy(Candidate("ort-int8"))
    assert result.top1 == 90.0 and result.model_size_mb == 3.0
    assert "no FP32 reference" in result.why and "the FP32 model is missing" in result.why
    assert "\n" not in result.why


def test_the_accuracy_suts_due_name_the_references_with_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the search prices before it asks: the first accuracy runs its own and every FP32
    reference; later ones only their own; a known artifact none."""
    def fake(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        _record(root / cell.sut, accuracy={"top1": 90.0}, model={"size_bytes": 2 ** 20},
                dataset={"builtin": False})
        return {"status": "ok", "run_dir": cell.sut}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    monkeypatch.setattr("quantmark.report.accuracy.paired_change", lambda *a, **k: None)
    measurer = LoadGenMeasurer("Offline", MODEL, tmp_path, references=("ort-fp32", "ov-fp32"))
    due = measurer.accuracy_suts_due
    assert due(Candidate("ort-int8")) == ("ort-int8", "ort-fp32", "ov-fp32")
    assert due(Candidate("ort-fp32")) == ("ort-fp32", "ov-fp32")  # itself a reference
    measurer.accuracy(Candidate("ort-int8"))
    assert due(Candidate("ort-int8", 8)) == ()  # the same artifact
    assert due(Candidate("ov-int8")) == ("ov-int8",)
    assert due(Candidate("ov-fp32")) == ()  # ran as a reference: its pairing reads that run,
    # it does not run it again
    assert due(Candidate("ov-int8", keep_float=("conv1",))) == ("ov-int8",)  # its own model


def test_runs_never_overwrite_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def fake(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        from quantmark.sweep.cell import cell_dir

        seen.append((cell.repeat, spec.threads, spec.batch_sizes, spec.seconds))
        cell_dir(root, cell).mkdir(parents=True)
        return {"status": "failed", "message": "x"}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    measurer = LoadGenMeasurer("Offline", MODEL, tmp_path)
    for _ in range(2):
        measurer.run(Candidate("ort-int8", 8, 1), 1.5)
    LoadGenMeasurer("Offline", MODEL, tmp_path).run(Candidate("ort-int8", 8, 1), 1.5)  # resumed
    assert seen == [(1, 1, [8], 1.5), (2, 1, [8], 1.5), (3, 1, [8], 1.5)]


@pytest.mark.slow
def test_real_runs_and_accuracy_of_digits(tmp_path: Path) -> None:
    """One quick run of ort-int8 and ov-fp32 and the accuracy of ort-int8 against the best of
    ort-fp32 and torch-fp32, through the measurer, as the search would call it."""
    measurer = LoadGenMeasurer("Offline", MODEL, tmp_path,
                               references=("ort-fp32", "torch-fp32"))
    fast = measurer.run(Candidate("ort-int8", 8), 1.0)
    assert fast.why == "" and fast.valid, fast
    assert fast.samples_per_s > 0 and fast.memory_mb > 0 and fast.seconds > 0
    assert Path(fast.run_dir, "results.json").is_file()
    assert vendor_command(fast.run_dir) is None  # ONNX Runtime has no vendor tool
    assert shlex.split(measurer.run_command(Candidate("ort-int8", 8)))[:4] == \
        ["python", "run.py", "--scenario", "Offline"]
    ov = measurer.run(Candidate("ov-fp32", 8, 0, (("ov_api", "async"),)), 1.0)
    assert ov.why == "" and ov.samples_per_s > 0
    assert vendor_command(ov.run_dir).startswith("benchmark_app ")

    result = measurer.accuracy(Candidate("ort-int8", 32))
    assert result.why == "", result
    assert 50 < result.top1 <= 100 and result.model_size_mb > 0 and result.seconds > 0
    assert result.reference in ("ort-fp32", "torch-fp32")
    assert result.low <= result.change_points <= result.high
    assert -100 <= result.low and result.high <= 100
    # the label-free agreement with the reference beside it, over the set's own units
    assert result.agreement.startswith(f"top-1 agreement with {result.reference} ")
    assert "over" in result.agreement
    name, best = measurer.reference()
    other = next(run for (sut, _), run in measurer._runs.items()
                 if sut in ("ort-fp32", "torch-fp32") and sut != name)
    assert best.figure >= other.figure
    assert measurer.accuracy(Candidate("ort-int8", 8)).seconds == 0.0  # cached


@pytest.mark.parametrize("size", [{"input_size": "16"}, {"image_sizes": ["16"]}])
def test_the_models_input_size_reaches_every_cell(
        size: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from quantmark.sweep.cell import cell_config

    configs = []

    def fake(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        configs.append(cell_config(root, spec, cell))
        return {"status": "failed", "message": "x"}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    measurer = LoadGenMeasurer("Offline", MODEL, tmp_path, num_classes=10, **size)
    measurer.run(Candidate("ort-int8", 8, 2, ()), 1.0)
    measurer.accuracy(Candidate("ort-int8"))
    assert [c.input_size for c in configs] == ["16", "16"]
    assert [(c.mode, c.batch_size, c.threads, c.num_classes) for c in configs] == \
        [("performance", 8, 2, 10), ("accuracy", 8, 0, 10)]


def test_a_text_models_sequence_length_padding_and_tokenizer_reach_every_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run.py recommend --seq-len 32 --padding dynamic --tokenizer T`` on a text model: the
    flags become the measurer's settings and every run and accuracy run takes them."""
    import argparse

    from quantmark.commands.recommend import measurer_settings
    from quantmark.sweep.cell import cell_config

    configs = []

    def fake(root: Path, spec: Any, cell: Any) -> dict[str, Any]:
        configs.append(cell_config(root, spec, cell))
        return {"status": "failed", "message": "x"}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    flags = {"model_path": "enc/model.onnx", "dataset_path": None, "calibration_list": None,
             "input_size": None, "num_classes": 0, "preprocess": None, "resize": None,
             "resize_short": None, "mean": None, "std": None, "scale": None,
             "channel_order": None, "labels": None, "seq_len": 32, "padding": "dynamic",
             "tokenizer": str(tmp_path / "tokenizer.json")}
    settings = measurer_settings(argparse.Namespace(**flags))
    measurer = LoadGenMeasurer("Offline", "enc", tmp_path, **settings)
    measurer.run(Candidate("ort-int8dyn", 8, 2, ()), 1.0)
    measurer.accuracy(Candidate("ort-int8dyn"))
    assert [(c.seq_len, c.padding, c.tokenizer) for c in configs] == \
        [(32, "dynamic", str(tmp_path / "tokenizer.json"))] * 2
