"""TensorFlow SUTs on a text encoder (the tiny random BERT): the text SavedModel's serving
function fed token inputs by name, against ONNX Runtime's FP32 answers; what each SUT proves
ran (fp32 compute nodes, XLA's HLO, bf16 nodes for tf-amp, in a subprocess: grappler's options
are process-global); the refusals; and an accuracy run through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")
pytest.importorskip("transformers")

from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.tensorflow.backend import create  # noqa: E402
from tests.conftest import run_cli, run_json  # noqa: E402
from tests.sut.text_encoders import SEQ_LEN, SPEC, cosines, reference, spec, tokens  # noqa: E402
from tests.tasks.text.tiny_encoder import tiny_encoder_folder  # noqa: E402

#: same FP32 math in other kernels: measured 1e-7 off on the tiny encoder
ATOL = 1e-5


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_encoder_folder(tmp_path_factory.mktemp("tiny-text") / "tiny-text")


def _backend(name: str, encoder: Path) -> Any:
    options = SutOptions(model=SPEC.name, scenario="Offline", model_path=str(encoder))
    backend = create(name, options, SPEC, None)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def want(encoder: Path) -> np.ndarray:
    return reference(encoder, tokens())


@pytest.mark.parametrize("name", ["tf-fp32", "tf-xla"])
def test_fp32_suts_answer_as_onnxruntime(name: str, encoder: Path, want: np.ndarray) -> None:
    backend = _backend(name, encoder)
    try:
        got = backend.predict(tokens())
        described = backend.describe()
    finally:
        backend.close()
    assert got.shape == want.shape and cosines(got, want).min() >= 0.99999
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert described["executed_precision"] == "fp32"
    assert described["text"]["seq_len"] == SEQ_LEN and described["text"]["static_batch"] == 1
    assert described["text"]["saved_model_check"]["min_cosine"] >= 0.9999
    evidence = described["evidence"]
    if name == "tf-xla":  # no graph executor compute: XLA's HLO is the proof
        assert evidence["tf_graph_executor_compute_nodes"] == 0
        assert sum(evidence["xla_hlo"]["compute"].get("f32", {}).values()) > 0
    else:
        assert sum(evidence["compute"]["float32"].values()) > 0
        assert "bfloat16" not in evidence["compute"]


def test_amp_runs_bf16_matmuls_pointing_as_fp32(encoder: Path, want: np.ndarray) -> None:
    result = run_json(f"""
        import json
        from quantmark.sut.interface import SutOptions
        from quantmark.sut.tensorflow.backend import create
        from tests.sut.text_encoders import SPEC, tokens
        options = SutOptions(model=SPEC.name, scenario="Offline", model_path={str(encoder)!r})
        backend = create("tf-amp", options, SPEC, None)
        backend.load()
        got = backend.predict(tokens())
        print(json.dumps({{"got": got.tolist(), "describe": backend.describe()}}))
    """, timeout=300)
    info = result["describe"]
    assert info["executed_precision"] == "bf16+fp32" and info["requested_precision"] == "mixed"
    assert sum(info["evidence"]["compute"]["bfloat16"].values()) > 0
    assert cosines(np.asarray(result["got"], np.float32), want).min() >= 0.999


def test_dynamic_padding_is_one_line(encoder: Path) -> None:
    options = SutOptions(model=SPEC.name, scenario="Offline", model_path=str(encoder))
    with pytest.raises(UserError, match="--padding dynamic needs the sequence length to vary"):
        create("tf-fp32", options, spec(padding="dynamic"), None)


@pytest.mark.slow
def test_an_accuracy_run_on_tf_fp32_matches_the_fp32_reference(encoder: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("--scenario", "Offline", "--sut", "tf-fp32", "--model-path", str(encoder),
                   "--seq-len", str(SEQ_LEN), "--mode", "accuracy", "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    [found] = out.rglob("results.json")
    results = json.loads(found.read_text())
    assert results["task"]["name"] == "text"
    assert results["sut"]["executed_precision"] == "fp32"
    assert results["accuracy"]["cosine"] > 99.99  # against ONNX Runtime's FP32 reference
