"""TFLite SUTs on a text encoder (the tiny random BERT): the text SavedModel onnx2tf makes at
fixed token shapes and its check against ONNX Runtime, the four TFLite recipes against ONNX
Runtime's FP32 answers, what each file proves it holds (int8 weights into float ops for
int8dyn, integer weight matmuls for int8), the refusals, and a CLI run that ends VALID."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")
pytest.importorskip("ai_edge_litert")
pytest.importorskip("transformers")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.models import text_saved_model as tsm  # noqa: E402
from quantmark.models.saved_model import export_saved_model  # noqa: E402
from quantmark.models.text_graph import text_artifact  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.tflite.backend import create  # noqa: E402
from quantmark.sut.tflite.inspection import inspect_file  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from tests.sut.text_encoders import (  # noqa: E402
    SEQ_LEN,
    SPEC,
    TokenCalibration,
    cosines,
    reference,
    spec,
    tokens,
)
from tests.tasks.text.tiny_encoder import LAYERS, tiny_encoder_folder  # noqa: E402

SUTS = ("tflite-fp32", "tflite-fp16", "tflite-int8dyn", "tflite-int8")
#: query, key, value, attention output, intermediate, output: the weight matmuls per layer
WEIGHT_MATMULS = 6 * LAYERS
#: Q.K^T and .V: the attention's activation x activation matmuls per layer
ATTENTION_MATMULS = 2 * LAYERS


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_encoder_folder(tmp_path_factory.mktemp("tiny-text") / "tiny-text")


@pytest.fixture(scope="module")
def backends(encoder: Path) -> dict[str, Any]:
    """Every TFLite SUT on the tiny encoder, loaded (one SavedModel, four conversions)."""
    options = SutOptions(model=SPEC.name, scenario="Offline", threads=1,
                         model_path=str(encoder))
    loaded = {name: create(name, options, SPEC, TokenCalibration()) for name in SUTS}
    for backend in loaded.values():
        backend.load()
    return loaded


@pytest.fixture(scope="module")
def outputs(backends: dict[str, Any], encoder: Path) -> dict[str, np.ndarray]:
    samples = tokens()
    return {"onnxruntime": reference(encoder, samples),
            **{name: backend.predict(samples) for name, backend in backends.items()}}


def test_the_saved_model_is_checked_against_onnxruntime(backends: dict[str, Any],
                                                        encoder: Path) -> None:
    saved = export_saved_model(SPEC, str(encoder))  # the cached one the SUTs converted
    meta = saved.meta
    assert meta["check"]["min_cosine"] >= tsm.MIN_COSINE
    assert meta["check"]["max_error"] <= tsm.MAX_ERROR
    assert meta["check"]["lengths"] == [SEQ_LEN, SEQ_LEN // 2, 3, SEQ_LEN - 1]
    assert meta["static_batch"] == 1 and meta["seq_len"] == SEQ_LEN
    assert meta["gelu_rewritten"] == LAYERS  # each layer's exact GELU, in TFLite's form
    assert meta["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]


@pytest.mark.parametrize(("name", "min_cosine", "atol"), [
    ("tflite-fp32", 0.99999, 1e-5), ("tflite-fp16", 0.9999, 2e-3),
    ("tflite-int8dyn", 0.999, 2e-2), ("tflite-int8", 0.99, 5e-2)])
def test_each_precision_answers_as_onnxruntime_fp32(name: str, min_cosine: float, atol: float,
                                                    outputs: dict[str, np.ndarray]) -> None:
    """Measured on the tiny encoder: fp32 1e-7 off, fp16 1e-4, int8dyn 2e-3, int8 7e-3."""
    got, want = outputs[name], outputs["onnxruntime"]
    assert got.shape == want.shape and got.dtype == np.float32
    assert cosines(got, want).min() >= min_cosine
    np.testing.assert_allclose(got, want, atol=atol)


def test_int8dyn_holds_int8_weights_into_float_ops(backends: dict[str, Any]) -> None:
    described = backends["tflite-int8dyn"].describe()
    assert described["executed_precision"].startswith("int8 dynamic (weights int8")
    assert f"{ATTENTION_MATMULS} of {WEIGHT_MATMULS + ATTENTION_MATMULS}" in \
        described["executed_precision"]
    assert described["compute_ops"] == {"integer": 0, "hybrid": WEIGHT_MATMULS,
                                        "float": ATTENTION_MATMULS, "float16": 0}
    # read back from the file itself: each FULLY_CONNECTED takes float input, int8 weights
    file = inspect_file(described["model_file"])
    assert file["int8_weight_tensors"] >= WEIGHT_MATMULS
    assert file["ops"]["FULLY_CONNECTED"] == WEIGHT_MATMULS
    assert described["text"]["static_batch"] == 1 and described["invoke"] == "per-sample"


def test_int8_quantizes_the_weight_matmuls_only(backends: dict[str, Any]) -> None:
    described = backends["tflite-int8"].describe()
    assert described["compute_ops"] == {"integer": WEIGHT_MATMULS, "hybrid": 0,
                                        "float": ATTENTION_MATMULS, "float16": 0}
    assert described["executed_precision"].startswith(f"int8 ({WEIGHT_MATMULS} of")
    assert described["int8_weight_tensors"] >= WEIGHT_MATMULS
    assert described["output"]["dtype"] == "float32"  # the embedding stays float
    assert all(t["dtype"] == "int64" for t in described["input"]["tokens"])


def test_float_files_hold_float_compute(backends: dict[str, Any]) -> None:
    fp32, fp16 = (backends[name].describe() for name in ("tflite-fp32", "tflite-fp16"))
    assert fp32["executed_precision"] == "fp32" and fp32["int8_weight_tensors"] == 0
    assert fp16["executed_precision"] == "fp32 (fp16 weights)"
    assert fp16["fp16_weight_dequantize_ops"] >= WEIGHT_MATMULS


def test_concurrent_predicts_give_sequential_answers(backends: dict[str, Any],
                                                     outputs: dict[str, np.ndarray]) -> None:
    """Each predict checks out its own interpreter: two threads never share one."""
    backend, samples = backends["tflite-int8dyn"], tokens()
    found: dict[int, np.ndarray] = {}

    def work(worker: int) -> None:
        for _ in range(3):
            found[worker] = backend.predict(samples)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for answer in found.values():
        np.testing.assert_array_equal(answer, outputs["tflite-int8dyn"])


def test_dynamic_padding_is_one_line(encoder: Path) -> None:
    options = SutOptions(model=SPEC.name, scenario="Offline", model_path=str(encoder))
    with pytest.raises(UserError, match="--padding dynamic needs the sequence length to vary"):
        create("tflite-fp32", options, spec(padding="dynamic"), None)


def test_a_conversion_that_computes_something_else_is_refused(backends: dict[str, Any],
                                                              encoder: Path,
                                                              tmp_path: Path) -> None:
    """The check holds the SavedModel to its ONNX: another encoder's weights fail it."""
    saved = export_saved_model(SPEC, str(encoder))  # cached
    other = tiny_encoder_folder(tmp_path / "other", seed=7)
    source = text_artifact(other, SPEC, "other")
    with pytest.raises(UserError, match="does not compute the ONNX model"):
        tsm.check_text(saved.path.parent, source, tsm.check_tokens(SEQ_LEN, 30522), "other")


def test_onnx2tf_failing_names_the_op(monkeypatch: pytest.MonkeyPatch, encoder: Path,
                                      tmp_path: Path) -> None:
    import onnx
    import onnx2tf

    def fails(**kwargs: Any) -> None:
        print("\x1b[31mERROR:\x1b[0m onnx_op_name: wa/bert/encoder/layer.0/attention/Softmax")
        raise ValueError("Dimensions must be equal")

    monkeypatch.setattr(onnx2tf, "convert", fails)
    model = onnx.load(str(encoder))
    model.graph.node[0].name = "/bert/encoder/layer.0/attention/Softmax"
    op = model.graph.node[0].op_type
    with pytest.raises(UserError, match=f"at {op} '/bert/encoder/layer.0/attention/Softmax' "
                                        r"\(ValueError: Dimensions must be equal\); run it "
                                        r"with ort-\*, ov-\* or torch-\*"):
        tsm._convert(tmp_path / "in.onnx", tmp_path / "out", model, "model x")


@pytest.mark.slow
def test_a_cli_run_on_tflite_int8dyn_is_valid(encoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("--scenario", "Offline", "--sut", "tflite-int8dyn", "--model-path",
                   str(encoder), "--seq-len", str(SEQ_LEN), "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    [found] = out.rglob("results.json")
    results = json.loads(found.read_text())
    assert results["summary"]["validity"] == "VALID"
    assert results["task"]["name"] == "text"
    assert results["sut"]["executed_precision"].startswith("int8 dynamic")
