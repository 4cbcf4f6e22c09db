"""PyTorch on CUDA: the one-line refusals without CUDA, the option and name errors, the
executed precision read from layer dtypes, torchao's INT8; tests marked ``gpu`` run the SUTs for
real and skip with the reason where there is no NVIDIA GPU or no CUDA build of torch."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import threading
import types

import numpy as np
import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.fingerprint import gpu_present
from quantmark.sut.interface import SutOptions
from quantmark.sut.registry import SUTS as REGISTRY
from tests.conftest import run_cli
from tests.digits_model import DIGITS_SPEC, top1
from tests.sut.side_by_side import predict_side_by_side

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
TORCH_CUDA_SUTS = [name for name, info in REGISTRY.items()
                   if info.framework == "torch" and info.device == "gpu"]


def _pytorch_cuda():
    from quantmark.sut.pytorch import cuda as pytorch_cuda

    return pytorch_cuda


def _torch_options(weights, **extra) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=8,
                      model_path=str(weights), extra=extra)


@needs_torch
@pytest.mark.parametrize("name", TORCH_CUDA_SUTS)
def test_torch_cuda_suts_refuse_cleanly_without_cuda(name, digits_weights):
    pytorch_cuda = _pytorch_cuda()
    from quantmark.sut.registry import factory_module

    assert {factory_module(REGISTRY[name]) for name in TORCH_CUDA_SUTS} == {pytorch_cuda.__name__}
    assert pytorch_cuda.mode_of(REGISTRY[name]) in pytorch_cuda.DTYPES
    if pytorch_cuda.cuda_blocker() is None:
        pytest.skip("CUDA is available here")
    with pytest.raises(SutError) as info:
        pytorch_cuda.create(name, _torch_options(digits_weights), DIGITS_SPEC, None)
    message = str(info.value)
    assert message.startswith(f"{name}: ") and "\n" not in message
    assert "needs an NVIDIA GPU and a CUDA build of torch" in message


@needs_torch
def test_torch_cuda_option_and_name_errors(digits_weights):
    pytorch_cuda = _pytorch_cuda()
    with pytest.raises(UserError, match="cuda_graphs=maybe: choose one of on, off"):
        pytorch_cuda.create("torch-cuda-compile", _torch_options(digits_weights,
                                                                 cuda_graphs="maybe"),
                            DIGITS_SPEC, None)
    with pytest.raises(UserError, match="no SUT 'torch-cuda-int4'"):
        pytorch_cuda.create("torch-cuda-int4", _torch_options(digits_weights), DIGITS_SPEC, None)


@needs_torch
def test_executed_precision_from_layer_dtypes():
    pytorch_cuda = _pytorch_cuda()
    half = {"Conv2d": {"float16": 3}, "Linear": {"float16": 1}}
    assert pytorch_cuda.dtype_evidence("torch-cuda-fp16", half, "float16")["executed_precision"] \
        == "fp16"
    mixed = {"Conv2d": {"float16": 3}, "Linear": {"float32": 1}}
    evidence = pytorch_cuda.dtype_evidence("torch-cuda-fp16", mixed, "float16")
    assert evidence["executed_precision"] == "fp16+fp32"
    assert evidence["evidence"] == {"fp16_layers": 3, "other_layers": 1}
    with pytest.raises(SutError, match="refusing to measure them as fp16"):
        pytorch_cuda.dtype_evidence("torch-cuda-fp16", {"Conv2d": {"float32": 3}}, "float16")
    with pytest.raises(SutError, match="refusing to measure them as fp32"):
        pytorch_cuda.dtype_evidence("torch-cuda-fp32", mixed, "float32")


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None,
                    reason="needs torchao (pip install torchao)")
def test_torchao_int8_quantizes_linear_layers_only():
    pytorch_cuda = _pytorch_cuda()
    model = DIGITS_SPEC.builder(10).eval()
    classes = pytorch_cuda.torchao_int8(model)
    assert classes and "Parameter" not in classes
    evidence = pytorch_cuda.int8_evidence("torch-cuda-int8", model, classes)
    assert evidence["executed_precision"] == "int8+fp32"  # the convolutions stay FP32
    assert evidence["evidence"] == {"torchao_int8_linear": 1, "float_compute_layers": 3}
    plain = DIGITS_SPEC.builder(10).eval()
    with pytest.raises(SutError, match="torchao quantized no Linear layer"):
        pytorch_cuda.int8_evidence("torch-cuda-int8", plain,
                                   pytorch_cuda.linear_weight_classes(plain))


# --------------------------------------------------------------------------- streams, on the CPU

@pytest.fixture
def fake_streams(monkeypatch):
    """torch.cuda.Stream / torch.cuda.stream stand-ins for a CPU build of torch: each stream
    counts its synchronize calls; ``entered`` lists (thread id, stream) per stream context."""
    torch = pytest.importorskip("torch")
    entered: list[tuple[int, object]] = []
    lock = threading.Lock()

    class FakeStream:
        def __init__(self, device=None, priority=0) -> None:
            self.device, self.synced = device, 0

        def synchronize(self) -> None:
            with lock:
                self.synced += 1

    @contextlib.contextmanager
    def stream(chosen):
        with lock:
            entered.append((threading.get_ident(), chosen))
        yield

    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "stream", stream)
    return types.SimpleNamespace(Stream=FakeStream, entered=entered)


def _cpu_backend(name: str, **extra):
    """A TorchCudaBackend whose "device" is the CPU and whose stream is a stand-in: the stream
    plumbing of predict runs without a GPU."""
    import torch

    pytorch_cuda = _pytorch_cuda()
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=4, extra=extra)
    model = DIGITS_SPEC.builder(10).eval()
    sample = np.zeros((1, 3, DIGITS_SPEC.input_size, DIGITS_SPEC.input_size), np.float32)
    artifact = types.SimpleNamespace(weights="random", path="digits.pt")
    backend = pytorch_cuda.TorchCudaBackend(name, DIGITS_SPEC, artifact, options, sample, model)
    backend._device = torch.device("cpu")
    backend._run = model
    backend._sizes = (1, 4)
    backend._stream = pytorch_cuda.new_stream(backend._device)
    return backend


@needs_torch
@pytest.mark.parametrize("name, extra", [("torch-cuda-fp32", {}),
                                         ("torch-cuda-compile", {"cuda_graphs": "off"})])
def test_each_backend_predicts_on_its_own_stream_from_its_own_thread(fake_streams, name, extra):
    """Two members, one thread each, at once: every predict enters its own backend's stream
    on the calling thread and waits for that stream (not the device) before returning."""
    backends = [_cpu_backend(name, **extra) for _ in range(2)]
    streams = [backend._stream for backend in backends]
    assert streams[0] is not streams[1] and all(isinstance(s, fake_streams.Stream)
                                                for s in streams)
    data = np.random.default_rng(0).standard_normal(
        (6, 3, DIGITS_SPEC.input_size, DIGITS_SPEC.input_size)).astype(np.float32)
    expected = [backend.predict(data) for backend in backends]
    fake_streams.entered.clear()
    synced = [s.synced for s in streams]
    results: dict[int, list[np.ndarray]] = {}
    threads_of: dict[int, int] = {}
    barrier = threading.Barrier(2)

    def member(k: int) -> None:
        threads_of[k] = threading.get_ident()
        barrier.wait()
        results[k] = [backends[k].predict(data) for _ in range(5)]

    threads = [threading.Thread(target=member, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for k in range(2):
        for got in results[k]:
            np.testing.assert_allclose(got, expected[k], rtol=1e-5, atol=1e-6)
        mine = [stream for thread, stream in fake_streams.entered if thread == threads_of[k]]
        assert mine == [streams[k]] * 5  # one stream context per predict, always its own
        assert streams[k].synced - synced[k] == 5


@needs_torch
def test_speed_settings_name_the_own_stream(fake_streams):
    backend = _cpu_backend("torch-cuda-fp16")
    settings = backend.speed_settings("Offline", 4)
    assert settings["cuda_stream"] == _pytorch_cuda().CUDA_STREAM
    assert settings["cuda_stream"].startswith("own (torch.cuda.Stream")
    backend.close()
    assert backend._stream is None


@needs_torch
def test_dynamo_reset_spares_a_live_compiled_member(monkeypatch, fake_streams):
    """Dynamo's cache is process-wide: a second compiled member must not wipe the first's."""
    import weakref

    import torch

    pytorch_cuda = _pytorch_cuda()
    resets: list[int] = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    monkeypatch.setattr(pytorch_cuda, "_COMPILED", weakref.WeakSet())
    first, second = _cpu_backend("torch-cuda-compile"), _cpu_backend("torch-cuda-compile")
    assert pytorch_cuda.reset_dynamo_unless_shared(first) is True
    assert pytorch_cuda.reset_dynamo_unless_shared(first) is True  # itself does not count
    assert pytorch_cuda.reset_dynamo_unless_shared(second) is False
    assert len(resets) == 2
    first.close()
    second.close()
    assert pytorch_cuda.reset_dynamo_unless_shared(_cpu_backend("torch-cuda-compile")) is True
    assert len(resets) == 3


# --------------------------------------------------------------------------- on a GPU

def _torch_gpu_skip() -> str | None:
    if not gpu_present():
        return "needs an NVIDIA GPU (none found)"
    if not HAS_TORCH:
        return "needs torch"
    return _pytorch_cuda().cuda_blocker()


@pytest.mark.gpu
@pytest.mark.skipif(_torch_gpu_skip() is not None, reason=str(_torch_gpu_skip()))
def test_torch_cuda_fp16_against_fp32(digits_weights, digits_data):
    pytorch_cuda = _pytorch_cuda()
    scores, described = {}, {}
    for name in ("torch-cuda-fp32", "torch-cuda-fp16", "torch-cuda-compile"):
        backend = pytorch_cuda.create(name, _torch_options(digits_weights), DIGITS_SPEC, None)
        backend.load()
        scores[name] = backend.predict(digits_data.eval_x)
        assert backend.predict(digits_data.eval_x[:3]).shape == (3, 10)
        described[name] = backend.describe()
        backend.close()
    fp32 = top1(scores["torch-cuda-fp32"], digits_data.eval_y)
    assert fp32 > 90
    assert abs(top1(scores["torch-cuda-fp16"], digits_data.eval_y) - fp32) <= 1.0
    assert described["torch-cuda-fp32"]["executed_precision"] == "fp32"
    assert described["torch-cuda-fp32"]["gpu_settings"]["cudnn_allow_tf32"] is False
    assert described["torch-cuda-fp16"]["executed_precision"] == "fp16"
    assert described["torch-cuda-compile"]["compile"]["cuda_graphs"] is True
    np.testing.assert_allclose(scores["torch-cuda-compile"], scores["torch-cuda-fp32"],
                               rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(_torch_gpu_skip() is not None, reason=str(_torch_gpu_skip()))
def test_torch_cuda_fp16_offline_valid_with_its_ratio_and_gpu_trackers(tmp_path):
    """What a GPU user runs: a sweep of torch-cuda-fp32 and -fp16, Offline, through LoadGen.
    Both VALID, fp16 proven, its ratio to the GPU FP32, GPU memory tracked, GPU fingerprinted."""
    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--models", "resnet50", "--suts", "torch-cuda-fp32,torch-cuda-fp16",
                   "--scenarios", "Offline", "--batch-sizes", "32", "--seconds", "5",
                   "--output", str(out), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "report.csv", newline="") as handle:
        rows = {row["sut"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"torch-cuda-fp32", "torch-cuda-fp16"}
    assert all(row["validity"] == "VALID" for row in rows.values()), rows
    assert rows["torch-cuda-fp32"]["executed_precision"] == "fp32"
    assert rows["torch-cuda-fp16"]["executed_precision"] == "fp16"
    assert float(rows["torch-cuda-fp32"]["speedup_vs_fp32"]) == 1.0
    assert float(rows["torch-cuda-fp16"]["speedup_vs_fp32"]) > 0
    results = [json.loads(p.read_text()) for p in (out / "runs").rglob("results.json")]
    assert results and all(r["machine"]["gpu"]["devices"] for r in results)
    assert {r["sut"]["fp32_baseline"] for r in results} == {"torch-cuda-fp32"}
    if importlib.util.find_spec("pynvml") is not None:
        assert all(float(row["gpu_memory_mb"]) > 0 for row in rows.values()), rows


@pytest.mark.gpu
@pytest.mark.skipif(_torch_gpu_skip() is not None, reason=str(_torch_gpu_skip()))
def test_two_torch_cuda_members_run_on_their_own_streams_at_once(digits_weights, digits_data):
    """Two backends in one process, as ensemble members: distinct non-default streams, the
    forward runs on the backend's stream, and concurrent predicts from two threads answer as
    sequential ones do (eager and CUDA-graph replay)."""
    import torch

    pytorch_cuda = _pytorch_cuda()
    backends = [pytorch_cuda.create(name, _torch_options(digits_weights), DIGITS_SPEC, None)
                for name in ("torch-cuda-fp32", "torch-cuda-compile")]
    for backend in backends:
        backend.load()
    streams = [backend._stream for backend in backends]
    assert streams[0] != streams[1]
    assert torch.cuda.default_stream(0) not in streams
    seen: list[object] = []
    hook = backends[0]._run.register_forward_hook(
        lambda module, args, out: seen.append(torch.cuda.current_stream()))
    data = digits_data.eval_x[:64]
    expected = [backend.predict(data) for backend in backends]
    hook.remove()
    assert seen and all(stream == streams[0] for stream in seen)
    results = predict_side_by_side(backends, data)
    for k, backend in enumerate(backends):
        for got in results[k]:
            np.testing.assert_allclose(got, expected[k], rtol=1e-4, atol=1e-4)
        assert backend.describe()["cuda_stream"] == pytorch_cuda.CUDA_STREAM
        backend.close()
