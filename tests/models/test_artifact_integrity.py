"""Cached artifacts are verified against the hashes recorded at build time on every load."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantmark.models.artifacts import (
    MANIFEST,
    MANIFEST_HASH,
    Artifact,
    artifact_dir,
    cached_build,
    load_cached,
    manifest_hash,
)

WEIGHTS = np.arange(1, 65, dtype=np.float32).reshape(8, 8) / 64


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _onnx_build(builds: list[Path], meta: dict | None = None):
    """A build function writing a one-MatMul ONNX with real weights (zeroing them matters)."""

    def build(folder: Path) -> Artifact:
        builds.append(folder)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
            initializer=[numpy_helper.from_array(WEIGHTS, "w")],
        )
        out = folder / "tiny-fp32.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), out)
        return Artifact(path=out, format="onnx", precision="fp32", key="", weights="w",
                        source_hash="s", meta={"sha256": _sha256(out)[:16], **(meta or {})})

    return build


def _run(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": np.eye(8, dtype=np.float32)})[0]


def _one_warning(caplog: pytest.LogCaptureFixture, *words: str) -> str:
    messages = [r.getMessage() for r in caplog.records
                if r.name == "quantmark.models.artifacts" and r.levelno == logging.WARNING]
    assert len(messages) == 1, messages
    assert "\n" not in messages[0] and "rebuilding" in messages[0]
    for word in words:
        assert word in messages[0]
    return messages[0]


def test_fresh_and_cached_artifacts_carry_verified_hashes() -> None:
    builds: list[Path] = []
    first = cached_build("integrity-fresh", "k", _onnx_build(builds))
    digest = _sha256(first.path)
    assert first.meta["verified_sha256"] == digest and first.meta["cached"] is False
    assert first.meta["files"] == {"tiny-fp32.onnx": {"bytes": first.path.stat().st_size,
                                                      "sha256": digest}}
    again = cached_build("integrity-fresh", "k", _onnx_build(builds))
    assert len(builds) == 1 and again.meta["cached"] is True
    assert again.meta["verified_sha256"] == digest


def test_zeroed_weights_same_size_are_rebuilt(caplog: pytest.LogCaptureFixture) -> None:
    builds: list[Path] = []
    art = cached_build("integrity-zeroed", "k", _onnx_build(builds))
    good = art.path.read_bytes()
    # zero the weights in place: same size, still a loadable model, wrong answers
    raw = WEIGHTS.tobytes()
    at = good.index(raw)
    art.path.write_bytes(good[:at] + bytes(len(raw)) + good[at + len(raw):])
    assert art.path.stat().st_size == len(good) and not _run(art.path).any()
    with caplog.at_level(logging.WARNING):
        again = cached_build("integrity-zeroed", "k", _onnx_build(builds))
    _one_warning(caplog, "tiny-fp32.onnx", "sha256", "changed in place")
    assert len(builds) == 2 and again.meta["cached"] is False
    assert again.meta["verified_sha256"] == _sha256(again.path)
    np.testing.assert_allclose(_run(again.path), WEIGHTS)
    hit = load_cached("integrity-zeroed", "k")
    assert hit is not None and hit.meta["verified_sha256"] == _sha256(again.path)


def test_truncated_artifact_is_rebuilt(caplog: pytest.LogCaptureFixture) -> None:
    builds: list[Path] = []
    art = cached_build("integrity-truncated", "k", _onnx_build(builds))
    size = art.path.stat().st_size
    with open(art.path, "r+b") as handle:
        handle.truncate(size // 2)
    with caplog.at_level(logging.WARNING):
        again = cached_build("integrity-truncated", "k", _onnx_build(builds))
    _one_warning(caplog, "truncated")
    assert len(builds) == 2 and again.path.stat().st_size == size
    np.testing.assert_allclose(_run(again.path), WEIGHTS)


def _two_file_build(builds: list[Path]):
    """Like an OpenVINO IR or a SavedModel: the SUT also loads files ``path`` does not name."""

    def build(folder: Path) -> Artifact:
        builds.append(folder)
        (folder / "model.xml").write_text("<net/>")
        (folder / "variables").mkdir()
        (folder / "variables" / "weights.bin").write_bytes(bytes(range(256)) * 64)
        return Artifact(path=folder / "model.xml", format="openvino-ir", precision="fp32",
                        key="", weights="w", source_hash="s")

    return build


def test_every_file_of_the_folder_is_verified(caplog: pytest.LogCaptureFixture) -> None:
    builds: list[Path] = []
    art = cached_build("integrity-folder", "k", _two_file_build(builds))
    assert sorted(art.meta["files"]) == ["model.xml", "variables/weights.bin"]
    verified = art.meta["verified_sha256"]
    weights = art.path.parent / "variables" / "weights.bin"
    weights.write_bytes(bytes(weights.stat().st_size))
    with caplog.at_level(logging.WARNING):
        again = cached_build("integrity-folder", "k", _two_file_build(builds))
    _one_warning(caplog, "variables/weights.bin")
    assert len(builds) == 2 and weights.read_bytes() == bytes(range(256)) * 64
    assert again.meta["verified_sha256"] == verified
    weights.unlink()
    with caplog.at_level(logging.WARNING):
        cached_build("integrity-folder", "k", _two_file_build(builds))
    assert len(builds) == 3 and "is missing" in caplog.records[-1].getMessage()


def test_manifest_without_hashes_is_rebuilt(caplog: pytest.LogCaptureFixture) -> None:
    """A folder an older quantmark built has nothing to verify against: it is rebuilt."""
    builds: list[Path] = []
    cached_build("integrity-old", "k", _onnx_build(builds))
    manifest = artifact_dir("integrity-old", "k") / MANIFEST
    data = json.loads(manifest.read_text())
    del data["meta"]["files"]
    data[MANIFEST_HASH] = manifest_hash(data)  # a consistent manifest, only without the hashes
    manifest.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        again = cached_build("integrity-old", "k", _onnx_build(builds))
    _one_warning(caplog, "no content hashes")
    assert len(builds) == 2 and again.meta["files"]
    del data[MANIFEST_HASH]  # an older quantmark wrote no hash of the manifest either
    manifest.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        cached_build("integrity-old", "k", _onnx_build(builds))
    assert len(builds) == 3 and "older quantmark" in caplog.records[-1].getMessage()


def _edit_manifest(model: str, old: str, new: str) -> None:
    """Edit the manifest's text in place, keeping its size (as a hand edit would)."""
    manifest = artifact_dir(model, "k") / MANIFEST
    text = manifest.read_text()
    assert text.count(old) == 1 and len(old) == len(new)
    manifest.write_text(text.replace(old, new))


@pytest.mark.parametrize("old, new", [('"label_offset": 0', '"label_offset": 1'),
                                      ('"layout": "NCHW"', '"layout": "NHWC"'),
                                      ('"input_name": "x"', '"input_name": "y"')])
def test_edited_manifest_is_rebuilt(old: str, new: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    """The backends read label offset, layout and input names from the manifest: an edit to
    any field is caught by its own hash and the artifact rebuilt with one warning line."""
    builds: list[Path] = []
    model = "integrity-manifest-" + new.split(":")[0].strip('"')  # the cache is shared
    meta = {"label_offset": 0, "layout": "NCHW", "input_name": "x"}
    first = cached_build(model, "k", _onnx_build(builds, meta))
    assert first.meta["label_offset"] == 0
    _edit_manifest(model, old, new)
    with caplog.at_level(logging.WARNING):
        again = cached_build(model, "k", _onnx_build(builds, meta))
    _one_warning(caplog, MANIFEST, "edited in place")
    assert len(builds) == 2 and again.meta["cached"] is False
    hit = load_cached(model, "k")
    assert hit is not None and {k: hit.meta[k] for k in meta} == meta


def test_unreadable_or_missing_manifest_warns(caplog: pytest.LogCaptureFixture) -> None:
    builds: list[Path] = []
    cached_build("integrity-nomanifest", "k", _onnx_build(builds))
    manifest = artifact_dir("integrity-nomanifest", "k") / MANIFEST
    manifest.write_text(manifest.read_text()[:-20])  # cut short: not JSON any more
    with caplog.at_level(logging.WARNING):
        cached_build("integrity-nomanifest", "k", _onnx_build(builds))
    _one_warning(caplog, MANIFEST, "cannot be read")
    caplog.clear()
    manifest.unlink()
    with caplog.at_level(logging.WARNING):
        cached_build("integrity-nomanifest", "k", _onnx_build(builds))
    _one_warning(caplog, MANIFEST, "is missing")
    assert len(builds) == 3


def test_deleted_model_file_warns_like_a_damaged_one(caplog: pytest.LogCaptureFixture) -> None:
    builds: list[Path] = []
    art = cached_build("integrity-deleted", "k", _onnx_build(builds))
    art.path.unlink()
    with caplog.at_level(logging.WARNING):
        again = cached_build("integrity-deleted", "k", _onnx_build(builds))
    _one_warning(caplog, "tiny-fp32.onnx", "is missing")
    assert len(builds) == 2 and again.path.is_file()
    np.testing.assert_allclose(_run(again.path), WEIGHTS)
