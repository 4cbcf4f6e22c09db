"""run.py export on x86, and the lean Pi install running what it wrote.

The lean install is real: tools/pi_install.sh makes a fresh virtual environment with only the
"pi" set (LoadGen, numpy, pillow, ai-edge-litert), so nothing heavy can be imported by accident.
tools/arm_check.sh repeats the same on an emulated arm64 userland (tests/tools/test_arm_check.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow
HEAVY = ("torch", "tensorflow", "openvino", "onnxruntime", "onnx", "matplotlib", "skimage",
         "sklearn", "scipy")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, quantmark_cache) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("export")
    proc = run_cli("export", "--sut", "tflite-fp32,tflite-int8", "--model", "mobilenetv2",
                   "--output", str(out), timeout=1200)
    return proc, out


@pytest.fixture(scope="module")
def lean_python(tmp_path_factory) -> Path:
    """tools/pi_install.sh into a fresh venv: the install a Pi user runs."""
    venv = tmp_path_factory.mktemp("lean") / "venv"
    proc = subprocess.run([str(ROOT / "tools/pi_install.sh"), str(venv)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "quantmark installed in" in proc.stdout
    return venv / "bin" / "python"


def lean_cli(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(ROOT / "run.py"), *args], capture_output=True,
                          text=True, timeout=600)


def test_export_writes_each_artifact_its_record_and_the_dataset(exported):
    proc, out = exported
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"--model-path {out / 'mobilenetv2-tflite-int8.tflite'}" in proc.stdout
    assert f"--dataset-path {out / 'dataset'}" in proc.stdout
    records = {}
    for sut in ("tflite-fp32", "tflite-int8"):
        model_file = out / f"mobilenetv2-{sut}.tflite"
        record = json.loads(model_file.with_suffix(".json").read_text())
        records[sut] = record
        assert record["kind"] == "quantmark-export" and record["sut"] == sut
        assert record["model"] == "mobilenetv2" and record["file"] == model_file.name
        assert record["sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()
        assert record["size_bytes"] == model_file.stat().st_size
        assert record["input"]["shape_signature"] == [-1, 224, 224, 3]
        assert record["preprocess"]["crop"] == 224 and record["preprocess"]["layout"] == "NHWC"
        assert record["exported_on"]["arch"] and record["software"]["tensorflow"]
    int8, fp32 = records["tflite-int8"], records["tflite-fp32"]
    assert fp32["calibration"] is None and fp32["executed_precision"] == "fp32"
    assert int8["executed_precision"] == "int8" and int8["input"]["dtype"] == "int8"
    assert int8["calibration"]["source"] == "builtin cal_map.txt"
    assert int8["calibration"]["count"] == 256
    assert int8["calibration"]["hash"] == int8["artifact"]["meta"]["calibration_hash"]
    # the int8 file is several times smaller: int8 weights, not a renamed fp32 file
    assert int8["size_bytes"] * 3 < fp32["size_bytes"]
    lines = (out / "dataset" / "val_map.txt").read_text().splitlines()
    assert len(lines) == 1536 and all((out / "dataset" / line.split()[0]).is_file()
                                      for line in lines)
    # the source photo of each crop goes with them: a run there is judged per photo
    groups = (out / "dataset" / "val_groups.txt").read_text().splitlines()
    assert [g.split()[0] for g in groups] == [line.split()[0] for line in lines]
    assert 2 <= len({g.split()[1] for g in groups}) < len(groups)


def test_export_takes_only_tflite_suts(tmp_path):
    proc = run_cli("export", "--sut", "ort-int8", "--model", "mobilenetv2", "--output",
                   str(tmp_path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "tflite-int8" in proc.stderr and "ort-int8" in proc.stderr


def test_lean_install_has_no_heavy_framework(lean_python):
    code = ("import importlib.util, json; print(json.dumps([m for m in "
            f"{HEAVY!r} if importlib.util.find_spec(m)]))")
    proc = subprocess.run([str(lean_python), "-c", code], capture_output=True, text=True)
    assert json.loads(proc.stdout) == []


def test_lean_install_runs_the_exported_int8_model(lean_python, exported, tmp_path):
    _, out = exported
    conf = tmp_path / "short.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    model_file = out / "mobilenetv2-tflite-int8.tflite"
    # no --model: the export record names it
    proc = lean_cli(lean_python, "--scenario", "SingleStream", "--sut", "tflite-int8",
                    "--model-path", str(model_file), "--dataset-path", str(out / "dataset"),
                    "--user-conf", str(conf), "--output", str(tmp_path / "results"),
                    "--sut-option", "tflite_invoke=per-sample")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = next((tmp_path / "results").glob("*-tflite-int8/mobilenetv2/SingleStream/"
                                           "performance/run_1"))
    assert "Result is : VALID" in (run / "mlperf_log_summary.txt").read_text()
    results = json.loads((run / "results.json").read_text())
    record = json.loads(model_file.with_suffix(".json").read_text())
    assert results["model"]["name"] == "mobilenetv2"
    assert results["model"]["meta"]["export_record"] == record
    assert results["model"]["weights"].startswith("exported: ")
    assert results["sut"]["executed_precision"] == "int8"
    assert results["sut"]["invoke"] == "per-sample"
    assert results["sut"]["threads"] == os.cpu_count()  # XNNPACK: one thread per core
    assert results["dataset"]["fingerprint"] == record["dataset_fingerprint"]
    assert {"board", "thermal"} <= results["machine"].keys()


def _one_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_lean_install_bad_input_is_one_line_each(lean_python, exported, tmp_path):
    _, out = exported
    int8 = out / "mobilenetv2-tflite-int8.tflite"
    common = ("--dataset-path", str(out / "dataset"), "--output", str(tmp_path / "r"))
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "ort-int8", "--model",
                       "mobilenetv2", *common), "onnxruntime", "pip install 'quantmark[ort]'")
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-int8",
                       "--model-path", str(int8), "--output", str(tmp_path / "r")),
              "built-in dataset", "--dataset-path")
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-int8",
                       "--model-path", str(int8), "--sut-option", "tflite_invoke=always", *common),
              "choose one of batched, per-sample")
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-int8", "--model",
                       "resnet50", "--model-path", str(int8), *common),
              "exported for model mobilenetv2")
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-fp32",
                       "--model-path", str(int8), *common), "run it as tflite-int8")
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-int8", "--model",
                       "mobilenetv2", *common), "needs tensorflow", "--model-path")
    # a record copied beside another file: it would misname that file's calibration
    stale = tmp_path / "mobilenetv2-tflite-int8.tflite"
    shutil.copyfile(out / "mobilenetv2-tflite-fp32.tflite", stale)
    shutil.copyfile(int8.with_suffix(".json"), stale.with_suffix(".json"))
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-fp32",
                       "--model-path", str(stale), *common), "describes another file")
    # a classifier made for 160x160 inputs given to a 224x224 model's run
    small = tmp_path / "small.tflite"
    made = subprocess.run([sys.executable, str(ROOT / "tools/make_tflite.py"), "--size", "160",
                           str(small)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    _one_line(lean_cli(lean_python, "--scenario", "Offline", "--sut", "tflite-fp32", "--model",
                       "mobilenetv2", "--model-path", str(small), *common),
              "[?,160,160,3]", "feeds float32 3x224x224", "pass --input-size 160x160")
    results = tmp_path / "r"
    results.mkdir(exist_ok=True)
    _one_line(lean_cli(lean_python, "report", str(results), "--output", str(tmp_path / "rep")),
              "matplotlib", "quantmark[data]")
