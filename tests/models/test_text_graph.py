"""A text model's file read (its token inputs, the output it answers with) and QSL samples
turned into its feeds, cut to the batch's longest sequence where the padding is dynamic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantmark.ground.errors import UserError
from quantmark.models.text_graph import (
    batch_length,
    read_text_model,
    text_artifact,
    token_feeds,
)


def _model(path: Path, inputs: dict[str, int], outputs: dict[str, list]) -> Path:
    """A graph with these int64/float inputs and float outputs (the outputs are casts of the
    first input: enough for the reader, which never runs it)."""
    ins = [helper.make_tensor_value_info(name, dtype, ["batch", "sequence"])
           for name, dtype in inputs.items()]
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
            for name, dims in outputs.items()]
    first = next(iter(inputs))
    nodes = [helper.make_node("Cast", [first], [name], to=TensorProto.FLOAT)
             for name in outputs]
    graph = helper.make_graph(nodes, "g", ins, outs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


TOKENS = {"input_ids": TensorProto.INT64, "attention_mask": TensorProto.INT64,
          "token_type_ids": TensorProto.INT64}


def test_an_embedding_named_output_is_the_answer(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", TOKENS,
                  {"last_hidden_state": ["batch", "sequence"], "sentence_embedding": ["batch", 8]})
    stated = read_text_model(path, "m")
    assert (stated.head, stated.output_name, stated.width) == ("embedding", "sentence_embedding", 8)
    assert stated.inputs == ("input_ids", "attention_mask", "token_type_ids")


def test_logits_make_a_classifier_and_token_types_are_optional(tmp_path: Path) -> None:
    inputs = {k: v for k, v in TOKENS.items() if k != "token_type_ids"}
    stated = read_text_model(_model(tmp_path / "m.onnx", inputs, {"logits": ["batch", 3]}), "m")
    assert (stated.head, stated.width, stated.inputs) == ("classifier", 3,
                                                          ("input_ids", "attention_mask"))


@pytest.mark.parametrize(("inputs", "message"), [
    ({"pixel_values": TensorProto.INT64}, "takes inputs"),
    ({**TOKENS, "input_ids": TensorProto.FLOAT}, "not an int64"),
])
def test_files_that_are_not_text_models_are_one_line(tmp_path: Path, inputs: dict[str, int],
                                                     message: str) -> None:
    with pytest.raises(UserError, match=message):
        read_text_model(_model(tmp_path / "m.onnx", inputs, {"logits": ["batch", 3]}), "m")


def test_a_symbolic_width_is_read_from_config_json_or_refused(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", TOKENS, {"logits": ["batch", "labels"]})
    with pytest.raises(UserError, match="config.json"):
        read_text_model(path, "m")
    (tmp_path / "config.json").write_text('{"id2label": {"0": "a", "1": "b"}}')
    assert read_text_model(path, "m").width == 2


def test_a_quantized_file_is_refused(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", TOKENS, {"logits": ["batch", 3]})
    proto = onnx.load(path)
    proto.graph.node.append(helper.make_node("MatMulInteger", ["input_ids", "input_ids"], ["q"]))
    onnx.save(proto, path)
    spec = type("Spec", (), {"name": "m", "head": "", "task": "text"})()
    with pytest.raises(UserError, match="already quantized"):
        text_artifact(path, spec, "m")


def test_dynamic_feeds_are_views_cut_to_the_longest_sequence() -> None:
    batch = np.zeros((2, 3, 10), np.int64)
    batch[0, 1, :4] = 1
    batch[1, 1, :7] = 1
    batch[:, 0, :] = np.arange(10)
    feeds = token_feeds(batch, ("input_ids", "attention_mask"), dynamic=True)
    assert set(feeds) == {"input_ids", "attention_mask"}
    assert feeds["input_ids"].shape == (2, 7) and np.shares_memory(feeds["input_ids"], batch)
    assert np.array_equal(feeds["attention_mask"], batch[:, 1, :7])
    assert token_feeds(batch, ("input_ids", "attention_mask"), dynamic=False)[
        "input_ids"].shape == (2, 10)
    assert batch_length(np.zeros((1, 3, 5), np.int64), dynamic=True) == 1
