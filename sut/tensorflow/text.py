"""The TensorFlow SUTs on a text encoder (``spec.task == "text"``): ``tf-fp32``, ``tf-xla`` and
``tf-amp`` on the text SavedModel (``models.text_saved_model``: token inputs ``[1, seq_len]``,
checked against onnxruntime when it was made).

The serving function takes the token inputs by name as int64 ``[1, seq_len]`` tensors; a batch
runs one sample at a time (onnx2tf converts the encoder at fixed shapes). Everything else is
``backend``'s: grappler's mixed precision for ``tf-amp``, XLA's compiled HLO as ``tf-xla``'s
proof, the executed graph's compute nodes by dtype as the others'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantmark.models.text_graph import TOKEN_INPUTS, probe_tokens
from quantmark.models.text_saved_model import static_batch_note
from quantmark.sut.tensorflow.saved_model_backend import TensorFlowBackend


class TextTensorFlowBackend(TensorFlowBackend):
    """The text SavedModel's serving signature over token inputs, one sample per call."""

    def __init__(self, name: str, artifact: Any, spec: Any, threads: int) -> None:
        super().__init__(name, artifact, spec, threads)
        self.inputs = tuple(artifact.meta["inputs"])
        self.rows = tuple(TOKEN_INPUTS.index(name) for name in self.inputs)
        self.seq_len = int(artifact.meta["seq_len"])
        self.layout = "tokens"

    def _serving(self, signature: Any) -> tuple[Any, tuple[Any, ...]]:
        """A tf.function of the token inputs (positional, in ``inputs`` order) answering with
        the signature's output; the probe is ``probe_tokens``."""
        tf = self._tf
        names, output = self.inputs, str(self.artifact.meta["output_name"])

        def serve(*tokens: Any) -> Any:
            return signature(**dict(zip(names, tokens, strict=True)))[output]

        fn = tf.function(serve, jit_compile=self.jit, input_signature=[
            tf.TensorSpec([1, self.seq_len], tf.int64, name=name) for name in names])
        return fn, self._feeds(probe_tokens(self.seq_len)[0])

    def _feeds(self, sample: np.ndarray) -> tuple[Any, ...]:
        """One QSL sample ``[3, seq_len]`` as the function's token tensors."""
        return tuple(self._tf.constant(sample[row][None]) for row in self.rows)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        # one shape, [1, seq_len]: XLA compiled it for the load's probe (first_call_s[1])
        return np.concatenate([self._fn(*self._feeds(sample)).numpy() for sample in batch])

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["text"] = {"inputs": list(self.inputs), "seq_len": self.seq_len,
                             "padding": "fixed", "static_batch": 1,
                             "note": static_batch_note(self.seq_len),
                             "saved_model_check": self.artifact.meta.get("check")}
        return described

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        return {**super().speed_settings(scenario, batch_size),
                "input": f"int64 token tensors {', '.join(self.inputs)} [1, {self.seq_len}], "
                         "one call per sample"}
