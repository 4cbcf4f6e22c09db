"""Where every framework's artifact starts: the canonical FP32 model of a ``ModelSpec``.

The canonical source of a model is its torch network and weights (built-in seeded random
weights, the shipped pretrained Lite0, or a user's state_dict). It is exported once to FP32
ONNX with torch's own exporter; every other framework converts from that file with its own
converter (OpenVINO's ``convert_model``, onnx2tf then TensorFlow's TFLite converter), so all
SUTs of a model compute the same function. A user may also hand in an ONNX file directly.
"""

from __future__ import annotations

from pathlib import Path

from quantmark.models.artifacts import Artifact

TORCH_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin")


def is_torch_weights(model_path: str | Path | None) -> bool:
    """A torch state_dict file: the canonical weights, converted for every framework."""
    return model_path is not None and str(model_path).endswith(TORCH_WEIGHT_SUFFIXES)


def fp32_onnx(spec, model_path: str | Path | None = None) -> Artifact:
    """The FP32 ONNX artifact: exported from torch (built-in or user weights) or a user .onnx.

    ``model_path`` must be None, a torch state_dict (.pt/.pth/.bin) or an .onnx file; callers
    check other native formats (OpenVINO .xml, SavedModel, .tflite) before calling this.
    """
    from quantmark.models.onnx_export import export_onnx, load_user_onnx

    if model_path is not None and str(model_path).endswith(".onnx"):
        return load_user_onnx(model_path, spec)
    return export_onnx(spec, model_path)
