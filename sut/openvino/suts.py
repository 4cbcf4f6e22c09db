"""OpenVINO's SUTs as plain data (read by ``sut.registry``; imports no framework).

``ov-fp32``, ``ov-bf16``, ``ov-fp16`` and ``ov-int8`` (NNCF) on the CPU plugin (``backend``),
compiled from the IR ``convert`` makes of the canonical FP32 ONNX.
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, OptionScope, SutInfo

_OV = ("openvino", "nncf")
# how batches reach the compiled model: one synchronous InferRequest per worker thread, or
# OpenVINO's AsyncInferQueue fed by one thread (its optimal number of requests in flight)
OV_API_OPTION = "ov_api"
OV_APIS = ("sync", "async")
# the CPU plugin's streams (NUM_STREAMS; each runs one infer request at a time, and OpenVINO's
# optimal number of requests follows them): "auto" leaves them to the performance hint
OV_STREAMS_OPTION = "ov_streams"
OV_STREAMS = ("auto", "1", "2", "4", "8")
# SingleStream predicts inline on LoadGen's thread, one request at a time: neither the API nor a
# second stream can change it
_QUEUED = OptionScope(scenarios=("MultiStream", "Offline", "Server"))


def _cpu(name: str, precision: str, key: str) -> SutInfo:
    return SutInfo(name, "openvino", precision, "cpu", "openvino", _OV, ".backend:create",
                   options=((OV_API_OPTION, OV_APIS), (OV_STREAMS_OPTION, OV_STREAMS)),
                   option_scopes=((OV_API_OPTION, _QUEUED), (OV_STREAMS_OPTION, _QUEUED)),
                   precision_key=key)


FRAMEWORK = FrameworkInfo(
    name="openvino",
    # ov-fp16's proof is fp16 alone: a CPU without FP16 arithmetic runs the hint as bf16,
    # which the backend reports with a note rather than as proof
    suts=(_cpu("ov-fp32", "fp32", "fp32"), _cpu("ov-bf16", "bf16", "bf16"),
          _cpu("ov-fp16", "fp16", "fp16"), _cpu("ov-int8", "int8 (NNCF)", "int8")),
    distributions=("openvino",),
    fp32_baseline="ov-fp32",
    variant_order=("fp32", "fp16", "bf16", "int8"),
    rank=20,
    nms=".nms:create",
)
