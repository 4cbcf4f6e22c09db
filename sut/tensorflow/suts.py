"""TensorFlow's SUTs as plain data (read by ``sut.registry``; imports no framework).

``tf-fp32``, ``tf-xla`` and ``tf-amp`` run the SavedModel onnx2tf makes of the canonical ONNX
(``models.saved_model``) in ``backend``; on the GPU when TensorFlow sees one.
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, SutInfo

_TF = ("tensorflow", "onnx2tf")
_DEVICE = "runs on the GPU when TensorFlow sees one (describe() reports where the ops ran)"


def _cpu(name: str, precision: str, key: str, note: str = "",
         proof: tuple[str, ...] | None = None) -> SutInfo:
    return SutInfo(name, "tensorflow", precision, "cpu", "tf", _TF, ".backend:create", note,
                   precision_key=key, proof=proof)


FRAMEWORK = FrameworkInfo(
    name="tensorflow",
    suts=(
        _cpu("tf-fp32", "fp32", "fp32"),
        _cpu("tf-xla", "fp32 XLA", "fp32", _DEVICE),
        # grappler's rewrite: bf16 nodes through oneDNN on the CPU, fp16 on a GPU
        _cpu("tf-amp", "mixed (bf16 CPU / fp16 GPU)", "mixed", _DEVICE, ("bf16", "fp16")),
        SutInfo("tftrt-fp16", "tensorflow-tensorrt", "fp16", "gpu", "tf", _TF, None,
                precision_key="fp16",
                unavailable="TF-TRT was removed after TensorFlow 2.17; TensorFlow >= 2.18 has "
                            "no TensorRT"),
    ),
    # the "tf" extra installs "tensorflow"; older installs may have "tensorflow-cpu"
    distributions=("tensorflow", "tensorflow-cpu"),
    fp32_baseline="tf-fp32",
    variant_order=("fp32", "xla", "amp"),
    rank=50,
    model_folders=True,
    nms=".nms:create",
)
