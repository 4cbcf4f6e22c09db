"""TFLite / LiteRT SUTs on the digits CNN: numerics, executed-precision proof, threads, no-TF run.

The four .tflite files are converted once per session from the trained digits state_dict
(torch -> ONNX -> onnx2tf SavedModel -> TFLiteConverter), exactly as a zoo model would be.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.registry import SUTS as REGISTRY  # noqa: E402
from quantmark.sut.tflite.backend import (  # noqa: E402
    TFLiteBackend,
    create,
    delegation,
    dequantize,
    native_stderr,
    quantize,
)
from quantmark.sut.tflite.convert import load_user_tflite  # noqa: E402
from tests.digits_model import DIGITS_SPEC, top1  # noqa: E402

SUTS = tuple(name for name, info in REGISTRY.items() if info.framework == "tflite")
REPO = Path(__file__).resolve().parents[3]


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


@pytest.fixture(scope="module")
def backends(digits_weights, digits_calibration) -> dict[str, TFLiteBackend]:
    """Every TFLite SUT, converted from the digits state_dict and loaded (2 threads)."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("onnx2tf")
    loaded = {}
    for name in SUTS:
        options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=2,
                             model_path=str(digits_weights))
        backend = create(name, options, DIGITS_SPEC, digits_calibration)
        backend.load()
        loaded[name] = backend
    return loaded


@pytest.fixture(scope="module")
def scores(backends, digits_data) -> dict[str, np.ndarray]:
    x = _nhwc(digits_data.eval_x)
    return {name: backend.predict(x) for name, backend in backends.items()}


def test_fp32_matches_torch(backends, scores, digits_weights, digits_data) -> None:
    torch = pytest.importorskip("torch")
    model = DIGITS_SPEC.builder(10)
    model.load_state_dict(torch.load(digits_weights))
    with torch.no_grad():
        expected = model.eval()(torch.from_numpy(digits_data.eval_x)).numpy()
    # logits span ~+-10; fp32 conv order differs (XNNPACK NHWC vs torch NCHW): 1e-4 absolute
    np.testing.assert_allclose(scores["tflite-fp32"], expected, atol=1e-4, rtol=0)
    assert backends["tflite-fp32"].layout == "NHWC"
    assert backends["tflite-fp32"].artifact.times["tflite_convert_s"] > 0


@pytest.mark.parametrize("name", ["tflite-fp16", "tflite-int8dyn", "tflite-int8"])
def test_reduced_precision_top1_close_to_fp32(scores, digits_data, name) -> None:
    reference = top1(scores["tflite-fp32"], digits_data.eval_y)
    assert reference > 95
    assert abs(top1(scores[name], digits_data.eval_y) - reference) <= 1.0


def test_executed_precision_evidence(backends) -> None:
    described = {name: backend.describe() for name, backend in backends.items()}
    json.dumps(described)  # results.json must be able to hold it
    for info in described.values():
        assert info["framework"] == "tflite" and info["runtime"] == "ai-edge-litert"
        assert info["xnnpack"]["partitions"] >= 1
        assert info["xnnpack"]["delegated_nodes"] == info["xnnpack"]["total_nodes"] > 0
        assert info["threads"] == 2 and info["invoke"] == "batched"
    fp32, fp16 = described["tflite-fp32"], described["tflite-fp16"]
    dyn, int8 = described["tflite-int8dyn"], described["tflite-int8"]
    assert fp32["executed_precision"] == "fp32" and fp32["int8_weight_tensors"] == 0
    assert set(fp32["tensor_types"]) == {"float32", "int32"}
    assert fp16["executed_precision"] == "fp32 (fp16 weights)"
    assert fp16["tensor_types"]["float16"] > 0 and fp16["fp16_weight_dequantize_ops"] > 0
    assert dyn["executed_precision"].startswith("int8 dynamic")
    assert dyn["compute_ops"]["hybrid"] > 0 and dyn["tensor_types"]["int8"] > 0
    assert dyn["input"]["dtype"] == "float32"
    assert int8["executed_precision"] == "int8"
    assert int8["compute_ops"] == {"integer": 4, "hybrid": 0, "float": 0, "float16": 0}
    assert "float32" not in int8["tensor_types"]
    assert int8["input"]["dtype"] == int8["output"]["dtype"] == "int8"
    assert int8["input"]["shape_signature"] == [-1, 32, 32, 3]


def test_input_quantization_matches_manual_invoke(backends, digits_data) -> None:
    from ai_edge_litert.interpreter import Interpreter

    backend = backends["tflite-int8"]
    x = _nhwc(digits_data.eval_x[:16])
    interpreter = Interpreter(model_path=backend.model_path, num_threads=1)
    interpreter.resize_tensor_input(0, list(x.shape))
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    scale, zero_point = inp["quantization"]
    manual = np.clip(np.round(x / scale) + zero_point, -128, 127).astype(np.int8)
    interpreter.set_tensor(inp["index"], manual)
    interpreter.invoke()
    out_scale, out_zero = out["quantization"]
    expected = (interpreter.get_tensor(out["index"]).astype(np.float32) - out_zero) * out_scale
    np.testing.assert_allclose(backend.predict(x), expected, rtol=0, atol=1e-6)


def test_samples_encoded_at_load_give_the_same_scores(backends, digits_data) -> None:
    """The QSL's int8 samples (quantized at load, outside the timed path) predict exactly what
    float samples quantized inside predict do; float models keep float32."""
    from quantmark.qsl.library import QuerySampleLibrary

    backend = backends["tflite-int8"]
    x = _nhwc(digits_data.eval_x[:16])
    qsl = QuerySampleLibrary.from_arrays(x, np.zeros(len(x), int), len(x))
    qsl._encode = backend.encode_samples
    qsl.load(range(len(x)))
    encoded = qsl.batch(range(len(x)))
    assert encoded.dtype == np.int8
    np.testing.assert_array_equal(backend.predict(encoded), backend.predict(x))
    assert backends["tflite-fp32"].encode_samples(x).dtype == np.float32


def test_per_call_quantization_is_kept_on_request(digits_weights, digits_calibration) -> None:
    options = SutOptions(model=DIGITS_SPEC.name, scenario="SingleStream", threads=2,
                         model_path=str(digits_weights),
                         extra={"tflite_quantize": "per-call"})
    backend = create("tflite-int8", options, DIGITS_SPEC, digits_calibration)
    backend.load()
    x = np.zeros((2, 32, 32, 3), np.float32)
    assert backend.encode_samples(x) is x
    assert "quantized in every predict" in backend.speed_settings("SingleStream", 1)["input"]
    with pytest.raises(UserError, match="tflite_quantize='sometimes'"):
        create("tflite-int8", dataclasses.replace(options, extra={"tflite_quantize":
                                                                  "sometimes"}),
               DIGITS_SPEC, digits_calibration)


def test_speed_settings_name_the_litert_benchmark_command(backends) -> None:
    import shlex

    settings = backends["tflite-int8"].speed_settings("SingleStream", 1)
    command = shlex.split(settings["vendor_command"])
    assert command[0] == "litert-benchmark"
    assert command[command.index("--model") + 1] == backends["tflite-int8"].model_path
    assert command[command.index("--num_threads") + 1] == "2" == str(settings["threads"])
    assert "int8, quantized by the QSL at load" in settings["input"]
    assert "batch 8" in backends["tflite-int8"].speed_settings("Offline", 8)["vendor_note"]


def test_uint8_input_model(scores, digits_weights, digits_data, digits_calibration,
                           tmp_path) -> None:
    """A full-integer model with uint8 input and output (zero point ~128) runs as tflite-int8."""
    tf = pytest.importorskip("tensorflow")
    from quantmark.models.saved_model import export_saved_model

    saved = export_saved_model(DIGITS_SPEC, digits_weights)  # cached by the fixture
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved.path.parent))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    calibration = digits_calibration.arrays("NHWC")
    converter.representative_dataset = lambda: ([s[None]] for s in calibration)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.uint8
    path = tmp_path / "digits-uint8.tflite"
    path.write_bytes(converter.convert())
    artifact = load_user_tflite(path, DIGITS_SPEC)
    assert artifact.meta["file_precision"] == "int8" and artifact.meta["input_dtype"] == "uint8"
    backend = TFLiteBackend(artifact, "int8", threads=2)
    backend.load()
    x = _nhwc(digits_data.eval_x)
    got = backend.predict(x)
    assert top1(got, digits_data.eval_y) >= top1(scores["tflite-fp32"], digits_data.eval_y) - 1.0
    inp = backend.describe()["input"]
    assert inp["dtype"] == "uint8" and inp["zero_point"] > 100
    manual = np.clip(np.round(x[:5] / inp["scale"]) + inp["zero_point"], 0, 255).astype(np.uint8)
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.resize_tensor_input(inp["index"], list(manual.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], manual)
    interpreter.invoke()
    out = backend.describe()["output"]
    raw = interpreter.get_tensor(out["index"]).astype(np.float32)
    expected = (raw - out["zero_point"]) * out["scale"]
    np.testing.assert_allclose(got[:5], expected, rtol=0, atol=1e-6)


def test_quantize_clips_int8_and_uint8() -> None:
    x = np.array([-100.0, -1.0, -0.004, 0.0, 0.5, 1.0, 100.0], dtype=np.float32)
    q8 = quantize(x, 1 / 127.5, -1, np.dtype(np.int8))
    assert q8.dtype == np.int8 and q8[0] == -128 and q8[-1] == 127 and q8[3] == -1
    u8 = quantize(x, 1 / 127.5, 128, np.dtype(np.uint8))
    assert u8.dtype == np.uint8 and u8[0] == 0 and u8[-1] == 255 and u8[3] == 128
    np.testing.assert_allclose(dequantize(u8, 1 / 127.5, 128)[1:-1], x[1:-1], atol=0.5 / 127.5)


def test_int8_suts_refuse_a_float_model(backends) -> None:
    fp32 = backends["tflite-fp32"].artifact
    for precision in ("int8", "int8dyn"):
        with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
            TFLiteBackend(fp32, precision, threads=1).load()
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path=str(fp32.path))
    with pytest.raises(UserError, match="run it as tflite-fp32"):
        create("tflite-int8", options, DIGITS_SPEC, None)
    options.model_path = str(backends["tflite-int8"].artifact.path)
    with pytest.raises(UserError, match="run it as tflite-int8"):
        create("tflite-fp32", options, DIGITS_SPEC, None)


def test_four_threads_match_sequential(backends, digits_data) -> None:
    source = backends["tflite-int8"].artifact
    backend = TFLiteBackend(source, "int8", threads=1)
    backend.load()
    x = _nhwc(digits_data.eval_x[:96])
    chunks = [x[i:i + size] for i, size in zip(range(0, 96, 24), (1, 7, 24, 5), strict=True)]
    expected = [backend.predict(chunk) for chunk in chunks]
    results: dict[int, list[np.ndarray]] = {}
    barrier = threading.Barrier(4)

    def work(number: int) -> None:
        barrier.wait()
        results[number] = [backend.predict(chunks[number]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for number in range(4):
        for got in results[number]:
            np.testing.assert_array_equal(got, expected[number])
    assert 1 <= backend.describe()["interpreters_created"] <= 4


@pytest.mark.parametrize("name", ["tflite-fp32", "tflite-int8"])
def test_batch_1_and_7_and_per_sample(backends, scores, digits_data, name) -> None:
    backend = backends[name]
    x = _nhwc(digits_data.eval_x[:7])
    for batch in (x[:1], x, x[:1]):
        np.testing.assert_allclose(backend.predict(batch), scores[name][:len(batch)],
                                   atol=1e-5, rtol=0)
    per_sample = TFLiteBackend(backend.artifact, backend.precision, threads=1,
                               invoke="per-sample")
    per_sample.load()
    np.testing.assert_allclose(per_sample.predict(x), scores[name][:7], atol=1e-5, rtol=0)
    assert per_sample.describe()["invoke"] == "per-sample"


def test_user_tflite_runs_without_tensorflow(backends, digits_data, tmp_path) -> None:
    user = tmp_path / "digits-int8.tflite"
    user.write_bytes(backends["tflite-int8"].artifact.path.read_bytes())
    x = _nhwc(digits_data.eval_x[:9])
    np.save(tmp_path / "x.npy", x)
    script = f"""
import sys
for blocked in ("tensorflow", "onnx2tf", "torch", "onnx", "onnxruntime"):
    sys.modules[blocked] = None  # importing any of them now raises ImportError
import numpy as np
from quantmark.sut.interface import SutOptions
from quantmark.sut.tflite.backend import create
from tests.digits_model import DIGITS_SPEC
options = SutOptions(model="digits-cnn", scenario="Offline", threads=1, model_path={str(user)!r})
backend = create("tflite-int8", options, DIGITS_SPEC, None)
backend.load()
np.save({str(tmp_path / "out.npy")!r}, backend.predict(np.load({str(tmp_path / "x.npy")!r})))
print(backend.describe()["executed_precision"])
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "int8"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"),
                                  backends["tflite-int8"].predict(x))


def test_bad_tflite_is_a_one_line_user_error(tmp_path, backends) -> None:
    garbage = tmp_path / "broken.tflite"
    garbage.write_bytes(b"not a flatbuffer at all" * 10)
    cases = [(garbage, DIGITS_SPEC, "not a TFLite model"),
             (tmp_path / "missing.tflite", DIGITS_SPEC, "not found"),
             (backends["tflite-fp32"].artifact.path,
              dataclasses.replace(DIGITS_SPEC, input_size=64, input_width=64),
              r"takes 3x32x32 .* feeds float32 3x64x64 .*--input-size 32x32")]
    for path, spec, message in cases:
        with pytest.raises(UserError, match=message) as error:
            load_user_tflite(path, spec)
        assert "\n" not in str(error.value) and str(path) in str(error.value)
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path="model.xml")
    with pytest.raises(UserError, match="take a .tflite"):
        create("tflite-fp32", options, DIGITS_SPEC, None)
    options.extra["tflite_invoke"] = "sideways"
    with pytest.raises(UserError, match="tflite_invoke"):
        create("tflite-fp32", options, DIGITS_SPEC, None)


def _static_batch_model_with_cumsum(path: Path) -> Path:
    """A [1,32,32,3] -> [1,10] model with a CUMSUM (not in XNNPACK) between two convs."""
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.standard_normal((3, 3, 3, 8)).astype(np.float32))
    w2 = tf.constant(rng.standard_normal((1, 1, 8, 10)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32)])
    def forward(x):
        y = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        y = tf.math.cumsum(y, axis=3)
        return tf.reduce_mean(tf.nn.conv2d(y, w2, 1, "SAME"), axis=[1, 2])

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [forward.get_concrete_function()], forward)
    path.write_bytes(converter.convert())
    return path


def test_partitions_and_static_batch_from_a_real_graph(tmp_path, digits_data) -> None:
    model = _static_batch_model_with_cumsum(tmp_path / "cumsum.tflite")
    backend = TFLiteBackend(load_user_tflite(model, DIGITS_SPEC), "fp32", threads=1)
    backend.load()
    info = backend.describe()
    assert info["xnnpack"]["partitions"] == 2
    assert info["xnnpack"]["nodes_left_to_tflite_kernels"] == {"CUMSUM": 1}
    assert info["xnnpack"]["delegated_nodes"] == info["xnnpack"]["total_nodes"] - 1
    assert info["invoke"] == "per-sample" and info["invoke_note"]
    x = _nhwc(digits_data.eval_x[:7])
    batched = backend.predict(x)
    assert batched.shape == (7, 10)
    np.testing.assert_allclose(batched[3:4], backend.predict(x[3:4]), rtol=0, atol=1e-5)


def test_native_stderr_capture_and_log_parsing() -> None:
    with native_stderr() as lines:
        os.write(2, b"INFO: Replacing 5 out of 6 node(s) with delegate (TfLiteXNNPackDelegate)"
                    b" node, yielding 2 partitions for subgraph 0 (main).\n")
    assert lines and lines[0].startswith("INFO: Replacing")
    ops = [{"index": 0, "op_name": "CONV_2D", "inputs": np.array([0, 1]),
            "outputs": np.array([2])},
           {"index": 1, "op_name": "DELEGATE", "inputs": np.array([0, 1]),
            "outputs": np.array([2])}]
    result = delegation(ops, lines)
    assert result["runtime_log"] == {"replaced": 5, "of": 6,
                                     "delegate": "TfLiteXNNPackDelegate", "partitions": 2}
    assert (result["partitions"], result["delegated_nodes"], result["total_nodes"]) == (1, 1, 1)


def test_user_saved_model_directories_convert_each_their_own(tmp_path, digits_data) -> None:
    """Two SavedModel directories of one graph with different weights: each TFLite SUT runs
    its own weights. saved_model.pb is the same in both (the weights are in variables/), so a
    cache keyed by it alone handed the second model the first one's conversion."""
    pytest.importorskip("tensorflow")
    from tests.sut.saved_models import (
        same_graph_other_weights,
        saved_model_scores,
        tiny_saved_model,
    )

    size, classes = DIGITS_SPEC.input_size, DIGITS_SPEC.num_classes
    first = tiny_saved_model(tmp_path / "user-model-a", size, classes, seed=0)
    second = same_graph_other_weights(
        first, tiny_saved_model(tmp_path / "other", size, classes, seed=1),
        tmp_path / "user-model-b")
    assert (first / "saved_model.pb").read_bytes() == (second / "saved_model.pb").read_bytes()
    x = _nhwc(digits_data.eval_x[:16])
    outputs = []
    for folder in (first, second):
        options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=1,
                             model_path=str(folder))
        backend = create("tflite-fp32", options, DIGITS_SPEC, None)
        backend.load()
        outputs.append(backend.predict(x))
        np.testing.assert_allclose(outputs[-1], saved_model_scores(folder, x), atol=1e-5)
        assert backend.artifact.weights == f"user: SavedModel {folder.name}"
        assert backend.describe()["executed_precision"] == "fp32"
    assert not np.allclose(outputs[0], outputs[1])


def test_saved_model_directory_through_run_py(tmp_path) -> None:
    """README: a SavedModel directory is a --model-path for the TFLite SUTs (once refused by
    the parent's check as 'does not exist')."""
    pytest.importorskip("tensorflow")
    from tests.conftest import run_cli
    from tests.sut.saved_models import tiny_image_folder, tiny_saved_model

    folder = tiny_saved_model(tmp_path / "my-model", 224, 1000)
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 500\n")
    proc = run_cli("--scenario", "Offline", "--sut", "tflite-fp32", "--model", "resnet50",
                   "--model-path", str(folder), "--dataset-path",
                   str(tiny_image_folder(tmp_path / "images")), "--user-conf", str(conf),
                   "--output", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next((tmp_path / "out").glob("*-tflite-fp32/resnet50/Offline/performance/run_1"))
    results = json.loads((run / "results.json").read_text())
    assert results["summary"]["validity"] == "VALID"
    assert results["model"]["weights"] == "user: SavedModel my-model"
    assert results["sut"]["executed_precision"] == "fp32"
