"""The built-in detection workload, made offline: COCO-format canvases of real handwritten digit
scans (``canvases``) and ``digits-detect``, a small detector quantmark trains on them at first
use and exports as Ultralytics exports YOLO (``detector``). Not COCO, not a pretrained YOLO: no
installed package ships either, and nothing may be downloaded."""

from .canvases import (
    CATEGORY_IDS,
    DESCRIPTION,
    builtin_detection_identity,
    builtin_detection_root,
)
from .detector import (
    INPUT_SIZE,
    MODEL_NAME,
    NUM_CLASSES,
    builtin_detector_module,
    builtin_detector_onnx,
    trained_identity,
)

__all__ = ["CATEGORY_IDS", "DESCRIPTION", "INPUT_SIZE", "MODEL_NAME", "NUM_CLASSES",
           "builtin_detection_identity", "builtin_detection_root", "builtin_detector_module",
           "builtin_detector_onnx", "trained_identity"]
