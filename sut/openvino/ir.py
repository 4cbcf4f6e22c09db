"""What every module that reads an OpenVINO IR needs of it: its identity (both files), whether
it is already quantized, and its input's batch made dynamic or static.

Below ``convert``, ``detection`` and ``diagnose``, which all read IRs, so none of them has to
import another for these.
"""

from __future__ import annotations

from pathlib import Path

import openvino as ov

from quantmark.ground.hashing import hash_file, hash_json

#: ops whose presence marks an IR as already quantized
QUANTIZED_OPS = ("FakeQuantize", "FakeConvert")


def ir_files_hash(xml: Path) -> str:
    """Identity of an IR: both the topology (.xml) and the weights (.bin)."""
    bin_file = xml.with_suffix(".bin")
    return hash_json({"xml": hash_file(xml),
                      "bin": hash_file(bin_file) if bin_file.is_file() else None})


def is_quantized(model: ov.Model) -> bool:
    """True for an IR with FakeQuantize/FakeConvert ops: INT8, whatever the SUT asked for."""
    return any(op.get_type_name() in QUANTIZED_OPS for op in model.get_ops())


def make_batch_dynamic(model: ov.Model) -> int | None:
    """Reshape the input's batch dimension to dynamic in place; returns the old static batch.

    The harness sends batch 1 and batch N to the same compiled model, so a static batch would
    fail at the first differently sized query.
    """
    shape = model.input(0).get_partial_shape()
    if shape[0].is_dynamic:
        return None
    static = shape[0].get_length()
    dims = [ov.Dimension(-1)] + [shape[i] for i in range(1, shape.rank.get_length())]
    model.reshape({model.input(0): ov.PartialShape(dims)})
    return static


def make_batch_static(model: ov.Model, batch: int) -> None:
    """Reshape the input's batch dimension to ``batch`` in place: the plugin then plans its
    memory once, as ``benchmark_app -b`` runs it (SingleStream: 4-7% off Lite0's latency)."""
    shape = model.input(0).get_partial_shape()
    dims = [ov.Dimension(batch)] + [shape[i] for i in range(1, shape.rank.get_length())]
    model.reshape({model.input(0): ov.PartialShape(dims)})
