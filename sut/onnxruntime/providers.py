"""The GPU SUTs' execution-provider options (CUDA, TensorRT), and which CUDA stream a session
built with them runs on: co-located SUTs (ensemble members) on one shared stream would
serialise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.sut.info import SutInfo
from quantmark.sut.onnxruntime.suts import CUDA_EP, TRT_EP
from quantmark.sut.registry import module_sut

CPU_EP = "CPUExecutionProvider"
#: the module whose factory builds the GPU SUTs (their registry entries name it)
GPU_MODULE = "quantmark.sut.onnxruntime.gpu"

#: CUDA provider options that give a session one provider-level stream instead of a pool
#: (cuda_execution_provider.cc: either one sets use_ep_level_unified_stream_)
UNIFIED_STREAM_OPTIONS = ("use_ep_level_unified_stream", "enable_cuda_graph")
OWN_STREAMS = ("own (ONNX Runtime's per-session stream pool: non-blocking CUDA streams, one per "
               "concurrent Run)")


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() not in ("", "0", "false", "none")


def cuda_stream_policy(providers: list[Any]) -> str:
    """Which CUDA stream a session built with ``providers`` runs on, from the documented
    provider options that decide it: a caller's ``user_compute_stream`` (shared by whoever
    passes it), one provider-level stream (``use_ep_level_unified_stream``, CUDA graphs), or by
    default ONNX Runtime's own non-blocking streams per session."""
    options = [p[1] for p in providers if isinstance(p, tuple) and p[0] in (CUDA_EP, TRT_EP)]
    for option in options:
        stream = option.get("user_compute_stream")
        if stream is not None and _truthy(stream):
            return f"user (user_compute_stream={stream}): shared with whoever else passes it"
    if any(_truthy(option.get(key, "")) for option in options for key in UNIFIED_STREAM_OPTIONS):
        return "own (one non-blocking CUDA stream per provider instance: EP-level unified)"
    return OWN_STREAMS


# --------------------------------------------------------------------------- provider options

def gpu_sut(name: str) -> SutInfo:
    """The registry entry of the GPU SUT ``name``; any other name gets one line listing them."""
    return module_sut(name, GPU_MODULE)


def requested_provider(name: str) -> str:
    """The execution provider ``name`` must run on: its entry's GPU build
    ("ort:CUDAExecutionProvider")."""
    return gpu_sut(name).gpu_build.partition(":")[2]


def cuda_options(scenario: str = "Offline", device_id: int = 0) -> dict[str, str]:
    """The CUDA provider's options: TF32 off (FP32 stays FP32), cuDNN's exhaustive search
    except for Server, whose batches of any size would each search inside the measurement."""
    # do_copy_in_default_stream: copies on the session's own compute stream, not CUDA's legacy
    # default stream ("0": separate copy streams, documented as racy, onnxruntime issue #4829)
    return {"device_id": str(device_id),
            "cudnn_conv_algo_search": "HEURISTIC" if scenario == "Server" else "EXHAUSTIVE",
            "do_copy_in_default_stream": "1", "use_tf32": "0"}


def trt_options(name: str, *, input_name: str, sample_shape: tuple[int, ...],
                batch_range: tuple[int, int], cache_dir: str | Path,
                calibration_table: str | Path | None = None,
                device_id: int = 0) -> dict[str, str]:
    """The TensorRT provider's options for ``ort-trt-fp16`` / ``ort-trt-int8``.

    ``sample_shape``: one sample's input shape without the batch dimension; ``batch_range``:
    (smallest, largest) batch the engine's optimisation profile covers (optimised for the
    largest); ``calibration_table``: ONNX Runtime's flatbuffers table (calibrator route) or None
    (QDQ model: its scales are in the graph, and TensorRT refuses a table next to Q/DQ nodes).
    """
    if requested_provider(name) != TRT_EP:
        raise UserError(f"{name} does not run on the TensorRT execution provider")
    precision = gpu_sut(name).precision_key
    dims = "x".join(str(int(d)) for d in sample_shape)
    low, high = batch_range
    options = {
        "device_id": str(device_id),
        "trt_fp16_enable": "True",  # fp16, and int8's fallback for layers kept out of INT8
        "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache_dir),
        "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(cache_dir),
        "trt_profile_min_shapes": f"{input_name}:{low}x{dims}",
        "trt_profile_opt_shapes": f"{input_name}:{high}x{dims}",
        "trt_profile_max_shapes": f"{input_name}:{high}x{dims}",
    }
    if precision == "int8":
        options["trt_int8_enable"] = "True"
        if calibration_table is not None:
            options["trt_int8_calibration_table_name"] = str(calibration_table)
            options["trt_int8_use_native_calibration_table"] = "False"
    return options


def provider_options(name: str, *, scenario: str = "Offline", input_name: str = "input",
                     sample_shape: tuple[int, ...] = (3, 224, 224),
                     batch_range: tuple[int, int] = (1, 1), cache_dir: str | Path = ".",
                     calibration_table: str | Path | None = None,
                     device_id: int = 0) -> list[Any]:
    """The ``providers`` list for ``InferenceSession``: the requested provider first, then the
    CUDA provider (TensorRT SUTs: for nodes TensorRT does not take), then the CPU provider last
    (ONNX Runtime needs it for host-side nodes; the placement check refuses compute nodes that
    land there)."""
    provider = requested_provider(name)
    cuda = (CUDA_EP, cuda_options(scenario, device_id))
    if provider == CUDA_EP:
        return [cuda, CPU_EP]
    trt = trt_options(name, input_name=input_name, sample_shape=sample_shape,
                      batch_range=batch_range, cache_dir=cache_dir,
                      calibration_table=calibration_table, device_id=device_id)
    return [(TRT_EP, trt), cuda, CPU_EP]
