"""OpenVINO SUTs on a text encoder (the tiny random BERT): token inputs by name at fixed and
dynamic padding, numerics against ONNX Runtime's FP32 run of the same ONNX, the executed
precision each proves, and the cached NNCF transformer INT8 IR."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")
ort = pytest.importorskip("onnxruntime")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.models.text_graph import TOKEN_INPUTS, token_feeds  # noqa: E402
from quantmark.models.zoo import ModelSpec  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from tests.sut.text_encoders import TokenCalibration  # noqa: E402
from tests.sut.text_encoders import tokens as token_samples  # noqa: E402
from tests.tasks.text.tiny_encoder import HIDDEN, tiny_encoder_folder  # noqa: E402

SUTS = ("ov-fp32", "ov-bf16", "ov-fp16", "ov-int8")
PADDINGS = ("fixed", "dynamic")
SEQ_LEN = 16
#: the three test sentences' lengths (unequal: one full, two padded)
LENGTHS = (5, SEQ_LEN, 9)
#: bf16 keeps 8 bits of mantissa, INT8 256 levels: each row's embedding must point the same
#: way as FP32's (cosine), measured >= 0.999 on the tiny encoder; 0.95 leaves room for CPUs
MIN_COSINE = 0.95
SPEC = ModelSpec(name="tiny", mean=(0.0,), std=(1.0,), builder=lambda n: None, input_size=16,
                 num_classes=HIDDEN, channels=3, input_dtype="int64", task="text",
                 head="embedding", seq_len=SEQ_LEN, padding="fixed")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder's model.onnx, built once for the module."""
    return tiny_encoder_folder(tmp_path_factory.mktemp("tiny-encoder") / "tiny")


@pytest.fixture(scope="module")
def calibration() -> TokenCalibration:
    return TokenCalibration()


@pytest.fixture(scope="module")
def tokens() -> np.ndarray:
    return token_samples(LENGTHS, seed=0)


@pytest.fixture(scope="module")
def reference(encoder: Path, tokens: np.ndarray) -> np.ndarray:
    """ONNX Runtime's FP32 output of the same ONNX, at the full padded length."""
    session = ort.InferenceSession(str(encoder), providers=["CPUExecutionProvider"])
    return session.run(None, token_feeds(tokens, TOKEN_INPUTS, dynamic=False))[0]


def _create(name: str, encoder: Path, calibration: Any, padding: str = "fixed",
            scenario: str = "Offline", **extra: str) -> Any:
    from quantmark.sut.openvino.backend import create

    options = SutOptions(model=SPEC.name, scenario=scenario, model_path=str(encoder),
                         extra=extra)
    return create(name, options, replace(SPEC, padding=padding), calibration)


@pytest.fixture(scope="module")
def backends(encoder: Path, calibration: TokenCalibration,
             private_cache: Path) -> Iterator[dict[tuple[str, str], Any]]:
    """Every OpenVINO SUT at both paddings, loaded once for the module (in the SUT tests'
    private cache)."""
    loaded = {}
    try:
        for padding in PADDINGS:
            for name in SUTS:
                backend = _create(name, encoder, calibration, padding)
                backend.load()
                loaded[name, padding] = backend
        yield loaded
    finally:
        for backend in loaded.values():
            backend.close()


@pytest.fixture(scope="module")
def outputs(backends: dict[tuple[str, str], Any], tokens: np.ndarray
            ) -> dict[tuple[str, str], np.ndarray]:
    return {key: backend.predict(tokens) for key, backend in backends.items()}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("padding", PADDINGS)
def test_fp32_matches_onnxruntime(padding: str, outputs: dict, reference: np.ndarray) -> None:
    ours = outputs["ov-fp32", padding]
    assert ours.shape == reference.shape == (len(LENGTHS), HIDDEN)
    assert ours.dtype == np.float32
    assert float(np.abs(ours - reference).max()) <= 1e-4


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("name", ["ov-bf16", "ov-fp16", "ov-int8"])
def test_reduced_precision_points_as_fp32(name: str, padding: str, outputs: dict,
                                          reference: np.ndarray) -> None:
    ours = outputs[name, padding]
    assert ours.shape == reference.shape
    assert (_cosines(ours, reference) > MIN_COSINE).all(), _cosines(ours, reference)


@pytest.mark.parametrize("name", SUTS)
def test_dynamic_padding_gives_fixed_s_answers(name: str, outputs: dict) -> None:
    """The model masks padding: cutting a batch to its longest sentence changes nothing but
    the rounding of the reduced precisions."""
    fixed, dynamic = outputs[name, "fixed"], outputs[name, "dynamic"]
    if name == "ov-fp32":
        assert float(np.abs(fixed - dynamic).max()) <= 1e-5
    else:
        assert (_cosines(fixed, dynamic) > 0.99).all()


def test_compiled_shapes_follow_the_padding(backends: dict) -> None:
    for name in SUTS:
        fixed = backends[name, "fixed"].describe()["text"]
        dynamic = backends[name, "dynamic"].describe()["text"]
        assert set(fixed["inputs"]) == set(TOKEN_INPUTS)
        assert all(shape == f"[?,{SEQ_LEN}]" for shape in fixed["inputs"].values())
        assert all(shape == "[?,?]" for shape in dynamic["inputs"].values())
        assert (fixed["padding"], dynamic["padding"]) == ("fixed", "dynamic")


@pytest.mark.parametrize("padding", PADDINGS)
def test_each_sut_proves_what_ran(padding: str, backends: dict) -> None:
    described = {name: backends[name, padding].describe() for name in SUTS}
    fp32 = described["ov-fp32"]
    assert fp32["executed_precision"] == "fp32"
    assert fp32["compute_layers_by_precision"]["fp32"].get("FullyConnected", 0) > 0
    assert described["ov-bf16"]["executed_precision"] == "bf16"
    fp16 = described["ov-fp16"]
    if "FP16" in fp16["cpu_capabilities"]:
        assert fp16["executed_precision"] == "fp16"
    else:  # the plugin ran the f16 hint as bf16, measured and said
        assert fp16["executed_precision"] == "bf16"
        assert "ran the f16 inference-precision hint as bf16" in fp16["precision_note"]
    int8 = described["ov-int8"]
    assert int8["executed_precision"].startswith("int8")
    assert int8["compute_layers_by_precision"]["int8"].get("FullyConnected", 0) > 0
    names = int8["text"]["compute_layer_names"]["int8"]
    assert names and all(isinstance(n, str) and n for n in names)
    assert int8["compiled"]["inference_precision_hint"] == "f32"


def test_int8_ir_is_cached_under_a_text_key(encoder: Path, calibration: TokenCalibration,
                                            backends: dict) -> None:
    """The module's fixed and dynamic ov-int8 share one IR; creating it again is a hit, and
    its key is not the image recipe's for the same file."""
    from quantmark.sut.openvino.convert import quantize_key
    from quantmark.sut.openvino.text import text_fp32

    first = backends["ov-int8", "fixed"].artifact
    assert backends["ov-int8", "dynamic"].artifact.key == first.key
    again = _create("ov-int8", encoder, calibration)
    assert again.artifact.meta["cached"] is True
    assert (again.artifact.key, again.artifact.path) == (first.key, first.path)
    assert again.artifact.meta["quant_recipe"]["model_type"] == "TRANSFORMER"
    assert again.artifact.meta["task"] == "text" and again.artifact.meta["fake_quantize_ops"]
    assert calibration.asked and set(calibration.asked) == {"tokens"}
    assert first.key != quantize_key(text_fp32(SPEC, str(encoder)), calibration.hash())


def test_single_stream_and_async_give_predict_s_answers(encoder: Path,
                                                        calibration: TokenCalibration,
                                                        tokens: np.ndarray,
                                                        outputs: dict) -> None:
    """SingleStream's static batch 1 (per sample) and ``ov_api=async``'s queue feed the same
    token inputs as the threaded path."""
    single = _create("ov-fp32", encoder, calibration, "dynamic", scenario="SingleStream")
    single.load()
    try:
        assert single.static_batch == 1
        assert single.describe()["text"]["inputs"]["input_ids"] == "[1,?]"
        np.testing.assert_allclose(single.predict(tokens), outputs["ov-fp32", "fixed"],
                                   rtol=0, atol=1e-5)
    finally:
        single.close()
    queued = _create("ov-int8", encoder, calibration, "dynamic", ov_api="async")
    queued.load()
    got: list[np.ndarray] = []
    lock = threading.Lock()

    def done(result: Any, error: Any) -> None:
        assert error is None
        with lock:
            got.append(np.array(result, copy=True))

    queued.submit(len(tokens), lambda buffer: tokens.copy(), done)
    settings = queued.speed_settings("Offline", 3)
    queued.close()  # waits for the request in flight
    np.testing.assert_allclose(got[0], outputs["ov-int8", "dynamic"], rtol=0, atol=1e-5)
    assert "copied into the idle request" in settings["input"]
    command = shlex.split(settings["vendor_command"])
    assert command[command.index("-shape") + 1].startswith("input_ids[?,?],")
    assert command[command.index("-data_shape") + 1].startswith(f"input_ids[3,{SEQ_LEN}],")
    assert "-b" not in command and "-ip" not in command


def test_int8_refuses_an_encoder_with_no_int8_layer(encoder: Path) -> None:
    """ov-int8 handed the FP32 encoder: nothing runs INT8, one line at load."""
    from quantmark.sut.openvino.backend import OpenVinoBackend
    from quantmark.sut.openvino.text import TextInputs, text_fp32

    fp32 = text_fp32(SPEC, str(encoder))
    text = TextInputs(TOKEN_INPUTS, "sentence_embedding", SEQ_LEN, False)
    backend = OpenVinoBackend(str(encoder), "int8", "Offline", 0, fp32, text=text)
    with pytest.raises(SutError, match="ov-int8: no compute layer runs i8/u8") as caught:
        backend.load()
    assert "\n" not in str(caught.value)
    backend.close()


def test_combinations_that_cannot_work_are_one_line(encoder: Path,
                                                    calibration: TokenCalibration,
                                                    tmp_path: Path) -> None:
    from quantmark.sut.openvino.backend import create

    cases = [
        (str(tmp_path / "model.xml"), SPEC, "pass its .onnx file"),
        (str(tmp_path / "model.pt"), SPEC, "pass its .onnx file"),
        (None, SPEC, "pass --model-path model.onnx"),
        (str(encoder), replace(SPEC, padding="ragged"), "choose padding fixed or dynamic"),
        (str(tmp_path / "missing.onnx"), SPEC, "not found"),
    ]
    for path, spec, fix in cases:
        options = SutOptions(model=SPEC.name, scenario="Offline", model_path=path)
        with pytest.raises(UserError, match=fix) as caught:
            create("ov-fp32", options, spec, calibration)
        assert "\n" not in str(caught.value)


def test_profile_feeds_the_token_inputs(backends: dict, tokens: np.ndarray) -> None:
    """The layer profiler recompiles the SUT's model and feeds it as predict does."""
    from quantmark.sut.openvino.profile import profile

    found = profile(backends["ov-int8", "dynamic"], tokens, iterations=2, warmup=1)
    assert found.layers and found.batch_size == len(tokens)
    assert any(layer.precision == "int8" for layer in found.layers)
