"""Model files given natively (OpenVINO IR, .tflite, SavedModel) run with their own geometry
where it is the spec's, and are refused in one line naming both where it is not: other
channels or size, a 5-channel input, an output that is not [N, classes], another input type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from tests.sut.geometry_models import Case, samples, tiny_net, write_model

ov = pytest.importorskip("openvino")
pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")
pytest.importorskip("onnx2tf")

RGB = Case("rgb32")
GRAY = Case("gray32", channels=1)
RAW = Case("raw-uint8", dtype="uint8")


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("native-models")
    return {case.name: write_model(case, folder)[1] for case in (RGB, GRAY, RAW)}


def _ir(onnx_path: Path, folder: Path) -> Path:
    xml = folder / f"{onnx_path.stem}.xml"
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml), compress_to_fp16=False)
    return xml


def _export(model: Any, shape: tuple[int, ...], path: Path) -> Path:
    import torch

    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(model.eval(), (torch.zeros(*shape),), str(path), dynamo=True,
                      dynamic_shapes=({0: batch},), verbose=False)
    return path


def test_a_user_ir_runs_with_its_own_geometry(onnx_files: dict[str, Path],
                                              tmp_path: Path) -> None:
    from quantmark.sut.openvino.backend import OpenVinoBackend
    from quantmark.sut.openvino.convert import load_user_ir

    artifact = load_user_ir(_ir(onnx_files["gray32"], tmp_path), GRAY.spec())
    assert artifact.meta["layout"] == "NCHW" and artifact.meta["channels"] == 1
    backend = OpenVinoBackend(str(artifact.path), "fp32", "Offline", 0, artifact)
    backend.load()
    assert backend.predict(samples(GRAY.spec(), "NCHW")).shape == (6, 10)
    raw = load_user_ir(_ir(onnx_files["raw-uint8"], tmp_path), RAW.spec())
    backend = OpenVinoBackend(str(raw.path), "fp32", "Offline", 0, raw)
    backend.load()
    x = samples(RAW.spec(), "NCHW")
    assert x.dtype == np.uint8 and backend.predict(x).shape == (6, 10)


def test_a_user_ir_of_other_geometry_is_one_line(onnx_files: dict[str, Path],
                                                 tmp_path: Path) -> None:
    from quantmark.sut.openvino.convert import load_user_ir

    gray, raw = _ir(onnx_files["gray32"], tmp_path), _ir(onnx_files["raw-uint8"], tmp_path)
    with pytest.raises(UserError, match=r"takes 1x32x32 .* feeds float32 3x32x32"):
        load_user_ir(gray, RGB.spec())
    with pytest.raises(UserError, match=r"takes raw uint8 pixels, but model geom-rgb32 feeds"):
        load_user_ir(raw, RGB.spec())
    five = _ir(_export(tiny_net(5, 10, False), (2, 5, 32, 32), tmp_path / "five.onnx"), tmp_path)
    with pytest.raises(UserError, match=r"has 5 channels; quantmark feeds images with 1"):
        load_user_ir(five, RGB.spec())


def test_an_output_that_is_not_n_by_classes_is_one_line(tmp_path: Path) -> None:
    """A network ending in a feature map [N, 10, 16, 16] is not a classifier's output."""
    from torch import nn

    from quantmark.sut.openvino.convert import load_user_ir

    conv = nn.Sequential(nn.Conv2d(3, 10, 3, padding=1), nn.MaxPool2d(2))
    xml = _ir(_export(conv, (2, 3, 32, 32), tmp_path / "map.onnx"), tmp_path)
    with pytest.raises(UserError, match=r"no float output \[N,10\] or \[N,11\] \(found"):
        load_user_ir(xml, RGB.spec())


@pytest.fixture(scope="module")
def gray_tflite(onnx_files: dict[str, Path]) -> Path:
    from quantmark.sut.tflite.convert import prepare_tflite

    return prepare_tflite("tflite-fp32", GRAY.spec(), str(onnx_files["gray32"]), None).path


def test_a_user_tflite_runs_with_its_own_geometry(gray_tflite: Path) -> None:
    from quantmark.sut.tflite.backend import TFLiteBackend
    from quantmark.sut.tflite.convert import load_user_tflite

    artifact = load_user_tflite(gray_tflite, GRAY.spec())
    assert artifact.meta["layout"] == "NHWC"
    backend = TFLiteBackend(artifact, "fp32", threads=1)
    backend.load()
    assert backend.predict(samples(GRAY.spec(), "NHWC")).shape == (6, 10)


def test_a_user_tflite_of_other_geometry_is_one_line(gray_tflite: Path) -> None:
    from quantmark.sut.tflite.convert import load_user_tflite

    with pytest.raises(UserError, match=r"takes 1x32x32 \(CxHxW, NHWC .* feeds float32 "
                                        r"3x32x32"):
        load_user_tflite(gray_tflite, RGB.spec())


def test_a_raw_pixel_tflite_int8_takes_the_pixels(onnx_files: dict[str, Path]) -> None:
    """Full-integer TFLite from a uint8 model keeps its uint8 input unquantized: the QSL's
    pixels go in as they are, never divided by a zero scale."""
    from quantmark.sut.tflite.backend import TFLiteBackend
    from quantmark.sut.tflite.convert import prepare_tflite
    from tests.sut.geometry_models import RecipeCalibration

    spec = RAW.spec()
    artifact = prepare_tflite("tflite-int8", spec, str(onnx_files["raw-uint8"]),
                              RecipeCalibration(spec))
    backend = TFLiteBackend(artifact, "int8", threads=1)
    backend.load()
    x = samples(spec, "NHWC")
    assert backend.describe()["input"]["dtype"] == "uint8"
    np.testing.assert_array_equal(backend.encode_samples(x), x)
    assert "pixels as the QSL gives them" in backend.speed_settings("Offline", 4)["input"]
    assert np.isfinite(backend.predict(x)).all()


def test_a_user_saved_model_of_other_geometry_is_one_line(onnx_files: dict[str, Path]) -> None:
    from quantmark.models.saved_model import export_saved_model, load_user_saved_model

    gray = export_saved_model(GRAY.spec(), str(onnx_files["gray32"])).path.parent
    assert load_user_saved_model(gray, GRAY.spec()).meta["layout"] == "NHWC"
    with pytest.raises(UserError, match=r"takes 1x32x32 \(CxHxW, NHWC .* feeds float32 "
                                        r"3x32x32"):
        load_user_saved_model(gray, RGB.spec())
    raw = export_saved_model(RAW.spec(), str(onnx_files["raw-uint8"])).path.parent
    assert load_user_saved_model(raw, RAW.spec()).meta["input_dtype"] == "uint8"
    with pytest.raises(UserError, match=r"takes raw uint8 pixels, but model geom-rgb32"):
        load_user_saved_model(raw, RGB.spec())
