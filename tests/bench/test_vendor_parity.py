"""The vendor-parity benchmark's logic (sides, rotation, ratios, table) and its real parts: the
framework loop on an ONNX model, the .npy batches benchmark_app reads, and benchmark_app fed
real samples through ``-i`` with ``-inference_only false``."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantmark.bench import vendor_loops, vendor_parity
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
    assert "ov-int8 m Offline b8" in (tmp_path / "table.md").read_text()
