"""TensorRT SUTs: everything that needs no GPU runs here on CPU (cache keys, batch profiles,
calibration batching and its cache file, buffer planning, inspector parsing, and the backend's
context pool driven by stand-ins for TensorRT and the CUDA runtime); the real engine test needs
TensorRT and an NVIDIA GPU and says why it skips."""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.models.artifacts import Artifact
from quantmark.models.qdq import qdq_onnx_for_tensorrt
from quantmark.sut.interface import SutOptions
from quantmark.sut.tensorrt import backend as trt_sut
from quantmark.sut.tensorrt import build as trt_build
from quantmark.sut.tensorrt import calibration as trt_calibration
from quantmark.sut.tensorrt import cuda_runtime
from quantmark.sut.tensorrt.backend import TensorRTBackend, layer_precisions, plan_buffers
from quantmark.sut.tensorrt.build import BatchProfile, engine_cache_key
from quantmark.sut.tensorrt.calibration import (
    CalibrationBatcher,
    CalibrationCache,
    calibration_cache_path,
)
from tests.sut.side_by_side import predict_side_by_side
from tests.sut.tensorrt import gpu_skip_reason

# --------------------------------------------------------------------------- cache keys

KEY_ARGS = dict(onnx_key="onnx0", precision="int8", profile=BatchProfile(1, 8, 8),
                trt_version="10.13.0.35", gpu_name="NVIDIA H100 80GB HBM3",
                compute_capability="sm_90", calibration_hash="calib0", route="calibrator")
KEY_CHANGES = dict(onnx_key="onnx1", precision="fp16", profile=BatchProfile(1, 16, 16),
                   trt_version="10.14.1.48", gpu_name="NVIDIA H200",
                   compute_capability="sm_89", calibration_hash="calib1", route="qdq")


def test_engine_key_is_stable():
    assert engine_cache_key(**KEY_ARGS) == engine_cache_key(**dict(KEY_ARGS))
    assert engine_cache_key(**{**KEY_ARGS, "profile": BatchProfile(1, 8, 8)}) == \
        engine_cache_key(**KEY_ARGS)


@pytest.mark.parametrize("field", sorted(KEY_CHANGES))
def test_engine_key_changes_with_each_field(field):
    assert engine_cache_key(**{**KEY_ARGS, field: KEY_CHANGES[field]}) != \
        engine_cache_key(**KEY_ARGS)


def test_engine_key_changes_with_calibration_presence_and_profile_bounds():
    base = engine_cache_key(**KEY_ARGS)
    assert engine_cache_key(**{**KEY_ARGS, "calibration_hash": None}) != base
    assert engine_cache_key(**{**KEY_ARGS, "profile": BatchProfile(2, 8, 8)}) != base
    assert engine_cache_key(**{**KEY_ARGS, "profile": BatchProfile(1, 8, 16)}) != base
    with pytest.raises(ValueError, match="precision"):
        engine_cache_key(**{**KEY_ARGS, "precision": "int4"})


def test_calibration_cache_path_is_keyed(private_cache):
    args = ("digits-cnn", "onnx0", "calib0", "10.13.0.35")
    path = calibration_cache_path(*args)
    assert path == calibration_cache_path(*args)
    assert path.is_relative_to(private_cache) and path.parent.name == "trt-calibration"
    assert calibration_cache_path("digits-cnn", "onnx0", "calib1", "10.13.0.35") != path
    assert calibration_cache_path("digits-cnn", "onnx0", "calib0", "10.14.0") != path
    assert calibration_cache_path("digits-cnn", "onnx1", "calib0", "10.13.0.35") != path
    assert calibration_cache_path(*args, batch_size=16) != path


# --------------------------------------------------------------------------- batch profile

@pytest.mark.parametrize("scenario, batch, expected", [
    ("SingleStream", 1, (1, 1, 1)),
    ("SingleStream", 8, (1, 1, 1)),
    ("Offline", 32, (1, 32, 32)),
    ("MultiStream", 8, (1, 8, 8)),
    ("Server", 4, (1, 4, 4)),
    ("Offline", 1, (1, 1, 1)),
])
def test_batch_profile_per_scenario(scenario, batch, expected):
    profile = BatchProfile.for_run(scenario, batch)
    assert (profile.min, profile.opt, profile.max) == expected


def test_batch_profile_shapes_and_bounds():
    profile = BatchProfile(1, 8, 16)
    assert profile.shapes((3, 224, 224)) == ((1, 3, 224, 224), (8, 3, 224, 224),
                                            (16, 3, 224, 224))
    assert profile.to_json() == {"min": 1, "opt": 8, "max": 16}
    for bad in ((0, 1, 1), (2, 1, 4), (1, 8, 4)):
        with pytest.raises(ValueError):
            BatchProfile(*bad)
    with pytest.raises(ValueError):
        BatchProfile.for_run("Offline", 0)


# --------------------------------------------------------------------------- calibration

def _samples(count: int) -> np.ndarray:
    """[count, 3, 2, 2] where every value of sample i is i."""
    return np.repeat(np.arange(count, dtype=np.float32), 12).reshape(count, 3, 2, 2)


def _drain(batcher: CalibrationBatcher) -> list[np.ndarray]:
    batches = []
    while (batch := batcher.next_batch()) is not None:
        batches.append(batch)
    return batches


def test_batcher_serves_exact_batches_and_pads_the_last_by_wrapping():
    batcher = CalibrationBatcher(_samples(10), batch_size=4)
    assert (batcher.total_batches, batcher.padded) == (3, 2)
    batches = _drain(batcher)
    assert [len(b) for b in batches] == [4, 4, 4]
    assert [b[:, 0, 0, 0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7],
                                                         [8, 9, 0, 1]]
    assert batcher.served == 3
    assert batcher.next_batch() is None and batcher.next_batch() is None  # stays exhausted
    batcher.reset()
    assert batcher.next_batch()[:, 0, 0, 0].tolist() == [0, 1, 2, 3]


def test_batcher_exact_multiple_has_no_padding():
    batcher = CalibrationBatcher(_samples(8), batch_size=4)
    assert (batcher.total_batches, batcher.padded) == (2, 0)
    assert len(_drain(batcher)) == 2


def test_batcher_set_smaller_than_a_batch_is_repeated():
    batches = _drain(CalibrationBatcher(_samples(3), batch_size=8))
    assert len(batches) == 1
    assert batches[0][:, 0, 0, 0].tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


def test_batcher_gives_contiguous_float32():
    data = _samples(6).astype(np.float64).transpose(0, 1, 3, 2)  # float64, not contiguous
    assert not data.flags.c_contiguous
    batcher = CalibrationBatcher(data, batch_size=4)
    assert batcher.sample_shape == (3, 2, 2) and batcher.batch_nbytes == 4 * 12 * 4
    for batch in _drain(batcher):
        assert batch.dtype == np.float32 and batch.flags.c_contiguous
        assert batch.nbytes == batcher.batch_nbytes


def test_batcher_rejects_bad_input():
    with pytest.raises(ValueError):
        CalibrationBatcher(_samples(4), batch_size=0)
    with pytest.raises(ValueError):
        CalibrationBatcher(np.zeros((0, 3, 2, 2), np.float32))


def test_calibration_cache_written_then_reused(private_cache):
    path = calibration_cache_path("digits-cnn", "onnx0", "calib0", "10.13.0.35")
    first = CalibrationCache(path)
    assert first.read() is None and not first.hit  # first build: calibrate
    first.write(memoryview(b"TRT-100-EntropyCalibration2\ninput: 3c010a14\n"))
    assert first.written and path.is_file()
    second = CalibrationCache(path)  # second build: TensorRT gets the cache, skips calibration
    assert second.read() == b"TRT-100-EntropyCalibration2\ninput: 3c010a14\n"
    assert second.hit and not second.written
    path.write_bytes(b"")  # an empty file is no cache
    assert CalibrationCache(path).read() is None


# --------------------------------------------------------------------------- stand-ins

class FakeRuntime:
    """The slice of cuda-python's runtime the SUT uses, on host memory (ctypes buffers)."""

    class cudaError_t:  # noqa: N801 - cuda-python's names
        cudaSuccess = 0

    class cudaMemcpyKind:  # noqa: N801
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    cudaStreamNonBlocking = 1  # noqa: N815

    def __init__(self) -> None:
        self.buffers: dict[int, ctypes.Array] = {}
        self.copies: list[tuple[int, int]] = []  # (kind, bytes)
        self.copy_streams: list[int] = []
        self.streams = 0
        self.stream_flags: list[int] = []
        self.lock = threading.Lock()

    def _alloc(self, nbytes: int):
        buffer = ctypes.create_string_buffer(nbytes)
        with self.lock:
            self.buffers[ctypes.addressof(buffer)] = buffer
        return (0, ctypes.addressof(buffer))

    cudaMalloc = cudaMallocHost = _alloc  # noqa: N815

    def cudaFree(self, pointer):  # noqa: N802
        with self.lock:
            self.buffers.pop(pointer)
        return (0,)

    cudaFreeHost = cudaFree  # noqa: N815

    def cudaMemcpy(self, dst, src, nbytes, kind):  # noqa: N802
        ctypes.memmove(dst, src, nbytes)
        with self.lock:
            self.copies.append((kind, nbytes))
        return (0,)

    def cudaMemcpyAsync(self, dst, src, nbytes, kind, stream):  # noqa: N802
        with self.lock:
            self.copy_streams.append(stream)
        return self.cudaMemcpy(dst, src, nbytes, kind)

    def cudaStreamCreateWithFlags(self, flags):  # noqa: N802 - no cudaStreamCreate: blocking
        with self.lock:
            self.streams += 1
            self.stream_flags.append(flags)
            return (0, 100 + self.streams)

    def cudaStreamDestroy(self, stream):  # noqa: N802
        return (0,)

    def cudaStreamSynchronize(self, stream):  # noqa: N802
        return (0,)


CLASSES = 4


def _inspector_json(precision: str) -> str:
    kind = {"fp32": "Row major linear FP32 format", "fp16": "Channel major FP16 format where "
            "channel % 8 == 0", "int8": "Four wide channel vectorized row major Int8 format"}
    return json.dumps({"Layers": [
        {"Name": "conv1", "LayerType": "CaskConvolution",
         "Inputs": [{"Name": "input", "Format/Datatype": kind[precision]}]},
        {"Name": "fc", "LayerType": "CaskGemmConvolution",
         "Inputs": [{"Name": "x", "Format/Datatype": kind[precision]}]},
    ], "Bindings": ["input", "logits"]})


class FakeContext:
    """Executes 'logits[i, c] = sum(input[i]) + c' by reading and writing the bound memory."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine, self.addresses, self.shape = engine, {}, None
        self.stream_handles: set[int] = set()

    def set_tensor_address(self, name, pointer):
        self.addresses[name] = pointer

    def set_input_shape(self, name, shape):
        if not 1 <= shape[0] <= self.engine.max_batch:
            return False
        self.shape = tuple(shape)
        return True

    def execute_async_v3(self, stream_handle):
        self.stream_handles.add(stream_handle)
        n = self.shape[0]
        count = int(np.prod(self.shape))
        data = np.frombuffer((ctypes.c_float * count).from_address(self.addresses["input"]),
                             np.float32).reshape(self.shape)
        out = np.frombuffer((ctypes.c_float * (n * CLASSES)).from_address(
            self.addresses["logits"]), np.float32).reshape(n, CLASSES)
        out[:] = data.reshape(n, -1).sum(axis=1, keepdims=True) + np.arange(CLASSES)
        self.engine.executions.append(n)
        return True


class FakeEngine:
    def __init__(self, sample_shape, max_batch, precision) -> None:
        self.sample_shape, self.max_batch, self.precision = sample_shape, max_batch, precision
        self.executions: list[int] = []
        self.inspector = types.SimpleNamespace(
            execution_context=None,
            get_engine_information=lambda fmt: _inspector_json(self.precision))
        self.num_io_tensors = 2

    def get_tensor_name(self, index):
        return ("input", "logits")[index]

    def get_tensor_mode(self, name):
        return "INPUT" if name == "input" else "OUTPUT"

    def get_tensor_dtype(self, name):
        return np.float32

    def get_tensor_shape(self, name):
        return (-1, *self.sample_shape) if name == "input" else (-1, CLASSES)

    def create_execution_context(self):
        return FakeContext(self)

    def create_engine_inspector(self):
        return self.inspector


def _fake_tensorrt(engine: FakeEngine) -> types.ModuleType:
    module = types.ModuleType("tensorrt")
    module.__version__ = "10.99.0"
    module.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, level: None})
    module.Runtime = lambda logger: types.SimpleNamespace(
        deserialize_cuda_engine=lambda data: engine)
    module.TensorIOMode = types.SimpleNamespace(INPUT="INPUT", OUTPUT="OUTPUT")
    module.LayerInformationFormat = types.SimpleNamespace(JSON="JSON")
    module.nptype = lambda dtype: dtype
    module.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (),
                                          {"__init__": lambda self: None})
    return module


@pytest.fixture
def fake_gpu(monkeypatch):
    """Stand-ins for tensorrt and cuda-python's runtime (host memory, synchronous copies)."""
    runtime = FakeRuntime()
    monkeypatch.setattr(cuda_runtime, "cuda_runtime", lambda: runtime)

    def install(engine: FakeEngine) -> FakeRuntime:
        monkeypatch.setitem(sys.modules, "tensorrt", _fake_tensorrt(engine))
        return runtime

    return install


def _engine_artifact(tmp_path: Path, precision: str, profile: BatchProfile) -> Artifact:
    plan = tmp_path / f"fake-{precision}.plan"
    plan.write_bytes(b"plan")
    return Artifact(path=plan, format="tensorrt", precision=precision, key="k", weights="w",
                    source_hash="s", meta={"profile": profile.to_json(), "tensorrt": "10.99.0",
                                           "gpu": "Fake GPU", "label_offset": 1,
                                           "output_name": "logits"})


def test_entropy_calibrator_feeds_batches_and_uses_the_cache(fake_gpu, private_cache):
    runtime = fake_gpu(FakeEngine((3, 2, 2), 1, "int8"))
    path = calibration_cache_path("digits-cnn", "onnx0", "calib0", "10.99.0")
    batcher = CalibrationBatcher(_samples(10), batch_size=4)
    calibrator = trt_calibration.make_entropy_calibrator(batcher, CalibrationCache(path))
    assert calibrator.get_batch_size() == 4 and calibrator.read_calibration_cache() is None
    fed = []
    while (pointers := calibrator.get_batch(["input"])) is not None:
        device = np.frombuffer((ctypes.c_float * 48).from_address(pointers[0]), np.float32)
        fed.append(device.reshape(4, 3, 2, 2)[:, 0, 0, 0].tolist())
    assert fed == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    calibrator.write_calibration_cache(b"scales")
    calibrator.free()
    assert not runtime.buffers  # the device batch buffer is released
    again = trt_calibration.make_entropy_calibrator(CalibrationBatcher(_samples(10), 4),
                                              CalibrationCache(path))
    assert again.read_calibration_cache() == b"scales"
    again.free()


# --------------------------------------------------------------------------- buffer planning

def test_plan_buffers_sizes_per_dtype():
    plans = plan_buffers([("input", "input", np.float32, (-1, 3, 224, 224)),
                          ("half", "output", np.float16, (-1, 1000)),
                          ("codes", "output", np.int8, (-1, 1000)),
                          ("fixed", "output", "float32", (2, 10))], batch=8)
    sizes = {plan.name: (plan.shape, plan.nbytes, plan.is_input) for plan in plans}
    assert sizes == {"input": ((8, 3, 224, 224), 8 * 3 * 224 * 224 * 4, True),
                     "half": ((8, 1000), 8 * 1000 * 2, False),
                     "codes": ((8, 1000), 8 * 1000, False),
                     "fixed": ((2, 10), 80, False)}
    assert plans[0].row_nbytes == 3 * 224 * 224 * 4


def test_plan_buffers_refuses_what_it_cannot_size():
    for shape in ((-1, -1, 224, 224), (), (0, 10)):
        with pytest.raises(ValueError):
            plan_buffers([("x", "input", np.float32, shape)], batch=4)
    with pytest.raises(ValueError):
        plan_buffers([("x", "sideways", np.float32, (-1, 3))], batch=4)
    with pytest.raises(ValueError):
        plan_buffers([("x", "input", np.float32, (-1, 3))], batch=0)


# --------------------------------------------------------------------------- layer precisions

def _layer(name, kind, datatype=None, **extra):
    layer = {"Name": name, "LayerType": kind, **extra}
    if datatype is not None:
        layer["Inputs"] = [{"Name": f"{name}_in", "Location": "Device",
                            "Dimensions": [8, 64, 56, 56], "Format/Datatype": datatype}]
        layer["Outputs"] = [{"Name": f"{name}_out", "Format/Datatype": datatype}]
    return layer


FP32_ONLY = {"Layers": [
    _layer("conv1", "CaskConvolution", "Row major linear FP32 format"),
    _layer("pool", "CaskPooling", "Row major linear FP32 format"),
    _layer("fc", "CaskGemmConvolution", "Row major linear FP32 format"),
], "Bindings": ["input", "logits"]}
FP16_MIXED = {"Layers": [
    _layer("reformat in", "Reformat", "Row major linear FP32 format"),
    _layer("conv1", "CaskConvolution", "Channel major FP16 format where channel % 8 == 0"),
    _layer("conv2", "CaskConvolution", "Half"),
    _layer("fc", "CaskGemmConvolution", "Row major linear FP32 format"),
]}
INT8_MIXED = {"Layers": [
    _layer("conv1", "CaskConvolution", "Row major linear FP32 format"),
    _layer("conv2", "CaskConvolution", "Four wide channel vectorized row major Int8 format",
           Weights={"Type": "Int8", "Count": 9216}),
    _layer("conv3", "CaskConvolution", "Thirty-two wide channel vectorized row major Int8 "
           "format"),
    _layer("conv4", "CaskConvolution", "Int8"),
    _layer("fc", "CaskGemmConvolution", "Channel major FP16 format where channel % 8 == 0"),
    _layer("pool", "CaskPooling", "Int8"),  # not a compute layer
]}


def test_fp32_engine():
    summary = layer_precisions(json.dumps(FP32_ONLY), requested="fp32")
    assert summary["executed_precision"] == "fp32"
    assert summary["layers_by_precision"] == {"fp32": 2}
    assert summary["basis"] == "compute layers" and summary["layers_in_engine"] == 3


def test_fp16_mixed_engine():
    summary = layer_precisions(FP16_MIXED, requested="fp16")
    assert summary["executed_precision"] == "fp16 (2 of 3 layers; rest fp32)"
    assert summary["layers_by_precision"] == {"fp16": 2, "fp32": 1}
    assert summary["other_precision_layers"] == {"fp32": ["fc"]}
    assert summary["layers_by_type"]["CaskConvolution"] == {"fp16": 2}


def test_int8_mixed_engine():
    summary = layer_precisions(INT8_MIXED, requested="int8")
    assert summary["executed_precision"] == "int8 (3 of 5 layers; rest fp16+fp32)"
    assert summary["layers_by_precision"] == {"fp16": 1, "fp32": 1, "int8": 3}


def test_label_without_request_puts_the_most_common_first():
    assert layer_precisions(INT8_MIXED)["executed_precision"] == \
        "int8 (3 of 5 layers; rest fp16+fp32)"
    assert layer_precisions(FP32_ONLY)["executed_precision"] == "fp32"


def test_missing_fields():
    names_only = {"Layers": ["conv1 + relu", "fc"], "Bindings": ["input", "logits"]}
    summary = layer_precisions(names_only)
    assert summary["executed_precision"] == "unknown" and summary["layers_counted"] == 0
    assert layer_precisions({})["executed_precision"] == "unknown"
    sparse = {"Layers": [
        {"Name": "conv1", "LayerType": "CaskConvolution", "Precision": "FP16"},
        {"Name": "conv2", "ParameterType": "Convolution", "Outputs": [{"DataType": "Half"}]},
        {"Name": "conv3", "LayerType": "CaskConvolution", "Inputs": [{"Name": "x"}]},
        {"Name": "fc", "LayerType": "CaskGemmConvolution", "Inputs": "garbage"},
    ]}
    summary = layer_precisions(sparse, requested="fp16")
    assert summary["layers_by_precision"] == {"fp16": 2}
    assert summary["executed_precision"] == "fp16"


def test_no_recognisable_compute_layer_counts_typed_layers():
    fused = {"Layers": [
        _layer("myelin graph", "Myelin", "Half"),
        _layer("reformat", "Reformat", "Row major linear FP32 format"),
    ]}
    summary = layer_precisions(fused, requested="fp16")
    assert summary["basis"] == "typed layers"
    assert summary["executed_precision"] == "fp16" and summary["layers_counted"] == 1


def test_refusals():
    with pytest.raises(SutError, match="refusing to measure fp32 as INT8"):
        layer_precisions(FP32_ONLY, requested="int8")
    with pytest.raises(SutError, match="refusing to measure fp32 as FP16"):
        layer_precisions(FP32_ONLY, requested="fp16")
    with pytest.raises(SutError, match="no layer of the engine runs int8"):
        layer_precisions(FP16_MIXED, requested="int8")
    with pytest.raises(SutError, match="reduced-precision layers"):
        layer_precisions(INT8_MIXED, requested="fp32")
    with pytest.raises(SutError, match="ProfilingVerbosity.DETAILED"):
        layer_precisions({"Layers": ["conv1", "fc"]}, requested="fp32")


# --------------------------------------------------------------------------- backend (stand-ins)

def test_backend_runs_batches_through_its_contexts(fake_gpu, tmp_path):
    engine = FakeEngine((3, 2, 2), 4, "fp16")
    runtime = fake_gpu(engine)
    backend = TensorRTBackend(_engine_artifact(tmp_path, "fp16", BatchProfile(1, 4, 4)), "fp16",
                              None, contexts=2)
    backend.load()
    assert backend.preferred_workers == 2 and backend.label_offset == 1
    assert runtime.streams == 2 and len(runtime.buffers) == 2 * 4  # 2 contexts x (host+device)
    data = np.random.default_rng(0).standard_normal((10, 3, 2, 2)).astype(np.float32)
    expected = data.reshape(10, -1).sum(axis=1, keepdims=True) + np.arange(CLASSES)
    np.testing.assert_allclose(backend.predict(data[:3]), expected[:3], rtol=1e-5)
    np.testing.assert_allclose(backend.predict(data), expected, rtol=1e-5)  # 4+4+2 chunks
    assert engine.executions[-3:] == [4, 4, 2]
    results: dict[int, np.ndarray] = {}

    def worker(k: int) -> None:
        for _ in range(20):
            results[k] = backend.predict(data[k:k + 4])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k, scores in results.items():
        np.testing.assert_allclose(scores, expected[k:k + 4], rtol=1e-5)
    described = backend.describe()
    assert described["executed_precision"] == "fp16"
    assert described["execution_contexts"] == 2 and described["profile"]["max"] == 4
    assert described["framework_version"] == "10.99.0"
    assert engine.inspector.execution_context is not None  # formats need a bound context
    backend.close()
    assert not runtime.buffers


def test_two_backends_never_share_a_stream_or_buffer(fake_gpu, tmp_path):
    """Two members in one process (an ensemble), one thread each, at once: every execution
    context enqueues on a non-blocking stream of its own, with buffers of its own."""
    engine = FakeEngine((3, 2, 2), 4, "fp16")
    runtime = fake_gpu(engine)
    backends = [TensorRTBackend(_engine_artifact(tmp_path, "fp16", BatchProfile(1, 4, 4)),
                                "fp16", None, contexts=2) for _ in range(2)]
    for backend in backends:
        backend.load()
    slots = [slot for backend in backends for slot in backend._slots]
    assert len({slot.stream for slot in slots}) == 4
    assert runtime.stream_flags == [FakeRuntime.cudaStreamNonBlocking] * 4
    device = [pointer for slot in slots for pointer in slot.device.values()]
    assert len(set(device)) == len(device)
    data = np.random.default_rng(1).standard_normal((8, 3, 2, 2)).astype(np.float32)
    expected = data.reshape(8, -1).sum(axis=1, keepdims=True) + np.arange(CLASSES)
    results: dict[int, list[np.ndarray]] = {}
    barrier = threading.Barrier(2)

    def member(k: int) -> None:
        barrier.wait()
        results[k] = [backends[k].predict(data) for _ in range(20)]

    threads = [threading.Thread(target=member, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(2):
        for got in results[k]:
            np.testing.assert_allclose(got, expected, rtol=1e-5)
    for slot in slots:  # each context ran on its own stream, and nothing on stream 0
        assert slot.context.stream_handles <= {slot.stream_handle}
    assert 0 not in runtime.copy_streams
    for backend in backends:
        assert backend.describe()["cuda_stream"] == trt_sut.CUDA_STREAM
        assert backend.speed_settings("Offline", 4)["cuda_stream"] == trt_sut.CUDA_STREAM
        assert trt_sut.CUDA_STREAM.startswith("own ")
        backend.close()


def test_create_stream_is_non_blocking_without_the_constant():
    """Older cuda-python builds may lack the module constant: the CUDA value (1) is used."""
    seen = []

    class Bare:
        class cudaError_t:  # noqa: N801
            cudaSuccess = 0

        def cudaStreamCreateWithFlags(self, flags):  # noqa: N802
            seen.append(flags)
            return (0, 7)

    bare = Bare()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda_runtime, "cuda_runtime", lambda: bare)
        assert cuda_runtime.create_stream(bare) == 7
    assert seen == [cuda_runtime.STREAM_NON_BLOCKING] == [1]


def test_backend_refuses_an_engine_without_its_precision(fake_gpu, tmp_path):
    fake_gpu(FakeEngine((3, 2, 2), 1, "fp32"))
    backend = TensorRTBackend(_engine_artifact(tmp_path, "int8", BatchProfile(1, 1, 1)), "int8",
                              "calibrator", contexts=1)
    with pytest.raises(SutError, match="refusing to measure fp32 as INT8"):
        backend.load()


def test_create_checks_options_before_any_work(tmp_path):
    options = SutOptions(model="digits-cnn", scenario="Offline",
                         extra={"trt_int8_route": "magic"})
    with pytest.raises(UserError, match="trt_int8_route=magic: choose one of calibrator, qdq"):
        trt_sut.create("trt-int8", options, None, None)
    options = SutOptions(model="digits-cnn", scenario="Offline",
                         model_path=str(tmp_path / "model.tflite"))
    with pytest.raises(UserError, match="take an .onnx file or a torch state_dict"):
        trt_sut.create("trt-fp32", options, None, None)


def test_tensorrt_11_refusals_are_one_line():
    trt11 = types.SimpleNamespace(__version__="11.4.0", BuilderFlag=types.SimpleNamespace())
    with pytest.raises(UserError, match="trt-fp16 needs TensorRT 10"):
        trt_build.check_trt_supports(trt11, "fp16", None)
    with pytest.raises(UserError, match="trt_int8_route=qdq"):
        trt_build.check_trt_supports(trt11, "int8", "calibrator")
    trt_build.check_trt_supports(trt11, "int8", "qdq")
    trt_build.check_trt_supports(trt11, "fp32", None)


# --------------------------------------------------------------------------- QDQ for TensorRT

def test_qdq_model_has_the_form_tensorrt_accepts(digits_weights, digits_calibration,
                                                 digits_data):
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from quantmark.models.source import fp32_onnx
    from tests.digits_model import DIGITS_SPEC, top1

    fp32 = fp32_onnx(DIGITS_SPEC, str(digits_weights))
    qdq = qdq_onnx_for_tensorrt(fp32, digits_calibration.arrays("NCHW"),
                                          digits_calibration.hash())
    proto = onnx.load(str(qdq.path))
    inits = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
    nodes = [n for n in proto.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq.meta["qdq"]["QuantizeLinear"] >= 3
    for node in nodes:  # symmetric signed INT8 everywhere: zero points int8 and 0
        zero_point = inits[node.input[2]]
        assert zero_point.dtype == np.int8 and not zero_point.any(), node.name
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            assert inits[node.input[0]].dtype == np.int8  # weights int8, biases left float
    scores = {}
    for name, artifact in (("fp32", fp32), ("qdq", qdq)):
        session = ort.InferenceSession(str(artifact.path), providers=["CPUExecutionProvider"])
        scores[name] = session.run(None, {session.get_inputs()[0].name: digits_data.eval_x})[0]
    assert abs(top1(scores["qdq"], digits_data.eval_y) -
               top1(scores["fp32"], digits_data.eval_y)) <= 1.5


# --------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.skipif(gpu_skip_reason() is not None, reason=str(gpu_skip_reason()))
def test_engines_build_run_and_report_on_the_gpu(digits_weights, digits_calibration,
                                                 digits_data):
    from tests.digits_model import DIGITS_SPEC, top1

    def backend(name, scenario="Offline", batch=16, **extra):
        options = SutOptions(model=DIGITS_SPEC.name, scenario=scenario, batch_size=batch,
                             model_path=str(digits_weights), extra=extra)
        built = trt_sut.create(name, options, DIGITS_SPEC, digits_calibration)
        built.load()
        return built

    fp32 = backend("trt-fp32")
    reference = top1(fp32.predict(digits_data.eval_x), digits_data.eval_y)
    assert reference > 90 and fp32.describe()["executed_precision"] == "fp32"
    assert fp32.describe()["execution_contexts"] == 2
    assert fp32.describe()["cuda_stream"] == trt_sut.CUDA_STREAM
    fp32.close()
    for name, extra in (("trt-fp16", {}), ("trt-int8", {}),
                        ("trt-int8", {"trt_int8_route": "qdq"})):
        run = backend(name, **extra)
        described = run.describe()
        assert described["executed_precision"].startswith(name.split("-")[1]), described
        assert abs(top1(run.predict(digits_data.eval_x), digits_data.eval_y) - reference) <= 1.5
        run.close()
    # another batch profile: a new engine, and the calibration cache is reused
    single = backend("trt-int8", scenario="SingleStream", batch=1)
    described = single.describe()
    assert described["profile"] == {"min": 1, "opt": 1, "max": 1}
    assert described["calibration"]["cache_hit"] is True
    assert described["execution_contexts"] == 1
    assert single.predict(digits_data.eval_x[:1]).shape == (1, 10)
    single.close()


@pytest.mark.gpu
@pytest.mark.skipif(gpu_skip_reason() is not None, reason=str(gpu_skip_reason()))
def test_two_engines_answer_alike_from_two_threads_at_once(digits_weights, digits_data):
    """Two trt-fp32 backends in one process (ensemble members), one thread each: distinct
    streams, and the concurrent answers equal the sequential ones."""
    from tests.digits_model import DIGITS_SPEC

    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=16,
                         model_path=str(digits_weights))
    backends = [trt_sut.create("trt-fp32", options, DIGITS_SPEC, None) for _ in range(2)]
    for backend in backends:
        backend.load()
    handles = [slot.stream_handle for backend in backends for slot in backend._slots]
    assert len(set(handles)) == len(handles) and 0 not in handles
    data = digits_data.eval_x[:64]
    expected = [backend.predict(data) for backend in backends]
    results = predict_side_by_side(backends, data)
    for k, backend in enumerate(backends):
        for got in results[k]:
            np.testing.assert_allclose(got, expected[k], rtol=1e-5, atol=1e-5)
        backend.close()
