"""PyTorch's SUTs as plain data (read by ``sut.registry``; imports no framework).

On the CPU (``backend``): eager FP32, bf16 autocast, x86 static and dynamic INT8 (``quantize``)
and torch.compile; on an NVIDIA GPU (``cuda``): FP32, FP16, BF16, compiled with CUDA graphs, and
torchao's INT8.
"""

from __future__ import annotations

from quantmark.sut.info import FrameworkInfo, Options, SutInfo

_TORCH = ("torch",)
# torch-cuda-compile: CUDA graphs captured over the compiled model, or plain compiled calls
CUDA_GRAPHS_OPTION = "cuda_graphs"
TORCH_CUDA_GRAPHS = ("on", "off")
_TORCHAO_HINT = (("torchao", "needs torchao (pip install torchao) and a CUDA GPU"),)


# the evidence of a dynamically quantized layer is an int8 one
_INTEGER = ("int8",)


def _cpu(name: str, precision: str, key: str, proof: tuple[str, ...] | None = None) -> SutInfo:
    return SutInfo(name, "torch", precision, "cpu", "torch", _TORCH, ".backend:create",
                   precision_key=key, proof=proof)


def _cuda(name: str, precision: str, key: str, requires: tuple[str, ...] = _TORCH,
          extra: str = "torch-cuda", options: Options = (),
          missing_hints: tuple[tuple[str, str], ...] = (),
          distributions: tuple[str, ...] = (), proof: tuple[str, ...] | None = None) -> SutInfo:
    return SutInfo(name, "torch", precision, "gpu", extra, requires, ".cuda:create",
                   options=options, gpu_build="torch:cuda", missing_hints=missing_hints,
                   distributions=distributions, precision_key=key, proof=proof)


FRAMEWORK = FrameworkInfo(
    name="torch",
    suts=(
        _cpu("torch-fp32", "fp32", "fp32"),
        _cpu("torch-bf16", "bf16 autocast", "bf16"),
        _cpu("torch-int8", "int8 static (x86)", "int8"),
        _cpu("torch-int8dyn", "int8 dynamic", "int8dyn", _INTEGER),
        _cpu("torch-compile", "fp32 torch.compile", "fp32"),  # variant "compile"
        _cuda("torch-cuda-fp32", "fp32 (TF32 off)", "fp32"),
        _cuda("torch-cuda-fp16", "fp16 (model and input .half())", "fp16"),
        _cuda("torch-cuda-bf16", "bf16 (model and input bfloat16)", "bf16"),
        _cuda("torch-cuda-compile", "fp32 torch.compile + CUDA graphs", "fp32",
              options=((CUDA_GRAPHS_OPTION, TORCH_CUDA_GRAPHS),)),
        # torchao's Int8DynamicActivationInt8Weight: activations quantized per call
        _cuda("torch-cuda-int8", "int8 dynamic (torchao, Linear layers)", "int8dyn",
              ("torch", "torchao"), "torchao", missing_hints=_TORCHAO_HINT,
              distributions=("torch", "torchao"), proof=_INTEGER),
    ),
    distributions=("torch",),
    fp32_baseline="torch-fp32",
    gpu_fp32_baseline="torch-cuda-fp32",
    variant_order=("fp32", "fp16", "bf16", "int8", "int8dyn", "compile"),
    rank=40,
    # torch's NMS op is torchvision.ops.nms, and quantmark does not depend on torchvision:
    # a detector's NMS is the shared numpy one
    no_nms="torch has no NMS op without torchvision",
)
