"""A planted slow layer for ``run.py profile``'s tests: a copy of a real FP32 ONNX model in
which one convolution does many times its work and computes exactly the same function (its
kernel grown with zeros, its padding grown to match), under the same node name."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the built-in model the planted tests use, and the convolution they slow down
MODEL = "digits-cnn"
SLOWED = "node_conv2d_1"


def original_onnx(model: str = MODEL) -> Path:
    """The canonical FP32 ONNX of a built-in model, as every SUT of a run gets it."""
    from quantmark.diagnosis.profile_run import ProfileConfig
    from quantmark.models.source import fp32_onnx
    from quantmark.models.workload import resolve_spec

    return Path(fp32_onnx(resolve_spec(ProfileConfig(model=model, sut="ort-fp32"))).path)


def plant_slow_conv(source: Path, out: Path, node: str = SLOWED, size: int = 15) -> Path:
    """Write ``source`` with the convolution ``node``'s kxk kernel zero-padded to
    ``size`` x ``size`` (padding grown by the same amount: the output is unchanged, the work
    is (size/k)^2 times)."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load(str(source))
    conv = next(n for n in proto.graph.node if n.name == node)
    weight = next(t for t in proto.graph.initializer if t.name == conv.input[1])
    kernel = numpy_helper.to_array(weight)
    grow = (size - kernel.shape[-1]) // 2
    big = np.zeros((*kernel.shape[:2], size, size), dtype=kernel.dtype)
    big[..., grow:grow + kernel.shape[-2], grow:grow + kernel.shape[-1]] = kernel
    weight.CopyFrom(numpy_helper.from_array(big, weight.name))
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    pads = [p + grow for p in attrs.get("pads", [0, 0, 0, 0])]
    del conv.attribute[:]
    conv.attribute.extend(helper.make_attribute(name, value) for name, value in {
        **attrs, "pads": pads, "kernel_shape": [size, size]}.items())
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))
    return out
