"""What a framework hands ``run.py diagnose``: every layer's output, and its own model rebuilt
with a changed quantization recipe.

A framework that supports diagnosis has a ``diagnose`` module in its folder
(``sut/onnxruntime/diagnose.py`` ...) with:

* ``capture(backend, samples) -> LayerCapture``: run ``samples`` (float32, batch first, in
  ``backend.layout``) through the model the SUT ``backend`` runs (its ``artifact``) and read every
  layer's output with the framework's own mechanism (intermediate tensors added as graph outputs,
  TFLite's preserve-all-tensors, torch forward hooks). The backend is the one ``create`` built,
  so the model diagnosed is exactly the model benchmarked; ``capture`` may load its own session.
* ``rebuild(name, options, spec, calibration, recipe) -> Backend``: the SUT ``name`` made as
  ``create`` makes it, but quantized with ``recipe`` (layers kept in FP32, an injected fault);
  not yet loaded. ``Recipe()`` gives the SUT's normal model.
* ``EXCLUSION``: a line naming the framework's exclusion mechanism, for the report.
* ``DAMAGE``: a line naming how a fault is injected, or "" when the framework injects none.

The orchestration (``quantmark.diagnosis``) matches the layers of two captures, computes the
errors, and measures the rebuilt models; nothing here knows about another framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["LayerCapture", "LayerOutput", "Recipe", "to_nchw"]


@dataclass
class LayerOutput:
    """One layer's output over the captured samples."""

    #: the framework's own name of the layer (node, op, module or tensor name): what a recipe's
    #: ``exclude`` takes back, and what name matching compares
    name: str
    #: the framework's op type (Conv, GroupConvolution, DEPTHWISE_CONV_2D, ConvReLU2d ...)
    op_type: str
    #: the precision this layer computes in within this model ("int8", "fp32", "fp16" ...)
    precision: str
    #: float32 values (dequantized where the model keeps them as integers), batch first; 4-D
    #: feature maps in NCHW whatever the framework's layout, so shapes compare across frameworks
    value: np.ndarray
    #: names of the layers whose outputs feed this one, where the graph says so (used to tell
    #: the error a layer adds from the error it receives); empty: the previous layer
    inputs: tuple[str, ...] = ()
    #: the framework's exclusion mechanism can keep this layer in FP32 (torch's functional
    #: adds have no module to give a qconfig: measured, never excluded)
    excludable: bool = True


@dataclass
class LayerCapture:
    """Every captured layer of one model, in execution (topological) order."""

    layers: list[LayerOutput]
    #: how the outputs were read, in a line ("onnxruntime: intermediate tensors added as outputs")
    method: str
    #: where each layer's precision comes from, in a line
    precision_source: str
    #: facts worth recording (the model file, tensors skipped and why ...)
    notes: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """Changes to a SUT's own quantization recipe. Names are ``LayerOutput.name`` values."""

    #: layers kept in FP32 (the framework's exclusion mechanism)
    exclude: tuple[str, ...] = ()
    #: injected faults, for testing that diagnosis finds real ones: (layer, factor) quantizes
    #: that layer's weights over a range ``factor`` times too wide (most levels unused)
    damage: tuple[tuple[str, float], ...] = ()

    def key(self) -> dict[str, object]:
        """The recipe as plain data, for an artifact's cache key (empty when unchanged)."""
        out: dict[str, object] = {}
        if self.exclude:
            out["exclude"] = sorted(self.exclude)
        if self.damage:
            out["damage"] = sorted([name, float(factor)] for name, factor in self.damage)
        return out


def to_nchw(value: np.ndarray) -> np.ndarray:
    """A 4-D NHWC feature map as NCHW (other ranks unchanged): the layout captures share."""
    return np.ascontiguousarray(value.transpose(0, 3, 1, 2)) if value.ndim == 4 else value
