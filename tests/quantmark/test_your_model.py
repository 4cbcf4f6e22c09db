"""Your model, your data, as a user runs them: a CIFAR-style 32x32 10-class ONNX classifier
with a class-per-folder dataset on the INT8 SUTs of ONNX Runtime, OpenVINO and TFLite, in
Offline and SingleStream, its accuracy scored against the dataset's own 10 labels; and the
model files and datasets quantmark cannot run refused in one line each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, save
from PIL import Image

from tests.conftest import run_cli
from tests.docs.guide_files import class_folders
from tests.quantmark.run.test_checks import one_line_error

CLASSES = 10
PER_CLASS = 12


def _cifar_net(path: Path) -> Path:
    """A small seeded CNN for 3x32x32 inputs and 10 classes, exported as a user would."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES)).eval()
    batch = torch.export.Dim("batch", min=1, max=4096)
    torch.onnx.export(net, (torch.zeros(2, 3, 32, 32),), str(path), dynamo=True,
                      external_data=False, input_names=["image"], output_names=["logits"],
                      dynamic_shapes=({0: batch},), verbose=False)
    return path


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The model, its dataset and a short user.conf."""
    folder = tmp_path_factory.mktemp("cifar")
    conf = folder / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    return _cifar_net(folder / "cifar.onnx"), class_folders(folder / "data", PER_CLASS), conf


def _run(cifar: tuple[Path, Path, Path], out: Path, *args: str):
    model, data, conf = cifar
    return run_cli("--model-path", str(model), "--dataset-path", str(data), "--user-conf",
                   str(conf), "--output", str(out), *args, timeout=900)


def _results(out: Path, sut: str, scenario: str, mode: str = "performance") -> dict:
    folder = out / f"vm-{sut}" if (out / f"vm-{sut}").is_dir() else next(out.glob(f"*-{sut}"))
    leaf = "performance/run_1" if mode == "performance" else "accuracy"
    return json.loads((folder / "cifar" / scenario / leaf / "results.json").read_text())


def _check_sut(cifar, tmp_path: Path, sut: str) -> None:
    accuracy = _run(cifar, tmp_path, "--scenario", "Offline", "--sut", sut, "--mode",
                    "accuracy")
    assert accuracy.returncode == 0, accuracy.stderr[-3000:]
    assert "model cifar: 3x32x32 float32 input, 10 classes" in accuracy.stdout
    record = _results(tmp_path, sut, "Offline", "accuracy")
    run = next(tmp_path.glob(f"*-{sut}/cifar/Offline/accuracy"))
    assert (run / "accuracy.txt").is_file()
    labels = {int(line.split()[1]) for line in (run / "val_map.txt").read_text().splitlines()}
    assert labels == set(range(CLASSES))  # scored against the dataset's own 10 labels
    assert (run / "classes.txt").read_text().split() == [f"class{c}" for c in range(CLASSES)]
    assert record["model"]["input"] == {"height": 32, "width": 32, "channels": 3,
                                        "dtype": "float32"}
    assert record["model"]["num_classes"] == CLASSES
    assert record["dataset"]["num_classes"] == CLASSES
    assert record["sut"]["executed_precision"].startswith("int8"), record["sut"]
    assert 0 <= record["accuracy"]["top1"] <= 100
    for scenario in ("Offline", "SingleStream"):
        proc = _run(cifar, tmp_path, "--scenario", scenario, "--sut", sut)
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = _results(tmp_path, sut, scenario)["summary"]
        assert summary["validity"] == "VALID", summary


def test_a_cifar_model_and_class_folders_on_ort_int8(cifar, tmp_path: Path) -> None:
    _check_sut(cifar, tmp_path, "ort-int8")


@pytest.mark.slow
@pytest.mark.parametrize("sut", ["ov-int8", "tflite-int8"])
def test_a_cifar_model_and_class_folders_on_openvino_and_tflite(cifar, tmp_path: Path,
                                                                 sut: str) -> None:
    _check_sut(cifar, tmp_path, sut)


def _onnx(path: Path, inputs: list[tuple[str, list]], output: list) -> Path:
    nodes = [helper.make_node("Identity", [inputs[0][0]], ["y"])]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_model_files_and_datasets_quantmark_cannot_run_are_one_line(cifar, tmp_path) -> None:
    model, data, _ = cifar
    run = ("--scenario", "Offline", "--sut", "ort-fp32", "--output", str(tmp_path / "o"))
    two = _onnx(tmp_path / "two.onnx", [("a", ["N", 3, 32, 32]), ("b", ["N", 3, 32, 32])],
                ["N", 10])
    five = _onnx(tmp_path / "five.onnx", [("x", ["N", 5, 32, 32])], ["N", 10])
    boxes = _onnx(tmp_path / "boxes.onnx", [("x", ["N", 3, 32, 32])], ["N", 10, 4])
    one_line_error(run_cli(*run, "--model-path", str(two), "--dataset-path", str(data)),
                   "has 2 inputs")
    one_line_error(run_cli(*run, "--model-path", str(five), "--dataset-path", str(data)),
                   "has 5 channels")
    one_line_error(run_cli(*run, "--model-path", str(boxes), "--dataset-path", str(data)),
                   "no float [N, classes] output")
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(run_cli(*run, "--model-path", str(model), "--dataset-path", str(empty)),
                   str(empty))
    twelve = tmp_path / "twelve"
    for c in range(12):
        (twelve / f"c{c:02d}").mkdir(parents=True)
        Image.new("RGB", (8, 8), (c, c, c)).save(twelve / f"c{c:02d}" / "x.png")
    one_line_error(run_cli(*run, "--model-path", str(model), "--dataset-path", str(twelve)),
                   "12", "10")
    broken = tmp_path / "broken"
    shutil.copytree(data, broken)
    (broken / "class3" / "x.png").write_bytes(b"not a png")
    proc = run_cli(*run, "--model-path", str(model), "--dataset-path", str(broken))
    # the cache's progress lines come first; the error is the one last line
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("error: image") and "x.png cannot be decoded" in last, last
    assert "replace or remove the file" in last


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A MobileNetV2 state_dict with a 37-class head, as a fine-tuning script saves it, and a
    37-class folder of 400x300 images to score it on."""
    import torch

    from quantmark.models.zoo import get_model

    folder = tmp_path_factory.mktemp("fine-tuned")
    torch.manual_seed(1)
    torch.save(get_model("mobilenetv2").builder(37).state_dict(), folder / "pets.pt")
    rng = np.random.default_rng(1)
    for c in range(37):
        (folder / "data" / f"breed{c:02d}").mkdir(parents=True)
        for i in range(2):
            pixels = rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / "data" / f"breed{c:02d}" / f"{i}.jpg")
    return folder / "pets.pt", folder / "data"


@pytest.mark.slow
@pytest.mark.parametrize("sut", ["ort-fp32", "ov-fp32", "tflite-fp32", "tf-fp32", "torch-fp32"])
def test_a_fine_tuned_384_pixel_37_class_model_on_every_cpu_framework(fine_tuned, tmp_path,
                                                                        sut) -> None:
    weights, data = fine_tuned
    proc = run_cli("--scenario", "Offline", "--sut", sut, "--mode", "accuracy", "--model",
                   "mobilenetv2", "--model-path", str(weights), "--num-classes", "37",
                   "--input-size", "384", "--dataset-path", str(data), "--output",
                   str(tmp_path), timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model mobilenetv2: 3x384x384 float32 input, 37 classes" in proc.stdout
    run = next(tmp_path.glob(f"*-{sut}/mobilenetv2/Offline/accuracy"))
    record = json.loads((run / "results.json").read_text())
    assert record["model"]["input"]["height"] == 384 and record["model"]["num_classes"] == 37
    assert record["accuracy"]["total"] == 74 - record["dataset"]["held_out_for_calibration"]
    assert {int(line.split()[1]) for line in (run / "val_map.txt").read_text().splitlines()
            } <= set(range(37))
