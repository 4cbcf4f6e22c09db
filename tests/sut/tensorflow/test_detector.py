"""TensorFlow SUTs on a detector: the tiny YOLO fixture (raw head and nms head) through onnx2tf,
with the ONNX rewrites and the conversion check of ``models.saved_model``.

Measured here (seeded batch of 2, 64 px, random weights): tf-fp32 and tf-xla match onnxruntime
to 5e-5 (boxes reach 64 px); tf-amp's bf16 convolutions move raw boxes by up to 0.4 px and
scores by 3e-4 (asserted: 2 px, 0.01). tf-xla cannot compile the nms head (onnx2tf's
GatherElements transposes by a computed permutation) and says so in one line. tf-amp runs in a
subprocess: grappler's options are process-global (``sut.tensorflow.backend``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.models.zoo import ModelSpec  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.tensorflow import backend as tf_sut  # noqa: E402
from tests.conftest import run_json  # noqa: E402
from tests.tasks.detection.tiny_cases import (  # noqa: E402
    CLASSES,
    SIZE,
    detector_files,
    detector_spec,
    onnxruntime_output,
    seeded_images,
)
from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx  # noqa: E402

ATOL = 1e-4


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return detector_files(tmp_path_factory.mktemp("tiny-yolo"))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return seeded_images(2)


@pytest.fixture(scope="module")
def expected(files: dict[str, Path], images: np.ndarray) -> dict[str, np.ndarray]:
    return {head: onnxruntime_output(path, images) for head, path in files.items()}


def _backend(name: str, head: str, path: Path) -> tf_sut.TensorFlowBackend:
    options = SutOptions(model="tiny-yolo", scenario="Offline", model_path=str(path))
    backend = tf_sut.create(name, options, detector_spec(head), None)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def backends(files: dict[str, Path]) -> dict[tuple[str, str], tf_sut.TensorFlowBackend]:
    """tf-fp32 on both heads and tf-xla on the raw one (one onnx2tf conversion per head)."""
    return {("tf-fp32", "raw"): _backend("tf-fp32", "raw", files["raw"]),
            ("tf-fp32", "nms"): _backend("tf-fp32", "nms", files["nms"]),
            ("tf-xla", "raw"): _backend("tf-xla", "raw", files["raw"])}


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("key", [("tf-fp32", "raw"), ("tf-fp32", "nms"), ("tf-xla", "raw")])
def test_fp32_and_xla_match_onnxruntime(backends, expected, images, key) -> None:
    backend = backends[key]
    got = backend.predict(_nhwc(images))
    assert got.shape == expected[key[1]].shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected[key[1]], rtol=0, atol=ATOL)
    assert backend.layout == "NHWC" and backend.label_offset == 0
    np.testing.assert_allclose(backend.predict(_nhwc(images[:1])), expected[key[1]][:1],
                               rtol=0, atol=ATOL)  # one traced graph serves every batch


def test_executed_precision_evidence(backends) -> None:
    fp32 = backends["tf-fp32", "raw"].describe()
    assert fp32["executed_precision"] == "fp32"
    assert set(fp32["evidence"]["compute"]) == {"float32"}
    assert fp32["evidence"]["output"] == {"task": "detection", "head": "raw",
                                          "shape": [1, 4 + CLASSES, 80],
                                          "transposed_back": False}
    xla = backends["tf-xla", "raw"].describe()
    assert xla["executed_precision"] == "fp32"
    assert set(xla["evidence"]["xla_hlo"]["compute"]) == {"f32"}
    assert xla["evidence"]["tf_graph_executor_compute_nodes"] == 0


def test_saved_model_records_the_rewrites_and_the_check(backends) -> None:
    for head in ("raw", "nms"):
        meta = backends["tf-fp32", head].artifact.meta
        assert meta["task"] == "detection" and meta["head"] == head
        detector = meta["detector"]
        assert detector["shape_tensors_folded"] >= 8 and detector["constants_aligned"] >= 1
        assert detector["check"]["max_error"] < 1e-3
        assert detector["check"]["output_transposed"] is False


def test_xla_refuses_the_nms_head_in_one_line(files) -> None:
    with pytest.raises(SutError, match="tf-xla: the detector's first inference failed") as caught:
        _backend("tf-xla", "nms", files["nms"])
    assert "\n" not in str(caught.value) and "run it as tf-fp32" in str(caught.value)


def test_amp_runs_bf16_and_its_box_error(files, backends, images) -> None:
    result = run_json(f"""
        import json
        import numpy as np
        from quantmark.sut.interface import SutOptions
        from quantmark.sut.tensorflow.backend import create
        from tests.sut.tensorflow.test_detector import detector_spec
        x = np.random.default_rng(2).random((2, 3, {SIZE}, {SIZE}), dtype=np.float32)
        options = SutOptions(model="tiny-yolo", scenario="Offline", threads=1,
                             model_path={str(files["raw"])!r})
        backend = create("tf-amp", options, detector_spec("raw"), None)
        backend.load()
        out = backend.predict(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
        print(json.dumps({{"out": out.tolist(), "describe": backend.describe()}}))
    """, timeout=300)
    info = result["describe"]
    assert info["executed_precision"] == "bf16+fp32"
    assert sum(info["evidence"]["compute"]["bfloat16"].values()) > 0
    amp = np.asarray(result["out"], np.float32)
    fp32 = backends["tf-fp32", "raw"].predict(_nhwc(images))
    assert amp.shape == fp32.shape
    assert np.abs(amp[:, :4] - fp32[:, :4]).max() < 2.0  # bf16: 8-bit mantissa, 64 px boxes
    assert np.abs(amp[:, 4:] - fp32[:, 4:]).max() < 0.01


def test_keys_and_output_layouts() -> None:
    from quantmark.models.artifacts import Artifact
    from quantmark.models.saved_model import detector_layout, saved_model_key

    onnx = Artifact(path=Path("m.onnx"), format="onnx", precision="fp32", key="k", weights="w",
                    source_hash="s", meta={"user_file": "m.onnx", "sha256": "s"})
    raw, nms = detector_spec("raw"), detector_spec("nms")
    classifier = ModelSpec(name="tiny-yolo", mean=raw.mean, std=raw.std, builder=raw.builder,
                           input_size=SIZE, resize_short=SIZE, num_classes=CLASSES)
    keys = {saved_model_key(onnx, spec) for spec in (raw, nms, classifier)}
    assert len(keys) == 3
    assert saved_model_key(onnx, classifier) == saved_model_key(onnx, classifier)
    cases = {(None, 7, 80): False, (None, 80, 7): True, (None, 7, 7): False,
             (None, 9, 80): None, (None, 80): None}
    for dims, wanted in cases.items():
        assert detector_layout(list(dims), raw) is wanted, dims
    assert detector_layout([None, 20, 6], nms) is False
    assert detector_layout([None, 6, 20], nms) is True


def test_rewrites_compute_what_the_file_computes(files) -> None:
    """The folded and aligned graph gives onnxruntime's outputs bit for bit, at any batch."""
    import onnx
    import onnxruntime as ort

    from quantmark.models.onnx_rewrites import align_constant_ranks, fold_shape_arithmetic

    for head, path in files.items():
        model = onnx.load(str(path))
        assert fold_shape_arithmetic(model, detector_spec(head)) >= 8
        assert align_constant_ranks(model) >= 1
        onnx.checker.check_model(model)
        assert not {n.op_type for n in model.graph.node} & {"Shape", "Gather"}
        x = np.random.default_rng(0).random((3, 3, SIZE, SIZE), dtype=np.float32)
        before = ort.InferenceSession(str(path)).run(None, {"images": x})[0]
        after = ort.InferenceSession(model.SerializeToString()).run(None, {"images": x})[0]
        np.testing.assert_array_equal(before, after)


def test_a_wrong_conversion_is_refused_in_one_line(backends, files, monkeypatch) -> None:
    from quantmark.models.saved_model import check_detector
    from quantmark.models.source import fp32_onnx

    raw_saved = Path(backends["tf-fp32", "raw"].artifact.path).parent
    nms_source = fp32_onnx(detector_spec("nms"), files["nms"])
    with pytest.raises(UserError, match="does not compute the ONNX model") as caught:
        check_detector(raw_saved, nms_source, detector_spec("nms"))
    assert "\n" not in str(caught.value)
    import onnx2tf

    def broken(**_: Any) -> None:
        raise ValueError("axes don't match array\nmore lines")

    monkeypatch.setattr(onnx2tf, "convert", broken)
    other = tiny_yolo_onnx(files["raw"].parent / "other.onnx", num_classes=2)
    options = SutOptions(model="tiny-yolo", scenario="Offline", model_path=str(other))
    with pytest.raises(UserError, match="onnx2tf cannot convert other.onnx") as caught:
        tf_sut.create("tf-fp32", options, detector_spec("raw", classes=2), None)
    assert "\n" not in str(caught.value)


def test_layer_profile_runs_on_the_detector(backends, images) -> None:
    from quantmark.sut.tensorflow.profile import profile

    result = profile(backends["tf-fp32", "raw"], _nhwc(images), 2, 1)
    assert any(layer.precision == "fp32" and "Conv" in layer.op_type for layer in result.layers)


def test_a_static_batch_detector_is_refused_before_onnx2tf(files, tmp_path) -> None:
    """onnx2tf fetches sample images for a small static batch (never offline): one line."""
    import onnx

    model = onnx.load(str(files["raw"]))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, str(tmp_path / "static.onnx"))
    options = SutOptions(model="tiny-yolo", scenario="Offline",
                         model_path=str(tmp_path / "static.onnx"))
    with pytest.raises(UserError, match="static batch of 1.*dynamic=True") as caught:
        tf_sut.create("tf-fp32", options, detector_spec("raw"), None)
    assert "\n" not in str(caught.value)
