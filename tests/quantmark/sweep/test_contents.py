"""What a file or folder is by content (``sweep.contents.file_identity``): a model's weights
beside it count, a path's name does not, a folder's hidden files do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantmark.sweep.contents import BUILTIN, dataset_identity, file_identity, hardware


def _external_model(folder: Path, weights: np.ndarray) -> Path:
    """A one-MatMul ONNX model whose weights live in ``weights.bin`` beside it."""
    tensor = numpy_helper.from_array(weights, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [tensor])
    path = folder / "model.onnx"
    onnx.save_model(helper.make_model(graph), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    return path


def test_an_onnx_model_s_external_weights_are_part_of_it(tmp_path: Path) -> None:
    path = _external_model(tmp_path, np.eye(4, dtype=np.float32))
    first = file_identity(path)
    (tmp_path / "notes.txt").write_text("not the model")
    assert file_identity(path) == first  # a file it does not read
    _external_model(tmp_path, 2 * np.eye(4, dtype=np.float32))
    assert (tmp_path / "model.onnx").stat().st_size > 0
    assert file_identity(path) != first  # same graph file, other weights


def test_a_copy_elsewhere_is_the_same_and_a_changed_byte_is_not(tmp_path: Path) -> None:
    one = tmp_path / "a.conf"
    one.write_text("*.Offline.min_duration = 1000\n")
    two = tmp_path / "elsewhere" / "b.conf"
    two.parent.mkdir()
    two.write_text(one.read_text())
    assert file_identity(one) == file_identity(two)
    two.write_text("*.Offline.min_duration = 1001\n")
    assert file_identity(one) != file_identity(two)


def test_a_folder_is_its_files_hidden_ones_aside(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("a\nb\n")
    first = file_identity(tmp_path / "tok")
    (tmp_path / "tok" / ".DS_Store").write_bytes(b"finder")
    assert file_identity(tmp_path / "tok") == first
    (tmp_path / "tok" / "vocab.txt").write_text("b\na\n")
    assert file_identity(tmp_path / "tok") != first


def test_no_path_and_a_name_stand_for_themselves() -> None:
    assert file_identity(None) is None and file_identity("") is None
    assert file_identity("bert-base-uncased") == "name:bert-base-uncased"
    assert dataset_identity("digits-cnn", None) == BUILTIN
    assert hardware({"cpu_model": "X", "arch": "arm64", "logical_cpus": 4}) == "X (arm64, 4 CPUs)"
