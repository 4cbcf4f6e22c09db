"""Every framework takes the model's own input geometry: 1 or 3 channels, square or not, float32
or raw uint8 pixels, any class count. Each FP32 SUT predicts what ONNX Runtime's FP32 reference
predicts on the same images (through the spec's recipe, in the SUT's layout); each INT8 SUT
runs them and proves INT8, calibrated on samples of the same recipe."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantmark.sut.interface import SutOptions
from quantmark.sut.registry import get_sut, load_factory
from tests.sut.geometry_models import Case, RecipeCalibration, samples, write_model

pytest.importorskip("openvino")
pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")
pytest.importorskip("nncf")
pytest.importorskip("ai_edge_litert")

CASES = {case.name: case for case in (
    Case("rgb32"), Case("gray32", channels=1), Case("rgb48x32", height=48, width=32),
    Case("raw-uint8", dtype="uint8"))}
FP32 = ("ort-fp32", "ov-fp32", "tflite-fp32", "tf-fp32", "torch-fp32")
INT8 = ("ort-int8", "ov-int8", "tflite-int8", "torch-int8")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """(state_dict, ONNX) of each case, written once for the module."""
    folder = tmp_path_factory.mktemp("geometry-models")
    return {name: write_model(case, folder) for name, case in CASES.items()}


def make(name: str, spec: Any, model_path: str | None, calibration: Any = None,
         batch_size: int = 4) -> Any:
    """The SUT's backend from its registry factory, loaded."""
    options = SutOptions(model=spec.name, scenario="Offline", batch_size=batch_size,
                         model_path=model_path)
    backend = load_factory(get_sut(name))(name, options, spec, calibration
                                          or RecipeCalibration(spec))
    backend.load()
    return backend


def scores_of(name: str, spec: Any, model_path: str | None) -> np.ndarray:
    """Scores of the images through the spec's recipe in the SUT's layout (and type)."""
    backend = make(name, spec, model_path)
    try:
        x = samples(spec, backend.layout)
        assert x.dtype == np.dtype(spec.input_dtype)
        return backend.predict(x)
    finally:
        backend.close()


def _path(name: str, pair: tuple[Path, Path]) -> str:
    return str(pair[0] if name.startswith("torch") else pair[1])  # torch: the state_dict


@pytest.fixture(scope="module")
def references(files: dict[str, tuple[Path, Path]]) -> dict[str, np.ndarray]:
    return {name: scores_of("ort-fp32", case.spec(), str(files[name][1]))
            for name, case in CASES.items()}


def agrees(got: np.ndarray, reference: np.ndarray) -> None:
    """The same classes, and scores within float rounding of the reference's."""
    assert got.shape == reference.shape
    assert (got.argmax(1) == reference.argmax(1)).all()
    scale = float(np.abs(reference).max())
    assert float(np.abs(got - reference).max()) <= 1e-3 * scale


@pytest.mark.parametrize("sut", FP32)
@pytest.mark.parametrize("case", CASES)
def test_fp32_suts_predict_the_reference_classes(case: str, sut: str, files: Any,
                                                 references: dict[str, np.ndarray]) -> None:
    if sut.startswith("torch") and CASES[case].dtype == "uint8":
        pytest.skip("a raw-pixel model is an ONNX file: the torch SUTs refuse it (tested below)")
    reference = references[case]
    assert len(set(reference.argmax(1))) > 1  # the images really get different classes
    agrees(scores_of(sut, CASES[case].spec(), _path(sut, files[case])), reference)


@pytest.mark.parametrize("sut", INT8)
@pytest.mark.parametrize("case", CASES)
def test_int8_suts_calibrate_on_the_recipe_and_prove_int8(case: str, sut: str,
                                                          files: Any) -> None:
    spec = CASES[case].spec()
    if sut.startswith("torch") and spec.input_dtype == "uint8":
        pytest.skip("a raw-pixel model is an ONNX file: the torch SUTs refuse it (tested below)")
    backend = make(sut, spec, _path(sut, files[case]))
    try:
        out = backend.predict(samples(spec, backend.layout))
        assert backend.describe()["executed_precision"].startswith("int8")
    finally:
        backend.close()
    assert out.shape == (6, spec.num_classes) and np.isfinite(out).all()


def test_torch_refuses_a_raw_pixel_model_in_one_line() -> None:
    from quantmark.ground.errors import UserError

    spec = CASES["raw-uint8"].spec()
    for sut in ("torch-fp32", "torch-int8"):
        with pytest.raises(UserError, match="takes uint8 pixels.*ort-"):
            make(sut, spec, None)


def test_an_nhwc_onnx_calibrates_in_its_own_layout(tmp_path: Path) -> None:
    """A user's NHWC ONNX: ORT's and NNCF's INT8 calibration get the samples in NHWC as they
    are (ORT's reader once transposed them a second time)."""
    import torch

    case = CASES["rgb32"]
    model = _nhwc_model(write_model(case, tmp_path)[0], case)
    path = tmp_path / "nhwc.onnx"
    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.onnx.export(model, (torch.zeros(2, 32, 32, 3),), str(path), input_names=["input"],
                      dynamo=True, dynamic_shapes=({0: batch},), verbose=False)
    spec = case.spec()
    reference = scores_of("ort-fp32", spec, str(path))
    agrees(scores_of("ov-fp32", spec, str(path)), reference)
    for sut in ("ort-int8", "ov-int8"):
        backend = make(sut, spec, str(path))
        assert backend.layout == "NHWC"
        assert backend.predict(samples(spec, "NHWC")).shape == reference.shape
        backend.close()


def _nhwc_model(weights: Path, case: Case) -> Any:
    """The case's network behind a transpose: it takes [N, H, W, C]."""
    import torch

    net = case.spec().builder(case.classes)
    net.load_state_dict(torch.load(weights))

    class Nhwc(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x.permute(0, 3, 1, 2))

    return Nhwc().eval()


@pytest.fixture
def dynamic_onnx(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    """The gray32 network exported with a dynamic height and width, and its spec at 40x24.
    Its input is named ``in``, a Python keyword (onnx2tf wrote no SavedModel for it)."""
    import torch

    case = CASES["gray32"]
    net = case.spec().builder(case.classes)
    net.load_state_dict(torch.load(write_model(case, tmp_path)[0]))
    path = tmp_path / "dynamic.onnx"
    dims = {0: torch.export.Dim("batch", min=1, max=1024), 2: torch.export.Dim("h", min=8,
            max=512), 3: torch.export.Dim("w", min=8, max=512)}
    torch.onnx.export(net.eval(), (torch.zeros(2, 1, 32, 32),), str(path), input_names=["in"],
                      dynamo=True, dynamic_shapes=(dims,), verbose=False)
    yield path, replace(case.spec(), name="geom-dynamic", input_size=40, input_width=24,
                        resize_short=40)


@pytest.mark.parametrize("sut", ["ov-fp32", "tflite-fp32", "ov-int8"])
def test_a_dynamic_height_and_width_take_the_spec_s_size(sut: str, dynamic_onnx: Any) -> None:
    """OpenVINO compiles, and onnx2tf converts, a dynamic-size ONNX at the run's size."""
    path, spec = dynamic_onnx
    reference = scores_of("ort-fp32", spec, str(path))
    got = scores_of(sut, spec, str(path))
    if sut.endswith("fp32"):
        agrees(got, reference)
    assert got.shape == reference.shape


@pytest.mark.slow
@pytest.mark.parametrize("sut", FP32 + INT8)
def test_resnet50_at_192_with_37_classes(sut: str) -> None:
    """A built-in architecture at another size and class count, from its torch weights (192,
    not the issue's 384, to keep 9 SUTs inside CI's time: the fine-tuned 384-pixel model runs
    through every framework in tests/quantmark/test_your_model.py)."""
    from quantmark.models.zoo import get_model

    spec = replace(get_model("resnet50"), input_size=192, input_width=192, resize_short=208,
                   num_classes=37)
    calibration = RecipeCalibration(spec, 16)
    backend = make(sut, spec, None, calibration)
    try:
        got = backend.predict(samples(spec, backend.layout))
        executed = backend.describe()["executed_precision"]
    finally:
        backend.close()
    assert got.shape == (6, 37)
    if sut in INT8:
        assert executed.startswith("int8") and np.isfinite(got).all()
    else:
        agrees(got, scores_of("ort-fp32", spec, None))
