"""run.py train-bench for real on the CPU: FP32 vs bf16 autocast, its summary, the report."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from quantmark.ground.records import SCHEMA_VERSION, load_record
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_RUN = ROOT / ("docs/example-batch-scan/runs/mobilenetv2/ort-fp32/Offline-b1-r1/"
                      "vm-ort-fp32/mobilenetv2/Offline/performance/run_1")
# the smallest settings that still train a real zoo network: MobileNetV2 on 64x64 images; one
# thread, so a busy shared CI machine does not make the two threads fight over one core
SMALL = ("--model", "mobilenetv2", "--image-size", "64", "--batch-size", "4", "--steps", "3",
         "--warmup", "1", "--threads", "1")


def _ok(proc) -> None:
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])


@pytest.fixture(scope="module")
def torch_bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train-bench")
    proc = run_cli("train-bench", *SMALL, "--framework", "torch", "--precision", "fp32,amp",
                   "--output", str(out), timeout=300)
    _ok(proc)
    assert "train-bench summary" in proc.stdout
    return out


def _record(folder: Path, framework: str, precision: str) -> dict:
    """The record as the report reads it (typed, through the one loader), as JSON holds it."""
    path = folder / f"{framework}-mobilenetv2-b4-s64-{precision}.json"
    record = load_record(path, "train-bench")
    assert record.schema == SCHEMA_VERSION == json.loads(path.read_text())["schema"]
    return record.to_dict()


def test_torch_records_fp32_and_bf16_autocast(torch_bench):
    fp32, amp = (_record(torch_bench, "torch", p) for p in ("fp32", "amp"))
    for record, precision in ((fp32, "fp32"), (amp, "amp")):
        assert record["kind"] == "train-bench" and record["precision"] == precision
        assert record["device"] == "cpu" and record["batch_size"] == 4
        assert record["image_size"] == 64 and record["steps"] == 3
        times = record["step_times_s"]
        assert len(times) == 3 and all(t > 0 for t in times)
        stats = record["step_time_s"]
        assert stats["min"] <= stats["median"] <= stats["p90"] <= stats["max"]
        assert stats["median"] == pytest.approx(sorted(times)[1])
        assert record["images_per_s"] == pytest.approx(4 / stats["median"])
        assert record["times"]["warmup_s"] >= record["times"]["first_step_s"] > 0
        assert len(record["losses"]) == 4 and record["loss_finite"] is True
        assert record["loss_first"] == record["losses"][0]
        # one fixed batch: the network starts memorising it
        assert record["loss_last"] < record["loss_first"]
        memory = record["memory"]
        assert memory["kind"] == "cpu" and "ru_maxrss" in memory["source"]
        assert memory["peak_mb"] >= memory["rss_before_training_mb"] > 0
        assert record["machine"]["hostname"] and record["software"]["torch"]
        assert record["threads"] == 1
    assert fp32["executed_precision"] == "fp32" and fp32["amp"]["enabled"] is False
    assert fp32["amp"]["evidence"]["first_conv_output_dtype"] == "torch.float32"
    assert amp["executed_precision"] == "bf16 autocast" and amp["amp"]["dtype"] == "bfloat16"
    assert amp["amp"]["evidence"]["first_conv_output_dtype"] == "torch.bfloat16"
    assert amp["amp"]["evidence"]["compute_dtype"] == "bfloat16"
    assert amp["amp"]["grad_scaler"] is False  # bf16 keeps fp32's range: nothing to scale


def test_summary_ratios_come_from_the_records(torch_bench):
    fp32, amp = (_record(torch_bench, "torch", p) for p in ("fp32", "amp"))
    with open(torch_bench / "train_bench.csv", newline="") as handle:
        rows = {r["precision"]: r for r in csv.DictReader(handle)}
    assert set(rows) == {"fp32", "amp"}
    expected = {
        "step_time_vs_fp32": amp["step_time_s"]["median"] / fp32["step_time_s"]["median"],
        "images_per_s_vs_fp32": amp["images_per_s"] / fp32["images_per_s"],
        "memory_vs_fp32": amp["memory"]["peak_mb"] / fp32["memory"]["peak_mb"],
    }
    for column, value in expected.items():
        assert float(rows["amp"][column]) == pytest.approx(value, rel=1e-12)
        assert float(rows["fp32"][column]) == 1.0
    assert float(rows["amp"]["step_median_s"]) == amp["step_time_s"]["median"]
    assert rows["amp"]["compute_dtype"] == "bfloat16"
    markdown = (torch_bench / "train_bench.md").read_text()
    amp_line = next(line for line in markdown.splitlines() if "| bf16 autocast |" in line)
    cells = [c.strip() for c in amp_line.strip("|").split("|")]
    assert cells[-3:] == [f"{expected['step_time_vs_fp32']:.2f}×",
                          f"{expected['images_per_s_vs_fp32']:.2f}×",
                          f"{expected['memory_vs_fp32']:.2f}×"]


def test_report_of_a_train_bench_folder_and_a_mixed_one(torch_bench, tmp_path):
    alone = tmp_path / "alone"
    shutil.copytree(torch_bench, alone)
    _ok(run_cli("report", str(alone), timeout=120))
    markdown = (alone / "report.md").read_text()
    assert "## Training (train-bench)" in markdown and "| bf16 autocast |" in markdown
    assert "## Batch-size scan" not in markdown  # no inference runs: no inference sections
    assert "Training (train-bench)" in (alone / "report.html").read_text()
    def without_path(folder: Path) -> list[dict]:
        with open(folder / "train_bench.csv", newline="") as handle:
            return [{k: v for k, v in r.items() if k != "path"} for r in csv.DictReader(handle)]

    assert without_path(alone) == without_path(torch_bench)  # the report's copy: same figures
    # beside an inference run: both in one report
    mixed = tmp_path / "mixed"
    shutil.copytree(EXAMPLE_RUN, mixed / "ort-fp32-run")
    shutil.copytree(torch_bench, mixed / "training")
    _ok(run_cli("report", str(mixed), timeout=120))
    markdown = (mixed / "report.md").read_text()
    assert "## mobilenetv2 — Offline" in markdown and "## Training (train-bench)" in markdown
    assert "ort-fp32" in (mixed / "report.csv").read_text()
    assert len((mixed / "train_bench.csv").read_text().strip().splitlines()) == 3


def test_tensorflow_mixed_bfloat16(tmp_path):
    pytest.importorskip("tensorflow")
    proc = run_cli("train-bench", "--model", "mobilenetv2", "--image-size", "32",
                   "--batch-size", "2", "--steps", "2", "--warmup", "1", "--threads", "1",
                   "--framework", "tf", "--precision", "amp", "--output", str(tmp_path),
                   timeout=300)
    _ok(proc)
    record = json.loads((tmp_path / "tf-mobilenetv2-b2-s32-amp.json").read_text())
    assert record["executed_precision"] == "mixed_bfloat16" and record["layout"] == "NHWC"
    evidence = record["amp"]["evidence"]
    assert evidence["first_conv_output_dtype"] == "bfloat16"
    assert evidence["variable_dtype"] == "float32"
    assert record["loss_finite"] and all(t > 0 for t in record["step_times_s"])
    assert record["images_per_s"] == pytest.approx(2 / record["step_time_s"]["median"])


def _one_line_error(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("flags", "needles"), [
    (("--model", "resnet5"), ("unknown model 'resnet5'", "resnet50")),
    (("--framework", "jax"), ("--framework 'jax'", "torch, tf")),
    (("--precision", "fp32,fp16"), ("--precision", "fp32, amp")),
    (("--steps", "0"), ("--steps 0", "1 or more")),
    (("--steps", "x"), ("--steps",)),
    (("--batch-size", "0"), ("--batch-size 0",)),
    (("--image-size", "16"), ("--image-size 16",)),
    (("--device", "tpu"), ("--device 'tpu'",)),
    (("--framework", "tf", "--model", "efficientnet-lite0"), ("no Keras model",)),
])
def test_bad_input_is_one_line(flags, needles, tmp_path):
    _one_line_error(run_cli("train-bench", *flags, "--output", str(tmp_path), timeout=60),
                    *needles)
    assert not list(tmp_path.glob("*.json"))


def test_framework_not_installed_is_one_line(monkeypatch):
    import importlib.util

    from quantmark.ground.errors import UserError
    from quantmark.train import step_bench as train_bench

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorflow" else real(name, *a))
    with pytest.raises(UserError) as error:
        train_bench.check(["tf"], "resnet50", 20, 3, None, None)
    assert re.fullmatch(r"--framework tf needs tensorflow, which is not installed: pip install "
                        r"'quantmark\[tf\]'", str(error.value))


def _cuda_skip() -> str | None:
    from quantmark.sut.registry import gpu_present

    if not gpu_present():
        return "needs an NVIDIA GPU (none found)"
    import torch

    return None if torch.cuda.is_available() else "torch here has no CUDA"


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_skip() is not None, reason=str(_cuda_skip()))
def test_train_bench_fp16_amp_on_the_gpu(tmp_path):
    """On a GPU, AMP is fp16 autocast with a GradScaler and memory is the GPU's peak."""
    _ok(run_cli("train-bench", "--model", "resnet50", "--framework", "torch", "--steps", "5",
                "--warmup", "2", "--device", "gpu", "--output", str(tmp_path), timeout=1200))
    fp32, amp = (json.loads((tmp_path / f"torch-resnet50-b32-{p}.json").read_text())
                 for p in ("fp32", "amp"))
    assert fp32["device"] == amp["device"] == "gpu"
    assert amp["executed_precision"] == "fp16 autocast + GradScaler"
    assert amp["amp"]["evidence"]["compute_dtype"] == "float16"
    assert fp32["amp"]["evidence"]["compute_dtype"] == "float32"
    assert amp["memory"]["kind"] == "gpu" and amp["memory"]["peak_mb"] > 0
    assert amp["loss_finite"] and fp32["loss_finite"]
