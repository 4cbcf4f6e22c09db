"""A task added as one folder outside quantmark (tests/tasks/toy_plugin: a package and its
``quantmark.tasks`` entry point) is found, read from its model file and run end to end:
LoadGen in performance and accuracy mode, the record naming the task and its metric, and the
task's own accuracy.txt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import run_cli

PLUGIN = Path(__file__).parent / "toy_plugin"


def _brightness_onnx(path: Path) -> Path:
    """An ONNX model whose one output [N, 1] is its input's mean (pixels/255): a 1x1
    convolution averaging the channels (a compute kernel the SUT's precision proof counts),
    then a global average pool."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "weight"], ["grey"]),
         helper.make_node("GlobalAveragePool", ["grey"], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["brightness"])],
        "brightness",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("brightness", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor("weight", TensorProto.FLOAT, [1, 3, 1, 1], [1 / 3] * 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _dataset(root: Path, count: int = 40) -> Path:
    """Flat grey images of known brightness, each labelled with its decile (val_map.txt)."""
    root.mkdir()
    lines = []
    rng = np.random.default_rng(0)
    for number in range(count):
        level = int(rng.integers(0, 256))
        Image.new("RGB", (8, 8), (level, level, level)).save(root / f"{number}.png")
        lines.append(f"{number}.png {min(9, round(10 * level / 255))}\n")
    (root / "val_map.txt").write_text("".join(lines))
    return root


def test_a_task_added_as_one_folder_runs_end_to_end(tmp_path: Path) -> None:
    model = _brightness_onnx(tmp_path / "brightness.onnx")
    data = _dataset(tmp_path / "grey")
    env = {"PYTHONPATH": os.pathsep.join([str(PLUGIN), os.environ.get("PYTHONPATH", "")])}
    common = ("--sut", "ort-fp32", "--model-path", str(model), "--dataset-path", str(data),
              "--output", str(tmp_path / "out"))
    perf = run_cli("--scenario", "Offline", *common, env=env, timeout=300)
    assert perf.returncode == 0, perf.stdout[-2000:] + perf.stderr[-2000:]
    accuracy = run_cli("--scenario", "Offline", "--mode", "accuracy", *common, env=env,
                       timeout=300)
    assert accuracy.returncode == 0, accuracy.stdout[-2000:] + accuracy.stderr[-2000:]
    assert "toy-brightness" in perf.stdout + perf.stderr
    results = {path.parent.name: json.loads(path.read_text())
               for path in (tmp_path / "out").rglob("results.json")}
    run = results["run_1"]
    assert run["summary"]["validity"] == "VALID"
    assert run["task"]["name"] == "toy-brightness"
    scored = results["accuracy"]
    assert scored["task"]["metric"] == {"key": "mae", "name": "brightness MAE",
                                        "unit": "deciles", "higher_is_better": False}
    # flat images: the model's mean is the exact brightness, within the decile's rounding
    assert 0 <= scored["accuracy"]["mae"] <= 0.5
    # every evaluation image scored (the calibration images quantmark holds out are not)
    val_map = next((tmp_path / "out").rglob("accuracy/val_map.txt")).read_text().splitlines()
    assert scored["accuracy"]["total"] == len(val_map) >= 30
    text = next((tmp_path / "out").rglob("accuracy.txt")).read_text()
    assert text.startswith("mae=")


def test_a_task_is_named_and_checked_against_the_model(tmp_path: Path) -> None:
    model = _brightness_onnx(tmp_path / "brightness.onnx")
    env = {"PYTHONPATH": os.pathsep.join([str(PLUGIN), os.environ.get("PYTHONPATH", "")])}
    wrong = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--model-path", str(model),
                    "--dataset-path", str(_dataset(tmp_path / "grey")), "--task",
                    "detection", "--output", str(tmp_path / "out"), env=env, timeout=300)
    assert wrong.returncode == 2
    assert "toy-brightness model by its outputs" in wrong.stdout + wrong.stderr
    unknown = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--task", "segmentation",
                      "--output", str(tmp_path / "out"), env=env, timeout=300)
    assert unknown.returncode == 2
    assert "unknown task 'segmentation'" in unknown.stdout + unknown.stderr


pytest.importorskip("onnxruntime")
