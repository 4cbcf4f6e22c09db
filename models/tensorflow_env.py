"""Whether TensorFlow and its ONNX converter are here, and which TensorFlow: read by the
SavedModel recipes (``saved_model``, ``text_saved_model``) without importing TensorFlow."""

from __future__ import annotations

import importlib.util

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version


def tensorflow_version() -> str:
    """TensorFlow's version from package metadata (importing TF costs seconds); the "tf"
    extra installs ``tensorflow``, older installs may have ``tensorflow-cpu``."""
    for dist in ("tensorflow", "tensorflow-cpu"):
        if (found := dist_version(dist)) != "absent":
            return found
    return "absent"


def require_tensorflow(what: str) -> None:
    """One clear line when the converters are missing (TFLite-only installs, e.g. a Pi)."""
    missing = [m for m in ("tensorflow", "onnx2tf") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"{what} needs {' and '.join(missing)} to convert the model: "
                        "pip install 'quantmark[tf]', or pass a ready model with --model-path")
