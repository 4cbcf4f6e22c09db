"""The CPU torch SUTs on a text encoder: the tiny random BERT of tests/tasks/text (through a
trainer module standing in for MiniLM's, ``text_trainer``) at fixed and dynamic padding,
checked against ONNX Runtime on its own ONNX export; what each SUT proves it executed; the
refusals; and a user's classifier run from the Hugging Face checkpoint beside its ONNX file."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.models.text_graph import TOKEN_INPUTS  # noqa: E402
from quantmark.models.zoo import ModelSpec  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.pytorch.backend import create  # noqa: E402
from tests.tasks.text.tiny_encoder import (  # noqa: E402
    HIDDEN,
    LAYERS,
    tiny_encoder_folder,
    tiny_hf_classifier_folder,
)

SEQ_LEN, BATCH, LABELS = 16, 3, 3
LENGTHS = (5, 11, 8)  # three unequal sentences: dynamic padding cuts the batch to 11
EAGER = ("torch-fp32", "torch-bf16", "torch-int8dyn")
PADDINGS = ("fixed", "dynamic")
LINEAR_PER_LAYER = 6  # query, key, value, attention output, intermediate, output
TRAINER = "tests.sut.pytorch.text_trainer"


def _spec(padding: str, head: str = "embedding", trainer: str = TRAINER,
          width: int = HIDDEN) -> ModelSpec:
    """A text model's spec as tasks.text builds it (the trainer set for a built-in model)."""
    return ModelSpec(name="tiny-text", mean=(0.0,), std=(1.0,), builder=_no_builder,
                     input_size=SEQ_LEN, resize_short=SEQ_LEN, num_classes=width, channels=3,
                     input_dtype="int64", builtin_dataset="sentences", task="text", head=head,
                     seq_len=SEQ_LEN, padding=padding, trainer=trainer)


def _no_builder(num_classes: int):
    raise AssertionError("a text model has no image builder")


def _options(path: Path | str | None, batch_size: int = BATCH) -> SutOptions:
    return SutOptions(model="tiny-text", scenario="Offline", batch_size=batch_size,
                      model_path=None if path is None else str(path))


def _tokens() -> np.ndarray:
    """QSL samples ``[3, 3, SEQ_LEN]``: [CLS] words [SEP], the second sentence's tail as
    segment B, zero padding."""
    rng = np.random.default_rng(0)
    tokens = np.zeros((len(LENGTHS), 3, SEQ_LEN), np.int64)
    for row, length in enumerate(LENGTHS):
        tokens[row, 0, :length] = rng.integers(1000, 30000, length)
        tokens[row, 0, 0], tokens[row, 0, length - 1] = 101, 102
        tokens[row, 1, :length] = 1
        tokens[row, 2, length // 2:length] = 1
    return tokens


def _onnx_answer(path: Path, tokens: np.ndarray, padding: str) -> np.ndarray:
    """ONNX Runtime's output of the export on the same feeds (cut as the padding says)."""
    length = int(tokens[:, 1].sum(1).max()) if padding == "dynamic" else tokens.shape[2]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {name: np.ascontiguousarray(tokens[:, row, :length])
                              for row, name in enumerate(TOKEN_INPUTS)})[0]


def _cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny encoder's ONNX export (the weights text_trainer's module has)."""
    return tiny_encoder_folder(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture(scope="module")
def tokens() -> np.ndarray:
    return _tokens()


@pytest.fixture(scope="module")
def eager(encoder_onnx):
    """Each eager SUT at each padding, created and loaded once."""
    built = {}
    for name in EAGER:
        for padding in PADDINGS:
            backend = create(name, _options(encoder_onnx), _spec(padding), None)
            backend.load()
            built[name, padding] = backend
    yield built
    for backend in built.values():
        backend.close()


@pytest.fixture(scope="module")
def compiled(encoder_onnx, tokens):
    """torch-compile at each padding: loaded, then fed batches of 1, 2 and 3 at once (dynamo's
    graph counter is process-wide: nothing else compiles in between); outputs and records."""
    runs = {}
    for padding in PADDINGS:
        backend = create("torch-compile", _options(encoder_onnx), _spec(padding), None)
        backend.load()
        outputs = {size: backend.predict(tokens[:size]) for size in (3, 2, 1)}
        runs[padding] = outputs, backend.describe()
        backend.close()
    return runs


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize("padding", PADDINGS)
def test_fp32_equals_onnxruntime_on_the_export(eager, encoder_onnx, tokens, padding):
    got = eager["torch-fp32", padding].predict(tokens)
    want = _onnx_answer(encoder_onnx, tokens, padding)
    assert got.dtype == np.float32 and got.shape == (len(LENGTHS), HIDDEN)
    assert np.abs(got - want).max() <= 1e-4


@pytest.mark.parametrize("name", EAGER)
def test_dynamic_padding_cuts_the_batch_without_changing_answers(eager, tokens, name):
    """Padding is masked: the batch cut to its longest sentence answers as at full length."""
    fixed, dynamic = (eager[name, p].predict(tokens) for p in PADDINGS)
    assert dynamic.dtype == np.float32 and dynamic.shape == (len(LENGTHS), HIDDEN)
    assert np.abs(fixed - dynamic).max() <= (1e-5 if name == "torch-fp32" else 2e-2)


@pytest.mark.parametrize("name", ["torch-bf16", "torch-int8dyn"])
@pytest.mark.parametrize("padding", PADDINGS)
def test_reduced_precision_stays_close_to_fp32(eager, tokens, name, padding):
    reference = eager["torch-fp32", padding].predict(tokens)
    assert _cosines(eager[name, padding].predict(tokens), reference).min() > 0.95


@pytest.mark.parametrize("name", EAGER)
def test_concurrent_predict_matches_sequential(eager, tokens, name):
    backend = eager[name, "dynamic"]
    one = backend.predict(tokens)
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda _: backend.predict(tokens), range(8)))
    for out in outputs:
        np.testing.assert_array_equal(out, one)


# ----------------------------------------------------------------------------- proof


def test_fp32_proves_every_matmul_kernel_float32(eager):
    info = eager["torch-fp32", "fixed"].describe()
    assert info["executed_precision"] == "fp32"
    assert info["evidence"]["fp32_matmul_kernels"] > 0
    assert all(set(counts) == {"fp32"} for counts in info["matmul_kernels"].values())
    assert info["text"]["inputs"] == list(TOKEN_INPUTS) and info["text"]["onnx_read"] is False


def test_bf16_proves_bf16_matmul_kernels(eager):
    info = eager["torch-bf16", "fixed"].describe()
    assert info["executed_precision"].startswith("bf16")
    assert info["evidence"]["bf16_matmul_kernels"] >= LAYERS * LINEAR_PER_LAYER
    assert info["matmul_kernels"]["aten::addmm"].get("bf16", 0) >= LAYERS * LINEAR_PER_LAYER


@pytest.mark.parametrize("padding", PADDINGS)
def test_int8dyn_proves_integer_linear_kernels(eager, padding):
    info = eager["torch-int8dyn", padding].describe()
    linear = LAYERS * LINEAR_PER_LAYER
    assert info["matmul_kernels"]["quantized::linear_dynamic"] == {"int8": linear}
    assert info["evidence"]["dynamic_int8_linear_modules"] == linear
    assert info["evidence"]["float_linear_modules"] == 0
    # the attention's activation x activation products stay float, and the record says so
    assert info["executed_precision"] == "int8+fp32"
    assert info["evidence"]["fp32_matmul_kernels"] == info["matmul_kernels"]["aten::bmm"]["fp32"]
    assert "aten::addmm" not in info["matmul_kernels"]


@pytest.mark.parametrize("padding", PADDINGS)
def test_compile_computes_fp32_and_never_compiles_after_load(compiled, eager, tokens, padding):
    outputs, info = compiled[padding]
    reference = eager["torch-fp32", padding].predict(tokens)
    for size, out in outputs.items():
        assert out.dtype == np.float32 and np.abs(out - reference[:size]).max() <= 1e-4
    record = info["compile"]
    assert info["executed_precision"] == "fp32" and record["dynamic"] == (padding == "dynamic")
    assert record["graphs_compiled_after_load"] == 0 and record["graph_breaks"] == 0
    # fixed: batch 2 ran padded up to the compiled 3; dynamic: one symbolic graph for 2 and 3
    assert record["padded_calls"] == (1 if padding == "fixed" else 0)
    if padding == "dynamic":
        assert record["sequence_lengths_checked"] == [SEQ_LEN, SEQ_LEN // 2]


# ----------------------------------------------------------------------------- refusals


def test_int8dyn_that_quantizes_nothing_fails_loudly(monkeypatch, encoder_onnx):
    from torch.ao import quantization

    monkeypatch.setattr(quantization, "quantize_dynamic", lambda model, *_a, **_k: model)
    backend = create("torch-int8dyn", _options(encoder_onnx), _spec("fixed"), None)
    with pytest.raises(SutError) as exc:
        backend.load()
    assert "no integer Linear kernel ran" in _one_line(exc)
    assert "refusing to measure FP32 as INT8" in str(exc.value)


def test_bf16_without_bf16_kernels_fails_loudly(monkeypatch, encoder_onnx):
    import contextlib

    monkeypatch.setattr(torch, "autocast", lambda *_a, **_k: contextlib.nullcontext())
    backend = create("torch-bf16", _options(encoder_onnx), _spec("fixed"), None)
    with pytest.raises(SutError) as exc:
        backend.load()
    assert "refusing to measure FP32 as BF16" in _one_line(exc)


def test_static_int8_is_refused_pointing_to_int8dyn(encoder_onnx):
    with pytest.raises(UserError) as exc:
        create("torch-int8", _options(encoder_onnx), _spec("fixed"), None)
    assert "torch-int8dyn" in _one_line(exc) and "torch.fx" in str(exc.value)


def test_user_embedding_model_is_refused_naming_the_file_suts(encoder_onnx):
    with pytest.raises(UserError) as exc:
        create("torch-fp32", _options(encoder_onnx), _spec("fixed", trainer=""), None)
    assert "ort-* or ov-*" in _one_line(exc) and "pool" in str(exc.value)


def test_user_classifier_without_checkpoint_names_what_is_missing(tmp_path):
    path = tiny_encoder_folder(tmp_path / "bare", labels=LABELS)  # ONNX + config, no weights
    spec = _spec("fixed", head="classifier", trainer="", width=LABELS)
    with pytest.raises(UserError) as exc:
        create("torch-int8dyn", _options(path), spec, None)
    text = _one_line(exc)
    assert "architectures" in text and "model.safetensors" in text


# ----------------------------------------------------------------------------- user classifier


@pytest.fixture(scope="module")
def classifier_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's folder: a tiny BertForSequenceClassification saved with save_pretrained and
    its ONNX export (TorchScript exporter, output ``logits``) beside it."""
    return tiny_hf_classifier_folder(tmp_path_factory.mktemp("user-classifier"), LABELS)


def _classifier_spec(padding: str) -> ModelSpec:
    return _spec(padding, head="classifier", trainer="", width=LABELS)


@pytest.mark.parametrize(("name", "padding"), [("torch-fp32", "fixed"),
                                               ("torch-int8dyn", "dynamic")])
def test_user_classifier_runs_from_its_checkpoint(classifier_onnx, tokens, name, padding):
    backend = create(name, _options(classifier_onnx), _classifier_spec(padding), None)
    backend.load()
    got = backend.predict(tokens)
    want = _onnx_answer(classifier_onnx, tokens, padding)
    info = backend.describe()
    backend.close()
    assert got.dtype == np.float32 and got.shape == (len(LENGTHS), LABELS)
    assert info["weights"].endswith("(BertForSequenceClassification)")
    assert Path(info["model_file"]).name == "model.safetensors"
    if name == "torch-fp32":
        assert np.abs(got - want).max() <= 1e-4
        return
    # every Linear is INT8, the classifier head among them
    linear = LAYERS * LINEAR_PER_LAYER + 2  # + BERT's pooler and the classifier
    assert info["matmul_kernels"]["quantized::linear_dynamic"] == {"int8": linear}
    assert info["evidence"]["dynamic_int8_linear_modules"] == linear
    assert _cosines(got, want).min() > 0.95


def test_user_checkpoint_without_a_classification_head_is_refused(classifier_onnx, tmp_path):
    folder = tmp_path / "headless"
    shutil.copytree(classifier_onnx.parent, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    with pytest.raises(UserError) as exc:
        create("torch-fp32", _options(folder / "model.onnx"), _classifier_spec("fixed"), None)
    assert "BertModel" in _one_line(exc) and "classification head" in str(exc.value)


def test_user_checkpoint_of_another_width_is_refused(classifier_onnx):
    spec = replace(_classifier_spec("fixed"), num_classes=LABELS + 1)
    with pytest.raises(UserError) as exc:
        create("torch-fp32", _options(classifier_onnx), spec, None)
    assert "not the same model" in _one_line(exc)
