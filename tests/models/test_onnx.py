"""ONNX export, the artifact cache, user ONNX validation and INT8 quantization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from quantmark.ground.errors import UserError
from quantmark.models.artifacts import MANIFEST, Artifact, artifact_dir, cached_build
from quantmark.models.onnx_export import export_onnx, load_user_onnx
from quantmark.models.zoo import get_model
from tests.models.helpers import photo_crops

# float32 through 50+ layers with differently ordered reductions: ~1e-5 relative is expected
RTOL = 1e-4


def _session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def test_export_layout_and_single_file(mobilenet_onnx: Artifact) -> None:
    art = mobilenet_onnx
    assert art.format == "onnx" and art.precision == "fp32" and art.path.is_file()
    assert not list(art.path.parent.glob("*.data")), "weights must be inside the .onnx"
    proto = onnx.load(str(art.path))
    (inp,), (out,) = proto.graph.input, proto.graph.output
    assert inp.name == "input" and out.name == "logits"
    dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    assert isinstance(dims[0], str) and dims[1:] == [3, 224, 224]
    assert art.meta["layout"] == "NCHW" and art.times["export_s"] > 0


@pytest.mark.parametrize("batch", [1, 3])
def test_export_matches_torch(mobilenet_onnx: Artifact, mobilenet_torch: torch.nn.Module,
                              batch: int) -> None:
    spec = get_model("mobilenetv2")
    model = mobilenet_torch
    x = photo_crops(spec, batch, seed=batch)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    got = _session(mobilenet_onnx.path).run(["logits"], {"input": x})[0]
    assert got.shape == (batch, 1000)
    assert np.abs(got - ref).max() <= RTOL * max(1.0, np.abs(ref).max())


def test_cache_hit(mobilenet_onnx: Artifact, private_cache: Path,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTMARK_CACHE", str(private_cache))  # the fixture's cache
    again = export_onnx(get_model("mobilenetv2"))
    assert again.meta["cached"] is True and again.path == mobilenet_onnx.path
    assert again.times == mobilenet_onnx.times and again.key == mobilenet_onnx.key
    assert again.weights == mobilenet_onnx.weights == "random (seed 0)"


def test_cache_rebuilds_incomplete_folder() -> None:
    builds: list[Path] = []

    def build(folder: Path) -> Artifact:
        builds.append(folder)
        (folder / "m.onnx").write_bytes(b"model")
        return Artifact(path=folder / "m.onnx", format="onnx", precision="fp32", key="",
                        weights="w", source_hash="s", times={"export_s": 1.5}, meta={})

    first = cached_build("fake", "k1", build)
    assert first.meta["cached"] is False and first.path.read_bytes() == b"model"
    second = cached_build("fake", "k1", build)
    assert second.meta["cached"] is True and second.times == {"export_s": 1.5}
    assert len(builds) == 1 and second.key == "k1"
    (artifact_dir("fake", "k1") / MANIFEST).unlink()  # as if a build was interrupted
    third = cached_build("fake", "k1", build)
    assert third.meta["cached"] is False and len(builds) == 2
    assert (artifact_dir("fake", "k1") / MANIFEST).is_file()
    assert not [p for p in artifact_dir("fake", "k1").parent.iterdir() if p.name != "k1"]


def _tiny_onnx(path: Path, in_shape: list, out_shape: list) -> Path:
    """A one-node model with the given I/O shapes (the validator only reads the signature)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_user_onnx_errors(tmp_path: Path) -> None:
    spec = get_model("resnet50")
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage" * 50)
    cases = {
        tmp_path / "missing.onnx": "not found",
        corrupt: "not a valid ONNX",
        _tiny_onnx(tmp_path / "small.onnx", ["N", 3, 128, 128], ["N", 1000]): "3x128x128",
        _tiny_onnx(tmp_path / "rank.onnx", ["N", 3 * 224 * 224], ["N", 1000]): "input",
        _tiny_onnx(tmp_path / "out.onnx", ["N", 3, 224, 224], ["N", 10]): "outputs 10 classes",
        _tiny_onnx(tmp_path / "vec.onnx", ["N", 3, 224, 224], ["N"]): "no float [N, classes]",
    }
    for path, words in cases.items():
        with pytest.raises(UserError) as err:
            load_user_onnx(path, spec)
        msg = str(err.value)
        assert "\n" not in msg and str(path) in msg and "resnet50" in msg and words in msg, msg


def test_user_onnx_accepts_layouts_and_background_class(tmp_path: Path,
                                                       mobilenet_onnx: Artifact) -> None:
    spec = get_model("resnet50")
    nhwc = load_user_onnx(_tiny_onnx(tmp_path / "nhwc.onnx", [1, 224, 224, 3], [1, 1001]), spec)
    assert nhwc.meta["layout"] == "NHWC" and nhwc.meta["label_offset"] == 1
    assert nhwc.meta["static_batch"] == 1
    real = load_user_onnx(mobilenet_onnx.path, get_model("mobilenetv2"))
    assert real.meta["layout"] == "NCHW" and real.meta["label_offset"] == 0
    assert real.meta["input_name"] == "input" and real.precision == "fp32"
    assert real.weights.startswith("user: mobilenetv2-fp32.onnx sha256 ")
