"""CUDA runtime calls for the TensorRT code, through cuda-python's bindings.

Not torch: quantmark's torch is the CPU wheel, torch's CUDA build is a ~2 GB dependency for a
few allocations, and cuda-python is NVIDIA's small companion package to the TensorRT Python API.
"""

from __future__ import annotations

from typing import Any

from quantmark.ground.errors import SutError, UserError


def cuda_runtime() -> Any:
    """cuda-python's CUDA runtime bindings (``cuda.bindings.runtime``; ``cuda.cudart`` in
    releases before 12.8, removed in 13)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime  # type: ignore[no-redef]
        except ImportError:
            raise UserError("the TensorRT SUTs need cuda-python for device buffers and "
                            "streams: pip install 'quantmark[trt]'") from None
    return runtime


def cuda_call(result: Any) -> Any:
    """cuda-python returns ``(error, *values)``: raise SutError on an error, else the value(s)."""
    error, *values = result if isinstance(result, tuple) else (result,)
    runtime = cuda_runtime()
    if error != runtime.cudaError_t.cudaSuccess:
        text = runtime.cudaGetErrorString(error)
        text = text[1] if isinstance(text, tuple) else text
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise SutError(f"CUDA error {getattr(error, 'name', error)}: {text}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


#: cudaStreamNonBlocking (CUDA runtime API): no implicit synchronisation with stream 0
STREAM_NON_BLOCKING = 0x01


def create_stream(runtime: Any) -> Any:
    """A CUDA stream of the caller's own, created non-blocking.

    ``cudaStreamCreate`` makes a blocking stream, which the CUDA runtime implicitly
    synchronises with the legacy default stream (stream 0): any work another library in the
    process queues there (torch's default stream, a plain ``cudaMemcpy``, ONNX Runtime's
    end-of-run sync on its null provider stream) would then serialise with this stream.
    ``cudaStreamNonBlocking`` "may run concurrently with work in stream 0 ... and should
    perform no implicit synchronization with stream 0" (``cudaStreamCreateWithFlags``)."""
    flags = getattr(runtime, "cudaStreamNonBlocking", STREAM_NON_BLOCKING)
    return cuda_call(runtime.cudaStreamCreateWithFlags(flags))


def native_handle(obj: Any) -> int:
    """The raw address of a cuda-python object (a stream) as TensorRT takes it."""
    try:
        from cuda.bindings.utils import get_cuda_native_handle
    except ImportError:  # before cuda-python 13, int() gives the address
        return int(obj)
    return int(get_cuda_native_handle(obj))


def gpu_identity() -> tuple[str, str]:
    """(GPU name, compute capability "sm_XY") of the current CUDA device."""
    runtime = cuda_runtime()
    device = cuda_call(runtime.cudaGetDevice())
    props = cuda_call(runtime.cudaGetDeviceProperties(device))
    name = props.name
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return name.rstrip("\x00").strip(), f"sm_{props.major}{props.minor}"
