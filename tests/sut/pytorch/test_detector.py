"""The CPU torch SUTs on the built-in detector ``digits-detect``, its spec as the detection task
resolves it (the SUT is handed the detector's ONNX file and rebuilds the torch module from the
architecture and the trained weights instead), on two real evaluation canvases.

Measured here (x86 CPU, 2 canvases of 180 anchors, 64 calibration canvases), against
torch-fp32, over the 5 anchors it scores above 0.3 (the boxes NMS keeps) and over all anchors
(background ones included, whose boxes mean nothing): torch-int8 (decode float) 1.03 px max and
0.55 px mean on the confident boxes, 7.0 px max and 0.58 px mean over all, scores within 0.077;
torch-bf16 0.05 px on the confident boxes, 0.58 px max over all, scores within 0.005;
torch-fp32 equals the ONNX file's onnxruntime output to 5e-5 (boxes reach 96 px), torch-compile
to 1e-5. The bounds below leave 2-4x margin. The trained detector is slow to make (1-2 minutes
of one core): every test that needs it is in the slow tier, and the weights are trained once
in the run's shared test cache (``QUANTMARK_TEST_CACHE`` keeps them between runs), not again in
this folder's private one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from quantmark.ground.config import RunConfig  # noqa: E402
from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.models.zoo import ModelSpec  # noqa: E402
from quantmark.qsl.preprocess import decode_and_crop, normalise, recipe_for  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.pytorch.backend import TorchBackend, create  # noqa: E402
from quantmark.tasks.catalog import get_task  # noqa: E402
from quantmark.tasks.detection.digits_detect import canvases, detector  # noqa: E402
from tests.digits_model import ArrayCalibration  # noqa: E402
from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx  # noqa: E402

SUTS = ("torch-fp32", "torch-bf16", "torch-int8", "torch-compile")
CALIBRATION_IMAGES = 64
#: a confident anchor: scored above this by torch-fp32 (its box is a detection NMS keeps)
CONFIDENT = 0.3
#: the bounds asserted (the module docstring says what was measured): px on confident boxes,
#: px mean over every anchor, score
FP32_ATOL = 5e-4
INT8_BOX_PX, INT8_MEAN_PX, INT8_SCORE = 3.0, 1.5, 0.25
BF16_BOX_PX, BF16_MEAN_PX, BF16_SCORE = 0.25, 0.2, 0.02


def _config(model: str = detector.MODEL_NAME, **fields: Any) -> RunConfig:
    return RunConfig(scenario="Offline", sut="torch-fp32", model=model, **fields)


@pytest.fixture(scope="module")
def root(quantmark_cache: Path, _module_cache: Path) -> Path:
    """The canvases, and the detector trained (or found) in the shared test cache, its sealed
    files copied into this module's cache, where the SUTs look."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTMARK_CACHE", str(quantmark_cache))
        onnx = detector.builtin_detector_onnx()
        root = canvases.builtin_detection_root()
    target = _module_cache / "trained-weights"
    target.mkdir(parents=True, exist_ok=True)
    for path in onnx.parent.glob(f"{detector.MODEL_NAME}-{detector.recipe_hash()}*"):
        if not (target / path.name).exists():
            shutil.copy2(path, target / path.name)
    return root


@pytest.fixture(scope="module")
def workload(root: Path) -> tuple[Any, str, np.ndarray, ArrayCalibration]:
    """(the spec, its ONNX file, two letterboxed evaluation canvases NCHW / 255, calibration
    on the first train canvases), as the detection task prepares them."""
    task, config = get_task("detection"), _config()
    spec, path = task.resolve_spec(config), task.model_file(config)
    recipe = recipe_for(spec, "NCHW")

    def load(part: str, count: int) -> np.ndarray:
        files = sorted((root / part).glob("*.png"))[:count]
        return normalise(np.stack([decode_and_crop(f, recipe) for f in files]), recipe)

    calibration = ArrayCalibration(load(canvases.TRAIN, CALIBRATION_IMAGES),
                                   source="built-in train canvases")
    return spec, path, load(canvases.VAL, 2), calibration


def _create(name: str, workload: tuple) -> TorchBackend:
    spec, path, _, calibration = workload
    options = SutOptions(model=spec.name, scenario="Offline", batch_size=2, threads=2,
                         model_path=path)
    return create(name, options, spec, calibration)


@pytest.fixture(scope="module")
def runs(workload: tuple) -> Iterator[dict[str, tuple[np.ndarray, dict[str, Any]]]]:
    """name -> (output on the two canvases, describe()), each SUT built and loaded once."""
    out = {}
    for name in SUTS:
        backend = _create(name, workload)
        backend.load()
        out[name] = (backend.predict(workload[2]), backend.describe())
        backend.close()
    yield out


def _errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float, float]:
    """(box error max over the confident anchors in px, box error mean over all anchors in
    px, score error max) of ``got`` against ``want`` (torch-fp32)."""
    boxes = np.abs(got[:, :4] - want[:, :4])
    confident = want[:, 4:].max(1) > CONFIDENT
    assert confident.sum() >= 2  # the canvases hold digits the detector finds
    return (float(boxes.max(1)[confident].max()), float(boxes.mean()),
            float(np.abs(got[:, 4:] - want[:, 4:]).max()))


@pytest.mark.slow
def test_fp32_is_the_onnx_files_function(runs: dict, workload: tuple) -> None:
    """The torch module the SUT builds computes what the ONNX file it was handed computes,
    and the record says which model ran (the built-in, not the file)."""
    spec, path, images, _ = workload
    output, info = runs["torch-fp32"]
    assert output.dtype == np.float32 and output.shape == (2, 14, 180)
    expected = ort.InferenceSession(path).run(None, {"images": images})[0]
    np.testing.assert_allclose(output, expected, atol=FP32_ATOL)
    assert info["executed_precision"] == "fp32"
    assert info["detector"]["onnx_export"] == path and info["detector"]["onnx_read"] is False
    assert info["detector"]["runs"].startswith(f"the built-in model {spec.name}")
    assert info["weights"] == detector.trained_description(spec)
    assert output[:, 4:].max() > 0.5  # real canvases: the trained detector finds digits


@pytest.mark.slow
def test_int8_runs_int8_with_the_decode_float(runs: dict) -> None:
    """Quantized convolutions ran (the converted script's op kinds), the decode module stayed
    float (proven on the converted graph) and costs little accuracy."""
    output, info = runs["torch-int8"]
    assert info["executed_precision"] == "int8"
    assert info["evidence"] == {"quantized_compute_ops": 13, "float_compute_ops": 0}
    head = info["float_head"]
    assert head["modules"] == ["decode"] and head["dequantized_inputs"] == 4
    assert head["float_ops"]["sigmoid"] == 2
    assert sorted(head["prediction_layers"]) == ["boxes_0", "boxes_1", "scores_0", "scores_1"]
    recorded = head["int8_vs_fp32"]  # on calibration samples
    assert recorded["box_mean_abs_px"] < INT8_MEAN_PX and recorded["score_max_abs"] < INT8_SCORE
    assert recorded["confident_anchors"] > 8 and recorded["confident_box_max_abs_px"] < INT8_BOX_PX
    box, mean, score = _errors(output, runs["torch-fp32"][0])
    assert box < INT8_BOX_PX and mean < INT8_MEAN_PX and score < INT8_SCORE, (box, mean, score)


@pytest.mark.slow
def test_bf16_and_compile(runs: dict) -> None:
    """bf16 ran every convolution in bfloat16 with bounded box error; compile is FP32."""
    output, info = runs["torch-bf16"]
    assert info["executed_precision"] == "bf16" and info["evidence"]["fp32_layers"] == 0
    box, mean, score = _errors(output, runs["torch-fp32"][0])
    assert box < BF16_BOX_PX and mean < BF16_MEAN_PX and score < BF16_SCORE, (box, mean, score)
    compiled, info = runs["torch-compile"]
    assert info["executed_precision"] == "fp32" and info["compile"]["graph_breaks"] == 0
    np.testing.assert_allclose(compiled, runs["torch-fp32"][0], atol=1e-3)


@pytest.mark.slow
def test_fp32_at_128_px(root: Path) -> None:
    """``--input-size 128``: the torch module built at 128 px computes the 128 px export."""
    task, config = get_task("detection"), _config(input_size="128")
    spec, path = task.resolve_spec(config), task.model_file(config)
    images = np.random.default_rng(3).random((2, 3, 128, 128), dtype=np.float32)
    backend = create("torch-fp32", SutOptions(model=spec.name, scenario="Offline",
                                              model_path=path), spec, None)
    backend.load()
    output = backend.predict(images)
    assert output.shape == (2, 14, 16 ** 2 + 8 ** 2)
    expected = ort.InferenceSession(path).run(None, {"images": images})[0]
    np.testing.assert_allclose(output, expected, atol=FP32_ATOL)


@pytest.mark.slow
def test_int8dyn_refuses_a_convolution_only_detector(workload: tuple) -> None:
    with pytest.raises(UserError, match="convolution-only detector") as caught:
        _create("torch-int8dyn", workload)
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_another_onnx_file_for_the_builtin_is_refused(workload: tuple, tmp_path: Path) -> None:
    """The built-in's spec with a file that is not its own export: one line."""
    spec, _, _, calibration = workload
    other = tiny_yolo_onnx(tmp_path / "other.onnx")
    options = SutOptions(model=spec.name, scenario="Offline", model_path=str(other))
    with pytest.raises(UserError, match="is not digits-detect's own ONNX export") as caught:
        create("torch-fp32", options, spec, calibration)
    assert "\n" not in str(caught.value)


def test_a_users_detector_onnx_is_refused(tmp_path: Path) -> None:
    """A detector that is only an ONNX file has no torch architecture: one line, before any
    weights are built (quick: nothing trains)."""
    path = tiny_yolo_onnx(tmp_path / "yolo.onnx")
    config = _config(model="yolo", model_path=str(path))
    spec = get_task("detection").resolve_spec(config)
    options = SutOptions(model="yolo", scenario="Offline", model_path=str(path))
    for name in ("torch-fp32", "torch-int8"):
        with pytest.raises(UserError, match="no torch architecture") as caught:
            create(name, options, spec, None)
        assert "\n" not in str(caught.value) and "ort-*" in str(caught.value)


# ----------------------------------------------------------------------------- quick: untrained
def _untrained_spec() -> ModelSpec:
    return ModelSpec(name="det", mean=(0.0,) * 3, std=(255.0,) * 3,
                     builder=detector.sized_builder(96), input_size=96, num_classes=10,
                     resize_rule="letterbox", task="detection", head="raw")


def test_the_decode_is_found_and_stays_float() -> None:
    """On the untrained architecture: the head found by structure is the ``decode`` module,
    and after convert_fx it computes on the four dequantized prediction maps."""
    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from quantmark.sut.pytorch import detection as td
    from quantmark.sut.pytorch.quantize import quiet, use_x86_engine

    use_x86_engine()
    torch.manual_seed(0)
    model, spec = detector.build_module().eval(), _untrained_spec()
    x = torch.rand(4, 3, 96, 96)
    mapping, head = td.int8_mapping(spec, model, get_default_qconfig_mapping("x86"))
    with quiet(), torch.no_grad():
        prepared = prepare_fx(model, mapping, example_inputs=(x,))
        prepared(x)
        quantized = convert_fx(prepared)
    facts = td.int8_facts(spec, head, model, quantized, x.numpy())["float_head"]
    assert facts["modules"] == ["decode"] and facts["dequantized_inputs"] == 4
    assert {"sigmoid", "cat", "mul", "sub", "add"} <= set(facts["float_ops"])
    assert facts["int8_vs_fp32"]["samples"] == 4
    with pytest.raises(UserError, match="convolution-only detector") as caught:
        td.check_dynamic("torch-int8dyn", spec, model)
    assert "\n" not in str(caught.value)


def test_a_decode_in_the_top_forward_is_refused() -> None:
    """torch FX keeps only whole modules float: a decode inline in the model's own forward
    cannot be named, so it is refused in one line instead of quantized."""
    import torch
    from torch import nn

    from quantmark.sut.pytorch import detection as td

    class Inline(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 14, 8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x).flatten(2)
            return torch.cat((y[:, :4].sigmoid() * 96, y[:, 4:].sigmoid()), 1)

    with pytest.raises(UserError, match="not in a submodule") as caught:
        td.head_modules(_untrained_spec(), Inline())
    assert "\n" not in str(caught.value)
