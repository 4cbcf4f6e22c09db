"""TensorFlow SUTs on the digits model: same function as torch, XLA proven, bf16 proven.

Tolerances (digits logits reach about 8): tf-fp32 vs torch and tf-xla vs tf-fp32 agree to
1e-4 absolute (measured ~3e-6: same FP32 math, different kernels and summation orders). tf-amp
runs its convolutions in bf16 (8-bit mantissa), so it is held to top-1 within 1 point instead.
tf-amp runs in a subprocess: grappler's rewrite options are process-global and must stay set
for the life of the process (see ``sut.tensorflow.backend``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import SutOptions
from tests.conftest import run_cli, run_json
from tests.digits_model import DIGITS_SPEC, DigitsData, top1
from tests.sut.saved_models import saved_model_scores, tiny_image_folder, tiny_saved_model

pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")

from quantmark.sut.tensorflow import backend as tf_sut  # noqa: E402 - only once TensorFlow is known present
from quantmark.sut.tensorflow import executed_graph as tf_graph  # noqa: E402

ATOL = 1e-4


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def _predict_all(backend: Any, x: np.ndarray, batch: int = 64) -> np.ndarray:
    return np.concatenate([backend.predict(x[i:i + batch]) for i in range(0, len(x), batch)])


def _backend(name: str, weights: Path, threads: int = 0) -> tf_sut.TensorFlowBackend:
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=threads,
                         model_path=str(weights))
    backend = tf_sut.create(name, options, DIGITS_SPEC, None)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def fp32(digits_weights: Path) -> tf_sut.TensorFlowBackend:
    return _backend("tf-fp32", digits_weights)


@pytest.fixture(scope="module")
def xla(digits_weights: Path) -> tf_sut.TensorFlowBackend:
    return _backend("tf-xla", digits_weights)


@pytest.fixture(scope="module")
def fp32_scores(fp32: tf_sut.TensorFlowBackend, digits_data: DigitsData) -> np.ndarray:
    return _predict_all(fp32, _nhwc(digits_data.eval_x))


def test_fp32_matches_torch(fp32_scores: np.ndarray, digits_data: DigitsData,
                            digits_weights: Path) -> None:
    import torch

    from tests.digits_model import _build

    model = _build()
    model.load_state_dict(torch.load(digits_weights))
    with torch.no_grad():
        expected = model.eval()(torch.from_numpy(digits_data.eval_x)).numpy()
    assert fp32_scores.dtype == np.float32 and fp32_scores.shape == expected.shape
    np.testing.assert_allclose(fp32_scores, expected, rtol=0, atol=ATOL)
    assert top1(fp32_scores, digits_data.eval_y) > 90


def test_fp32_evidence(fp32: tf_sut.TensorFlowBackend) -> None:
    info = fp32.describe()
    assert fp32.layout == "NHWC" and fp32.label_offset == 0
    assert info["framework"] == "tensorflow" and info["executed_precision"] == "fp32"
    compute = info["evidence"]["compute"]
    assert set(compute) == {"float32"} and sum(compute["float32"].values()) >= 4  # 3 conv + fc
    assert info["evidence"]["xla"] == {"jit_compile": False}
    assert info["evidence"]["grappler_options"]["auto_mixed_precision_onednn_bfloat16"] is False
    assert Path(info["model_dir"], "saved_model.pb").is_file()


def test_xla_matches_fp32_and_is_compiled(xla: tf_sut.TensorFlowBackend,
                                          fp32_scores: np.ndarray,
                                          digits_data: DigitsData) -> None:
    scores = _predict_all(xla, _nhwc(digits_data.eval_x))
    np.testing.assert_allclose(scores, fp32_scores, rtol=0, atol=ATOL)
    info = xla.describe()
    evidence = info["evidence"]
    assert info["executed_precision"] == "fp32" and evidence["xla"]["jit_compile"] is True
    assert evidence["xla_hlo"]["compute"] == {"f32": {"convolution": 3, "dot": 1}}
    assert evidence["tf_graph_executor_compute_nodes"] == 0
    wrapper = {"_Arg", "_Retval", "Identity", "Const", "NoOp"} | tf_graph.XLA_LAUNCH_OPS
    assert set(evidence["tf_graph_executor_ops"]) <= wrapper
    first = evidence["xla"]["first_call_s"]  # batch 1 at load, then 64 and the 21 left over
    assert {"1", "64", str(len(scores) % 64)} <= set(first) and min(first.values()) > 0


@pytest.mark.parametrize("name", ["tf-fp32", "tf-xla"])
def test_batch_1_and_7_and_threads(name: str, request: pytest.FixtureRequest,
                                   fp32_scores: np.ndarray, digits_data: DigitsData) -> None:
    backend = request.getfixturevalue("fp32" if name == "tf-fp32" else "xla")
    x = _nhwc(digits_data.eval_x[:56])
    np.testing.assert_allclose(backend.predict(x[:1]), fp32_scores[:1], rtol=0, atol=ATOL)
    np.testing.assert_allclose(backend.predict(x[:7]), fp32_scores[:7], rtol=0, atol=ATOL)
    chunks = [(i, x[i:i + size]) for i, size in zip(range(0, 56, 14), (1, 7, 13, 14), strict=True)]
    sequential = {i: backend.predict(chunk) for i, chunk in chunks}
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker(start: int, chunk: np.ndarray) -> None:
        try:
            barrier.wait()
            for rep in range(5):
                results[start, rep] = backend.predict(chunk)
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=pair) for pair in chunks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 20
    for (start, _), scores in results.items():
        np.testing.assert_array_equal(scores, sequential[start])


def test_amp_runs_bf16_within_one_point(digits_weights: Path, digits_data: DigitsData,
                                        fp32_scores: np.ndarray) -> None:
    result = run_json(f"""
        import json
        import numpy as np
        from quantmark.sut.interface import SutOptions
        from quantmark.sut.tensorflow.backend import create
        from tests.digits_model import DIGITS_SPEC, load_digits_data, top1
        options = SutOptions(model="digits-cnn", scenario="Offline", threads=1,
                             model_path={str(digits_weights)!r})
        backend = create("tf-amp", options, DIGITS_SPEC, None)
        backend.load()
        data = load_digits_data()
        x = np.ascontiguousarray(data.eval_x.transpose(0, 2, 3, 1))
        scores = np.concatenate([backend.predict(x[i:i + 64]) for i in range(0, len(x), 64)])
        print(json.dumps({{"top1": top1(scores, data.eval_y), "dtype": str(scores.dtype),
                          "describe": backend.describe()}}))
    """, timeout=240)
    info = result["describe"]
    compute = info["evidence"]["compute"]
    assert info["executed_precision"] == "bf16+fp32" and info["requested_precision"] == "mixed"
    assert sum(compute.get("bfloat16", {}).values()) > 0
    assert info["evidence"]["grappler_options"]["auto_mixed_precision_onednn_bfloat16"] is True
    assert info["intra_op_threads"] == 1 and result["dtype"] == "float32"
    assert abs(result["top1"] - top1(fp32_scores, digits_data.eval_y)) <= 1.0


def test_xla_proof_holds_after_another_saved_model_ran(digits_weights: Path) -> None:
    """What ran before in the process (here: a SavedModel written and loaded by tf-fp32) must
    not count as the XLA function's graph-executor work: a fresh process, in that order."""
    result = run_json(f"""
        import json
        from pathlib import Path
        import tempfile
        from quantmark.sut.interface import SutOptions
        from quantmark.sut.tensorflow.backend import create
        from tests.digits_model import DIGITS_SPEC
        from tests.sut.saved_models import tiny_saved_model
        folder = tiny_saved_model(Path(tempfile.mkdtemp()) / "user-model",
                                  DIGITS_SPEC.input_size, DIGITS_SPEC.num_classes)
        create("tf-fp32", SutOptions(model="digits-cnn", scenario="Offline",
                                     model_path=str(folder)), DIGITS_SPEC, None).load()
        xla = create("tf-xla", SutOptions(model="digits-cnn", scenario="Offline",
                                          model_path={str(digits_weights)!r}), DIGITS_SPEC, None)
        xla.load()
        print(json.dumps(xla.describe()["evidence"]))
    """, timeout=300)
    assert result["tf_graph_executor_compute_nodes"] == 0
    assert result["xla_hlo"]["compute"] == {"f32": {"convolution": 3, "dot": 1}}


def test_refuses_unproven_precision() -> None:
    fp32_only = {"float32": {"_MklNativeFusedConv2D": 3}}
    with pytest.raises(SutError, match="changed nothing"):
        tf_graph.executed_precision("tf-amp", fp32_only, tf_graph.HALF_DTYPES)
    with pytest.raises(SutError, match="refusing to report it as FP32"):
        tf_graph.executed_precision("tf-fp32", {"bfloat16": {"_MklMatMul": 1}},
                                    tf_graph.HALF_DTYPES)
    with pytest.raises(SutError, match="no convolution"):
        tf_graph.executed_precision("tf-fp32", {}, tf_graph.HALF_DTYPES)
    hlo = ("%convolution.1 = f32[1,32,32,16]{3,2,1,0} convolution(f32[1,32,32,3] %p, ...)\n"
           "%dot.2 = bf16[1,10]{1,0} dot(bf16[1,64] %a, bf16[64,10] %b)")
    counts = tf_graph.count_hlo(hlo)["compute"]
    assert counts == {"bf16": {"dot": 1}, "f32": {"convolution": 1}}
    assert tf_graph.executed_precision("tf-amp", counts, tf_graph.HLO_HALF) == "bf16+fp32"


@pytest.mark.parametrize("path", ["model.tflite", "model.xml", "model.engine"])
def test_bad_model_path(path: str) -> None:
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path=path)
    with pytest.raises(UserError, match="SavedModel directory") as caught:
        tf_sut.create("tf-fp32", options, DIGITS_SPEC, None)
    assert "\n" not in str(caught.value)


def test_threads_after_runtime_started(fp32: tf_sut.TensorFlowBackend,
                                       digits_weights: Path) -> None:
    """The runtime is running (fp32 loaded): a different intra-op count cannot apply."""
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=3,
                         model_path=str(digits_weights))
    with pytest.raises(SutError, match="run one TensorFlow SUT per process"):
        tf_sut.create("tf-fp32", options, DIGITS_SPEC, None)


def test_fp32_refuses_onednn_fpmath(fp32: tf_sut.TensorFlowBackend,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN's implicit bf16 leaves the graph's dtypes float32: refuse it up front."""
    backend = tf_sut.TensorFlowBackend("tf-fp32", fp32.artifact, DIGITS_SPEC, 0)
    monkeypatch.setenv("TF_SET_ONEDNN_FPMATH_MODE", "BF16")
    with pytest.raises(SutError, match="TF_SET_ONEDNN_FPMATH_MODE=BF16"):
        backend.load()


def test_user_saved_model_directory_loads_and_predicts(tmp_path: Path,
                                                       digits_data: DigitsData) -> None:
    """A SavedModel directory as --model-path runs in place and computes what it computes."""
    folder = tiny_saved_model(tmp_path / "user-model", DIGITS_SPEC.input_size,
                              DIGITS_SPEC.num_classes)
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path=str(folder))
    backend = tf_sut.create("tf-fp32", options, DIGITS_SPEC, None)
    backend.load()
    x = _nhwc(digits_data.eval_x[:16])
    np.testing.assert_allclose(backend.predict(x), saved_model_scores(folder, x), atol=1e-5)
    info = backend.describe()
    assert info["model_dir"] == str(folder) and info["executed_precision"] == "fp32"
    assert backend.artifact.weights == "user: SavedModel user-model"


def test_folder_without_saved_model_pb_is_one_line(tmp_path: Path) -> None:
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", model_path=str(tmp_path))
    with pytest.raises(UserError, match="without saved_model.pb") as caught:
        tf_sut.create("tf-fp32", options, DIGITS_SPEC, None)
    assert "\n" not in str(caught.value)


def test_saved_model_directory_through_run_py(tmp_path: Path) -> None:
    """README: a SavedModel directory is a --model-path for the TF SUTs (once refused by the
    parent's check as 'does not exist')."""
    folder = tiny_saved_model(tmp_path / "my-model", 224, 1000)
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 500\n")
    proc = run_cli("--scenario", "SingleStream", "--sut", "tf-fp32", "--model", "resnet50",
                   "--model-path", str(folder), "--dataset-path",
                   str(tiny_image_folder(tmp_path / "images")), "--user-conf", str(conf),
                   "--output", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next((tmp_path / "out").glob("*-tf-fp32/resnet50/SingleStream/performance/run_1"))
    results = json.loads((run / "results.json").read_text())
    assert results["summary"]["validity"] == "VALID"
    assert results["model"]["weights"] == "user: SavedModel my-model"
    assert results["sut"]["model_dir"] == str(folder)


def test_closing_tf_amp_leaves_the_process_s_mixed_precision_as_it_found_it(digits_weights):
    """Grappler's options are process-wide: a tf-amp SUT that stayed 'on' after close made
    later FP32 computations in the same process bf16 (a test order dependence)."""
    import tensorflow as tf

    option = tf_sut.AMP_OPTIONS["GPU" if tf.config.list_physical_devices("GPU") else "CPU"]
    tf.config.optimizer.set_experimental_options({option: False})
    backend = _backend("tf-amp", digits_weights)
    try:
        assert tf.config.optimizer.get_experimental_options().get(option) is True
    finally:
        backend.close()
    assert not tf.config.optimizer.get_experimental_options().get(option, False)
