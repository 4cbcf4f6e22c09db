"""TFLite's SUTs as plain data (read by ``sut.registry``; imports no framework).

``tflite-fp32``, ``tflite-fp16``, ``tflite-int8dyn`` and ``tflite-int8`` run on LiteRT
(ai-edge-litert) with XNNPACK (``backend``); ``convert`` makes the .tflite files with
TensorFlow's converter from the shared SavedModel (``models.saved_model``).
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, OptionScope, SutInfo

# the batch in one invoke, or one invoke per sample at batch 1
TFLITE_INVOKE_OPTION = "tflite_invoke"
TFLITE_INVOKE_MODES = ("batched", "per-sample")
# where a full-integer model's float input is quantized: when LoadGen loads the samples
# (untimed, as litert-benchmark feeds int8), or in every predict (the old, timed path)
TFLITE_QUANTIZE_OPTION = "tflite_quantize"
TFLITE_QUANTIZE_PLACES = ("at-load", "per-call")
# where each can change the speed: at batch 1 one invoke per sample is the batch's one invoke;
# only a full-integer model's input is quantized
TFLITE_OPTION_SCOPES = ((TFLITE_INVOKE_OPTION, OptionScope(min_batch=2)),
                        (TFLITE_QUANTIZE_OPTION, OptionScope(precision_keys=("int8",))))


def _cpu(name: str, precision: str, key: str) -> SutInfo:
    # the proof is the model file's precision class (inspection.file_precision), the key itself
    return SutInfo(name, "tflite", precision, "cpu", "tflite", ("ai_edge_litert",),
                   ".backend:create", options=((TFLITE_INVOKE_OPTION, TFLITE_INVOKE_MODES),
                                               (TFLITE_QUANTIZE_OPTION, TFLITE_QUANTIZE_PLACES)),
                   option_scopes=TFLITE_OPTION_SCOPES, precision_key=key)


FRAMEWORK = FrameworkInfo(
    name="tflite",
    suts=(_cpu("tflite-fp32", "fp32", "fp32"), _cpu("tflite-fp16", "fp16 weights", "fp16"),
          _cpu("tflite-int8dyn", "int8 dynamic range", "int8dyn"),
          _cpu("tflite-int8", "int8 full integer", "int8")),
    distributions=("ai-edge-litert",),
    fp32_baseline="tflite-fp32",
    variant_order=("fp32", "fp16", "int8", "int8dyn"),
    pip_names={"ai_edge_litert": "ai-edge-litert"},
    rank=30,
    model_folders=True,
    nms=".nms:create",
)
