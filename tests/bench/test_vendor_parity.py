"""The vendor-parity benchmark's logic (sides, rotation, ratios, table, a detector's
postprocessing share, the reasons for what is not measured) and its real parts: the framework
loop on an ONNX model, the .npy batches benchmark_app reads, benchmark_app fed real samples
through ``-i`` with ``-inference_only false``, and whole detector cases on the built-in
detector."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantmark.bench import parity_postprocess, vendor_loops, vendor_parity
from quantmark.bench.vendor_parity import QUANTMARK, Case, Side, sides_for, table
from tests.quantmark.test_cli import tiny_onnx


def test_cases_and_their_sides() -> None:
    case = Case.parse("ov-int8:resnet50:Offline:8")
    assert (case.sut, case.model, case.scenario, case.batch) == ("ov-int8", "resnet50",
                                                                 "Offline", 8)
    kinds = {sut: [(s.kind, s.regime) for s in sides_for(Case(sut, "m", "SingleStream", 1))]
             for sut in ("ov-int8", "tflite-int8", "ort-int8")}
    assert kinds["ov-int8"] == [("quantmark", "real"), ("benchmark_app", "constant"),
                                ("benchmark_app", "real")]
    assert ("litert-benchmark", "constant") in kinds["tflite-int8"]
    assert kinds["ort-int8"][1:] == [("loop", "real"), ("loop", "constant")]
    # litert-benchmark only runs the model's own batch of 1: no such side at batch 8
    assert all(s.kind != "litert-benchmark" for s in sides_for(Case("tflite-int8", "m",
                                                                     "Offline", 8)))


def test_rounds_rotate_the_order_and_pair_the_values(monkeypatch) -> None:
    calls: list[str] = []
    speeds = {"quantmark": [90.0, 95.0, 92.0], "real": [100.0, 100.0, 100.0],
              "constant": [120.0, 118.0, 119.0]}

    def fake_quantmark(case: Case, seconds: float, work: Path) -> tuple[float, dict[str, Any]]:
        calls.append("quantmark")
        return speeds["quantmark"][calls.count("quantmark") - 1], {"speed_settings": {"x": 1}}

    def fake_side(side: Side, case: Case, settings: dict[str, Any], seconds: float,
                  work: Path) -> float:
        assert settings == {"x": 1}  # the settings come from quantmark's own results.json
        calls.append(side.regime)
        return speeds[side.regime][calls.count(side.regime) - 1]

    monkeypatch.setattr(vendor_parity, "run_quantmark", fake_quantmark)
    monkeypatch.setattr(vendor_parity, "measure_side", fake_side)
    result = vendor_parity.run_case(Case("ort-int8", "m", "Offline", 8), rounds=3, seconds=1)
    assert calls == ["quantmark", "real", "constant", "real", "constant", "quantmark",
                     "constant", "quantmark", "real"]
    assert result["values"][QUANTMARK] == speeds["quantmark"]
    real = result["ratios"]["framework loop [real input]"]
    assert real["point"] == pytest.approx(0.92)  # the median of the paired ratios
    assert real["low"] < real["point"] < real["high"] < 1
    text = table([result])
    assert "| ort-int8 m Offline b8 | framework loop | real | 92.00 samples/s |" in text
    assert "| no |" in text


def test_latency_ratio_is_speed_not_time() -> None:
    ratio = vendor_parity._ratio(Case("tflite-int8", "m", "SingleStream", 1),
                                 quantmark=[1.10, 1.11, 1.09], reference=[1.0, 1.0, 1.0])
    assert ratio["point"] == pytest.approx(1 / 1.10, rel=1e-3)


@pytest.mark.parametrize("printed,expected", [("   Median:        916.10 us", 0.9161),
                                              ("   Median:        1.23 ms", 1.23)])
def test_benchmark_app_latency_in_us_or_ms(monkeypatch, printed, expected) -> None:
    monkeypatch.setattr(vendor_parity, "_output", lambda command: f"[ INFO ] {printed}\n")
    settings = {"vendor_command": "benchmark_app -m m.xml -b 1 -t 10 -hint latency"}
    value = vendor_parity.run_benchmark_app(Case("ov-int8", "m", "SingleStream", 1), settings,
                                            6, None)
    assert value == pytest.approx(expected)


def test_framework_loop_and_npy_batches_on_real_samples(tmp_path, quantmark_cache) -> None:
    """The reference loop runs the artifact on the run's own samples, 16 different batches."""
    pytest.importorskip("onnxruntime")
    model = str(tiny_onnx(tmp_path / "tiny.onnx"))
    result = vendor_loops.measure("ort-fp32", "mobilenetv2", 2, 1, "real", 0.3, model,
                                  samples=12)
    assert result["calls"] > 3 and result["samples_per_s"] > 0 and result["median_ms"] > 0
    assert "ORT defaults" in result["api"] and result["model_file"].endswith(".onnx")
    assert result["distinct_samples"] == 12
    paths = vendor_loops.write_npy("ort-fp32", "mobilenetv2", 2, 1, str(tmp_path / "npy"),
                                   model, samples=11)
    arrays = [np.load(p) for p in paths]
    assert len(arrays) == 6  # 11 samples in batches of 2, the last topped up from the first
    assert all(a.shape == (2, 3, 224, 224) and a.dtype == np.float32 for a in arrays)
    assert len({row.tobytes() for a in arrays for row in a}) == 11  # different samples


@pytest.mark.slow
def test_benchmark_app_reads_real_samples(tmp_path, digits_weights, digits_calibration) -> None:
    """The real-input side works: benchmark_app takes the .npy batches and sets a new one on
    every inference (-inference_only false), with the SUT's recorded settings."""
    pytest.importorskip("openvino")
    if not (Path(sys.executable).parent / "benchmark_app").is_file():
        pytest.skip("benchmark_app is not installed beside this Python (the cpu extra)")
    from quantmark.sut.interface import SutOptions
    from quantmark.sut.openvino.backend import create
    from tests.digits_model import DIGITS_SPEC

    backend = create("ov-fp32", SutOptions(model=DIGITS_SPEC.name, scenario="Offline",
                                           model_path=str(digits_weights)),
                     DIGITS_SPEC, digits_calibration)
    backend.load()
    settings = backend.speed_settings("Offline", 4)
    folder = tmp_path / "npy"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for number in range(3):
        np.save(folder / f"b{number}.npy", rng.standard_normal((4, 3, 32, 32), np.float32))
    case = Case("ov-fp32", DIGITS_SPEC.name, "Offline", 4)
    constant = vendor_parity.run_benchmark_app(case, settings, 1, None)
    real = vendor_parity.run_benchmark_app(case, settings, 1, folder)
    assert constant > 0 and real > 0
    assert "-nireq" in shlex.split(settings["vendor_command"])
    json.dumps(settings)  # results.json must be able to hold it


def test_rerunning_resumes_keeps_finished_cases_and_goes_on_after_a_failure(
        tmp_path, monkeypatch) -> None:
    ran: list[str] = []

    def fake_case(case: Case, rounds: int, seconds: float) -> dict[str, Any]:
        ran.append(case.sut)
        if case.sut == "tf-fp32":
            raise RuntimeError("tool crashed")
        return {"case": vars(case), "metric": "samples/s",
                "values": {QUANTMARK: [1.0] * rounds, "x [real input]": [1.0] * rounds},
                "ratios": {"x [real input]": {"point": 1.0, "low": None, "high": None}}}

    monkeypatch.setattr(vendor_parity, "run_case", fake_case)
    cases = "ort-int8:m:Offline:8,tf-fp32:m:Offline:8,ov-int8:m:Offline:8"
    args = ["--cases", cases, "--rounds", "2", "--output", str(tmp_path)]
    with pytest.raises(SystemExit, match="1 case"):
        vendor_parity.main(args)
    assert ran == ["ort-int8", "tf-fp32", "ov-int8"]
    kept = [e["case"]["sut"] for e in json.loads((tmp_path / "parity.json").read_text())]
    assert kept == ["ort-int8", "ov-int8"]
    ran.clear()
    with pytest.raises(SystemExit):
        vendor_parity.main(args)
    assert ran == ["tf-fp32"]  # only the failed case runs again
    text = (tmp_path / "table.md").read_text()
    assert "ov-int8 m Offline b8" in text
    assert "- tf-fp32 m Offline b8: not measured: tool crashed\n" in text  # never silent


def test_share_of_quantmarks_time_per_batch_and_worker() -> None:
    # SingleStream: respond's ms against the p50 latency of one sample
    assert parity_postprocess.share(False, 2.0, 0.5, 1, 1) == pytest.approx(0.25)
    # Offline: 2 workers at 1000 samples/s with batch 8 spend 16 ms a batch each
    assert parity_postprocess.share(True, 1000.0, 4.0, 8, 2) == pytest.approx(0.25)


def test_a_detector_case_records_its_postprocessing_beside_the_ratio(monkeypatch) -> None:
    """Each round times respond right after quantmark's run and keeps its share; the ratio
    stays the measured one, and the table says what the ratio reads without postprocessing."""
    command = "benchmark_app -m /cache/det-int8.xml -d CPU -b 8 -t 10"
    rates = iter([900.0, 1000.0])
    posts = iter([2.0, 1.6])

    def fake_quantmark(case: Case, seconds: float, work: Path) -> tuple[float, dict[str, Any]]:
        return next(rates), {"speed_settings": {"vendor_command": command, "workers": 2},
                             "sut": {"model_file": "/cache/det-int8.xml"},
                             "task": {"name": "detection", "postprocess": {"nms": "numpy"}}}

    def fake_post(case: Case, value: float, settings: dict[str, Any], seconds: float
                  ) -> dict[str, Any]:
        respond = next(posts)
        return {"respond_ms": respond, "predict_ms": 3.0, "calls": 10, "nms": "numpy",
                "share": parity_postprocess.share(True, value, respond, case.batch, 2)}

    monkeypatch.setattr(vendor_parity, "run_quantmark", fake_quantmark)
    monkeypatch.setattr(vendor_parity, "measure_postprocess", fake_post)
    monkeypatch.setattr(vendor_parity, "measure_side", lambda *args: 1000.0)
    result = vendor_parity.run_case(Case("ov-int8", "det", "Offline", 8), rounds=2, seconds=1)
    post = result["postprocess"]
    assert [r["share"] for r in post["rounds"]] == pytest.approx([0.1125, 0.1])
    ratio = result["ratios"]["benchmark_app [constant input]"]["point"]
    measured = vendor_parity._ratio(Case("ov-int8", "det", "Offline", 8), [900.0, 1000.0],
                                    [1000.0, 1000.0])["point"]
    assert ratio == pytest.approx(measured)  # as measured: the postprocessing stays inside
    without = post["ratio_without_postprocess"]["benchmark_app [constant input]"]
    assert without == pytest.approx(measured / (1 - post["share"]))
    text = table([result])
    assert "Postprocessing inside quantmark's timed work" in text
    assert "| ov-int8 det Offline b8 | numpy | 0.106 [0.100, 0.112] |" in text
    assert "- ov-int8 det Offline b8: framework loop: none for OpenVINO" in text


def test_the_vendor_command_must_run_quantmarks_artifact() -> None:
    case = Case("tflite-int8", "det", "SingleStream", 1)
    settings = {"vendor_command": "litert-benchmark --model /cache/other.tflite"}
    with pytest.raises(RuntimeError, match="does not run quantmark's artifact"):
        vendor_parity.check_artifact(case, settings, {"sut": {"model_file": "/cache/det.tflite"}})
    vendor_parity.check_artifact(case, settings, {"sut": {"model_file": "/cache/other.tflite"}})


def test_sides_a_case_lacks_are_named_with_their_reason() -> None:
    assert "batch of 1, not 8" in vendor_parity.unmeasured(Case("tflite-int8", "m", "Offline",
                                                                8))[0]
    assert vendor_parity.unmeasured(Case("ort-int8", "m", "Offline", 8)) == []


@pytest.mark.slow
@pytest.mark.parametrize("text,tool,suffix,layout", [
    # ov-fp32: the same benchmark_app path as ov-int8 (BENCHMARKS.md at ab1032b measures that one)
    # without NNCF's quantization of the detector, ~100 s of this test on a fresh cache
    ("ov-fp32:digits-detect:Offline:8", "benchmark_app", ".xml", (8, 3, 96, 96)),
    ("tflite-int8:digits-detect:SingleStream:1", "litert-benchmark", ".tflite", (1, 96, 96, 3))])
def test_a_detector_case_runs_for_real(tmp_path, text, tool, suffix, layout) -> None:
    """The built-in detector, one short round: every side measured on the file quantmark ran,
    the references fed letterboxed samples in the SUT's layout, respond's share recorded."""
    if not (Path(sys.executable).parent / tool).is_file():
        pytest.skip(f"{tool} is not installed beside this Python (the cpu extra)")
    case = Case.parse(text)
    result = vendor_parity.run_case(case, rounds=1, seconds=1)
    assert all(len(values) == 1 and values[0] > 0 for values in result["values"].values())
    assert {s.kind for s in sides_for(case)} >= {"quantmark", tool}
    command = shlex.split(result["speed_settings"]["vendor_command"])
    artifact = command[command.index("-m" if tool == "benchmark_app" else "--model") + 1]
    assert artifact.endswith(suffix) and "digits-detect" in Path(artifact).name
    assert Path(artifact).is_file()
    post = result["postprocess"]
    assert 0 < post["share"] < 1 and post["rounds"][0]["respond_ms"] > 0
    assert set(post["ratio_without_postprocess"]) == set(result["ratios"])
    assert "Postprocessing inside quantmark's timed work" in table([result])
    loaded = vendor_loops.prepared_backend(case.sut, case.model, case.batch, 0)
    batches, _ = vendor_loops.real_batches(loaded, case.batch, samples=case.batch)
    assert batches[0].shape == layout and batches[0].dtype == np.float32
