"""OpenVINO SUTs on the digits CNN: numerics against torch, executed precision, threading,
dynamic batch, cache and user-model validation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.registry import SUTS as REGISTRY  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402

SUTS = tuple(name for name, info in REGISTRY.items() if info.framework == "openvino")


def _create(name: str, weights: Path | str | None, calibration: Any,
            scenario: str = "Offline", threads: int = 0, **extra: str):
    from quantmark.sut.openvino.backend import create

    options = SutOptions(model=DIGITS_SPEC.name, scenario=scenario, threads=threads,
                         model_path=str(weights) if weights else None, extra=extra)
    return create(name, options, DIGITS_SPEC, calibration)


@pytest.fixture(scope="module")
def backends(digits_weights: Path, digits_calibration: Any) -> Iterator[dict[str, Any]]:
    """Every OpenVINO SUT on the trained digits weights, loaded once for the module."""
    loaded = {}
    for name in SUTS:
        backend = _create(name, digits_weights, digits_calibration)
        backend.load()
        loaded[name] = backend
    yield loaded
    for backend in loaded.values():
        backend.close()


@pytest.fixture(scope="module")
def scores(backends: dict[str, Any], digits_data: Any) -> dict[str, np.ndarray]:
    return {name: backend.predict(digits_data.eval_x) for name, backend in backends.items()}


def test_fp32_matches_torch(scores: dict[str, np.ndarray], digits_weights: Path,
                            digits_data: Any) -> None:
    """Same state_dict, same function: max |ov - torch| within 1e-4 of the output scale."""
    import torch

    model = DIGITS_SPEC.builder()
    model.load_state_dict(torch.load(digits_weights, map_location="cpu"))
    with torch.no_grad():
        reference = model.eval()(torch.from_numpy(digits_data.eval_x)).numpy()
    ours = scores["ov-fp32"]
    assert ours.shape == reference.shape == (len(digits_data.eval_y), 10)
    scale = float(np.abs(reference).max())
    assert float(np.abs(ours - reference).max()) <= 1e-4 * scale
    assert (ours.argmax(1) == reference.argmax(1)).all()


@pytest.mark.parametrize("name", ["ov-bf16", "ov-fp16", "ov-int8"])
def test_reduced_precision_top1_within_one_point(name: str, scores: dict[str, np.ndarray],
                                                 digits_data: Any) -> None:
    fp32 = top1(scores["ov-fp32"], digits_data.eval_y)
    assert fp32 > 85.0  # the trained CNN really classifies
    assert abs(top1(scores[name], digits_data.eval_y) - fp32) <= 1.0


def test_executed_precision(backends: dict[str, Any]) -> None:
    described = {name: backend.describe() for name, backend in backends.items()}
    for info in described.values():
        assert info["framework"] == "openvino"
        assert info["framework_version"] == ov.__version__
        assert info["compiled"]["performance_hint"] == "THROUGHPUT"
        assert info["compiled"]["execution_devices"] == ["CPU"]
    assert described["ov-fp32"]["executed_precision"] == "fp32"
    assert described["ov-fp32"]["compiled"]["inference_precision_hint"] == "f32"
    assert described["ov-bf16"]["executed_precision"] == "bf16"
    assert described["ov-int8"]["executed_precision"] == "int8"
    assert described["ov-int8"]["compiled"]["inference_precision_hint"] == "f32"
    int8_layers = described["ov-int8"]["compute_layers_by_precision"]["int8"]
    assert int8_layers.get("Convolution") == 3
    fp16 = described["ov-fp16"]
    if "FP16" in fp16["cpu_capabilities"]:
        assert fp16["executed_precision"] == "fp16"
    else:  # this CPU: the plugin runs the f16 hint as bf16, and the SUT says so
        assert fp16["executed_precision"] == "bf16"
        assert "no FP16 arithmetic" in fp16["precision_note"]


def test_int8_refuses_fp32_model(monkeypatch: pytest.MonkeyPatch, digits_weights: Path,
                                 digits_calibration: Any) -> None:
    import quantmark.sut.openvino.convert as ov_convert

    monkeypatch.setattr(ov_convert, "ov_int8_ir", lambda fp32, *_args: fp32)
    backend = _create("ov-int8", digits_weights, digits_calibration)
    with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
        backend.load()


def test_float_sut_refuses_int8_model(backends: dict[str, Any], digits_weights: Path,
                                      digits_calibration: Any) -> None:
    int8_ir = backends["ov-int8"].artifact.path
    backend = _create("ov-fp32", int8_ir, digits_calibration)
    assert backend.artifact.precision == "int8"
    with pytest.raises(SutError, match="pass an FP32 model"):
        backend.load()


def test_int8_takes_a_quantized_user_ir_as_is(backends: dict[str, Any],
                                              digits_calibration: Any) -> None:
    int8_ir = backends["ov-int8"].artifact.path
    backend = _create("ov-int8", int8_ir, digits_calibration)
    assert backend.artifact.path == int8_ir  # not quantized a second time
    backend.load()
    assert backend.describe()["executed_precision"] == "int8"


def test_concurrent_predict_matches_sequential(backends: dict[str, Any],
                                               digits_data: Any) -> None:
    backend = backends["ov-fp32"]
    chunks = [digits_data.eval_x[i * 16:(i + 1) * 16] for i in range(4)]
    sequential = [backend.predict(chunk) for chunk in chunks]
    results: dict[int, list[np.ndarray]] = {}
    barrier = threading.Barrier(4)

    def work(index: int) -> None:
        barrier.wait()
        results[index] = [backend.predict(chunks[index]) for _ in range(10)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(4):
        for got in results[index]:
            np.testing.assert_allclose(got, sequential[index], rtol=0, atol=1e-6)
    assert backend.describe()["infer_requests_created"] >= 5  # one per thread, no sharing


@pytest.mark.parametrize("name", SUTS)
def test_batch_one_and_seven(name: str, backends: dict[str, Any],
                             scores: dict[str, np.ndarray], digits_data: Any) -> None:
    backend = backends[name]
    one = backend.predict(digits_data.eval_x[:1])
    seven = backend.predict(digits_data.eval_x[1:8])
    assert one.shape == (1, 10) and seven.shape == (7, 10)
    assert one.dtype == np.float32
    # batch size may change kernel blocking in reduced precision: compare decisions there
    assert (np.concatenate([one, seven]).argmax(1) == scores[name][:8].argmax(1)).all()
    if name == "ov-fp32":
        np.testing.assert_allclose(np.concatenate([one, seven]), scores[name][:8],
                                   rtol=1e-5, atol=1e-5)


def test_output_is_a_copy(backends: dict[str, Any], digits_data: Any) -> None:
    """The request reuses its output buffer: an earlier result must not change."""
    backend = backends["ov-fp32"]
    first = backend.predict(digits_data.eval_x[:3])
    kept = first.copy()
    backend.predict(digits_data.eval_x[3:6])
    np.testing.assert_array_equal(first, kept)


def test_second_create_hits_cache(backends: dict[str, Any], digits_weights: Path,
                                  digits_calibration: Any) -> None:
    for name in ("ov-fp32", "ov-int8"):
        again = _create(name, digits_weights, digits_calibration)
        assert again.artifact.meta["cached"] is True
        assert again.artifact.key == backends[name].artifact.key
        assert again.artifact.path == backends[name].artifact.path
    int8 = backends["ov-int8"].artifact
    assert int8.meta["calibration_samples"] == len(digits_calibration.data)
    assert int8.meta["fake_quantize_ops"] > 0
    assert "quantize_s" in int8.times
    assert "convert_s" in backends["ov-fp32"].artifact.times


def test_latency_hint_and_threads(digits_weights: Path, digits_calibration: Any,
                                  digits_data: Any) -> None:
    backend = _create("ov-fp32", digits_weights, digits_calibration,
                      scenario="SingleStream", threads=1)
    backend.load()
    compiled = backend.describe()["compiled"]
    assert compiled["performance_hint"] == "LATENCY"
    assert compiled["inference_num_threads"] == 1
    assert backend.preferred_workers == compiled["optimal_number_of_infer_requests"] >= 1
    # SingleStream compiles a static batch of 1 (as benchmark_app -b 1); more samples still run
    assert backend._compiled.input(0).get_partial_shape().is_static
    assert backend.speed_settings("SingleStream", 1)["model_batch"] == 1
    scores = backend.predict(digits_data.eval_x[:2])
    assert scores.shape == (2, 10)
    np.testing.assert_allclose(scores[1:], backend.predict(digits_data.eval_x[1:2]), atol=1e-6)


def test_async_infer_queue_gives_predict_s_scores(digits_weights: Path, digits_calibration: Any,
                                                  digits_data: Any) -> None:
    """``ov_api=async``: batches gathered into the idle request's own buffer and run on the
    AsyncInferQueue come back, through the callback, with exactly predict's scores."""
    from quantmark.sut.openvino.backend import create

    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline",
                         model_path=str(digits_weights), extra={"ov_api": "async"})
    backend = create("ov-int8", options, DIGITS_SPEC, digits_calibration)
    backend.load()
    assert backend.submit is not None
    x = np.ascontiguousarray(digits_data.eval_x[:40], dtype=np.float32)
    got: dict[int, np.ndarray] = {}
    lock = threading.Lock()
    for start in range(0, len(x), 8):
        chunk = x[start:start + 8]

        def fill(buffer: Any, chunk: np.ndarray = chunk) -> np.ndarray:
            if buffer is None:
                return chunk.copy()
            buffer[:] = chunk
            return buffer

        def done(outputs: Any, error: Any, start: int = start) -> None:
            assert error is None
            with lock:
                got[start] = np.array(outputs, copy=True)

        backend.submit(len(chunk), fill, done)
    backend.close()  # waits for every request in flight
    assert sorted(got) == list(range(0, len(x), 8))
    expected = _loaded_predict(digits_weights, digits_calibration, x)
    np.testing.assert_allclose(np.concatenate([got[k] for k in sorted(got)]), expected,
                               rtol=0, atol=1e-5)
    assert "AsyncInferQueue" in backend.speed_settings("Offline", 8)["api"]
    with pytest.raises(UserError, match="ov_api='fast'"):
        create("ov-int8", SutOptions(model=DIGITS_SPEC.name, scenario="Offline",
                                     model_path=str(digits_weights), extra={"ov_api": "fast"}),
               DIGITS_SPEC, digits_calibration)


def _loaded_predict(weights: Path, calibration: Any, x: np.ndarray) -> np.ndarray:
    backend = _create("ov-int8", weights, calibration)
    backend.load()
    try:
        return backend.predict(x)
    finally:
        backend.close()


#: one async backend after another, each closed with its requests still running; the child
#: prints how many closes returned and what close() kept alive. (Before the fix, dropping the
#: compiled model while an executor thread still held the callback deadlocked within a few.)
CLOSE_UNDER_LOAD = """
import json, logging, sys
import numpy as np
import quantmark.sut.openvino.backend as ov_backend
from quantmark.sut.interface import SutOptions
from tests.digits_model import DIGITS_SPEC

closes, kept_callbacks = {closes}, {keep}
if kept_callbacks:  # something else holds the callback: close must not wait forever
    ov_backend.CALLBACK_RELEASE_S = 0.2
    held = []
    class Held(ov_backend._Completion):
        __slots__ = ()
        def __init__(self, index):
            super().__init__(index)
            held.append(self)
    ov_backend._Completion = Held
x = np.random.default_rng(0).standard_normal((48, 3, 32, 32)).astype(np.float32)
answers = []
for _ in range(closes):
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path={weights!r},
                         extra={{"ov_api": "async"}})
    backend = ov_backend.create("ov-fp32", options, DIGITS_SPEC, None)
    backend.load()
    for start in range(0, len(x), 8):
        backend.submit(8, lambda buffer, s=start: x[s:s + 8].copy(),
                       lambda outputs, error: answers.append(error is None))
    backend.close()  # requests still in flight
print(json.dumps({{"closes": closes, "answers": len(answers), "ok": all(answers),
                  "kept_alive": len(ov_backend._KEPT_ALIVE)}}))
"""


@pytest.mark.parametrize("keep", [False, True], ids=["released", "callback-held"])
def test_close_under_load_never_hangs(keep: bool, digits_weights: Path) -> None:
    """Close with requests in flight, many times, in a child process: a deadlock fails the
    test at the timeout instead of hanging the suite. A callback that something else keeps
    alive costs memory (the compiled model is kept), never a hang."""
    import subprocess

    from tests.conftest import run_python

    closes = 3 if keep else 40
    code = CLOSE_UNDER_LOAD.format(closes=closes, keep=keep, weights=str(digits_weights))
    try:
        proc = run_python(code, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{closes} closes of an async OpenVINO backend under load did not finish "
                    "in 180 s: close() deadlocked")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"closes": closes, "answers": 6 * closes, "ok": True,
                      "kept_alive": closes if keep else 0}
    if keep:
        assert "kept alive (memory) rather than risk a deadlock" in proc.stderr


def _benchmark_app(command: str, seconds: str = "1") -> str:
    """Run a recorded benchmark_app command for ``seconds`` (the venv need not be active)."""
    import shlex
    import subprocess
    import sys

    args = shlex.split(command)
    tool = Path(sys.executable).parent / args[0]
    if not tool.is_file():
        pytest.skip("benchmark_app is not installed beside this Python (the cpu extra)")
    args[0], args[args.index("-t") + 1] = str(tool), seconds
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("scenario,threads", [("Offline", 0), ("SingleStream", 1)])
def test_recorded_benchmark_app_command_reruns_the_same_settings(
        scenario: str, threads: int, digits_weights: Path, digits_calibration: Any) -> None:
    """The vendor command in speed_settings runs, and benchmark_app reports the streams,
    threads and hint the SUT's compiled model had (the like-for-like rerun users ask for)."""
    import re

    backend = _create("ov-int8", digits_weights, digits_calibration, scenario, threads)
    backend.load()
    settings = backend.speed_settings(scenario, 4)
    compiled = backend.describe()["compiled"]
    text = _benchmark_app(settings["vendor_command"])
    assert re.search(r"Throughput:\s+[\d.]+ FPS", text)
    assert re.search(rf"NUM_STREAMS: {compiled['num_streams']}\b", text)
    assert re.search(rf"INFERENCE_NUM_THREADS: {compiled['inference_num_threads']}\b", text)
    assert re.search(rf"PERFORMANCE_HINT: {compiled['performance_hint']}\b", text) or threads
    assert settings["num_streams"] == compiled["num_streams"]
    assert "-b 4" in settings["vendor_command"] and "-ip f32" in settings["vendor_command"]


@pytest.mark.parametrize("streams", ["1", "2"])
def test_streams_option_sets_the_plugins_streams_and_requests(
        streams: str, digits_weights: Path, digits_calibration: Any, digits_data: Any) -> None:
    """``ov_streams=N`` compiles N streams (OpenVINO's requests follow them), the workers
    the run starts; benchmark_app's recorded command spells the streams out."""
    backend = _create("ov-int8", digits_weights, digits_calibration, "Offline",
                      ov_streams=streams)
    backend.load()
    compiled = backend.describe()["compiled"]
    assert compiled["num_streams"] == int(streams)
    assert backend.preferred_workers == compiled["optimal_number_of_infer_requests"]
    assert backend.preferred_workers >= int(streams)
    assert f"-nstreams {streams}" in backend.speed_settings("Offline", 4)["vendor_command"]
    assert backend.predict(digits_data.eval_x[:3]).shape == (3, 10)
    backend.close()


def test_a_bad_streams_value_is_one_line(digits_weights: Path, digits_calibration: Any) -> None:
    with pytest.raises(UserError, match="ov_streams='3': choose one of auto, 1, 2, 4, 8"):
        _create("ov-fp32", digits_weights, digits_calibration, ov_streams="3")


def _tiny_ir(path: Path, input_shape: list[int], classes: int) -> Path:
    """An IR: global average pool then a dense layer, [N,3,32,32] -> [N,classes]."""
    import openvino.opset13 as ops

    param = ops.parameter(input_shape, ov.Type.f32, name="image")
    pooled = ops.reduce_mean(param, ops.constant(np.array([2, 3], dtype=np.int64)), False)
    weights = np.random.default_rng(0).standard_normal((3, classes)).astype(np.float32)
    logits = ops.matmul(pooled, ops.constant(weights), False, False)
    ov.save_model(ov.Model([logits], [param], "tiny"), str(path), compress_to_fp16=False)
    return path


def test_user_ir_static_batch_and_background_class(tmp_path: Path,
                                                   digits_calibration: Any) -> None:
    xml = _tiny_ir(tmp_path / "tiny.xml", [1, 3, 32, 32], 11)
    backend = _create("ov-fp32", xml, digits_calibration)
    assert backend.label_offset == 1
    assert backend.artifact.meta["static_batch"] == 1
    backend.load()
    assert backend.predict(np.zeros((5, 3, 32, 32), np.float32)).shape == (5, 11)


@pytest.mark.parametrize("bad,match", [
    ("weights.h5", "accepted|take a torch state_dict"),
    ("missing.xml", "not found"),
    ("wrong-input.xml", r"takes 3x64x64 .* feeds float32 3x32x32 .*--input-size 64x64"),
    ("wrong-output.xml", "no float output"),
    ("garbage.xml", "not a readable OpenVINO IR"),
    ("ir-weights.bin", "weights half of an OpenVINO IR"),
])
def test_bad_model_path_is_user_error(bad: str, match: str, tmp_path: Path,
                                      digits_calibration: Any) -> None:
    path = tmp_path / bad
    if bad == "weights.h5":
        path.write_bytes(b"\0")
    elif bad == "wrong-input.xml":
        _tiny_ir(path, [-1, 3, 64, 64], 10)
    elif bad == "wrong-output.xml":
        _tiny_ir(path, [-1, 3, 32, 32], 7)
    elif bad == "garbage.xml":
        path.write_text("<net>not an IR")
    elif bad == "ir-weights.bin":
        path = _tiny_ir(tmp_path / "ir-weights.xml", [-1, 3, 32, 32], 10).with_suffix(".bin")
    with pytest.raises(UserError, match=match) as caught:
        _create("ov-fp32", path, digits_calibration)
    assert "\n" not in str(caught.value)
