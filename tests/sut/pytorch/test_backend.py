"""PyTorch CPU SUTs on the trained digits CNN: exactness, accuracy, executed-precision proof,
refusals, thread safety and batch shapes."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.pytorch.backend import create  # noqa: E402
from quantmark.sut.registry import SUTS, factory_module  # noqa: E402
from tests.digits_model import DIGITS_SPEC, ArrayCalibration, top1  # noqa: E402

BATCH = 8
REDUCED = ["torch-bf16", "torch-int8", "torch-int8dyn", "torch-compile"]
#: the SUTs this module's factory builds, as the registry declares them
TORCH_CPU_SUTS = [name for name, info in SUTS.items()
                  if factory_module(info) == "quantmark.sut.pytorch.backend"]


def _options(weights, batch_size: int = BATCH, threads: int = 0) -> SutOptions:
    return SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size=batch_size,
                      threads=threads, model_path=str(weights))


def _reference_model(weights):
    model = DIGITS_SPEC.builder(DIGITS_SPEC.num_classes)
    model.load_state_dict(torch.load(weights, weights_only=True))
    return model.eval()


@pytest.fixture(scope="module")
def backends(digits_weights, digits_calibration):
    """Each torch SUT created and loaded once (torch-compile compiles batch 1 and 8)."""
    built = {}
    for name in TORCH_CPU_SUTS:
        backend = create(name, _options(digits_weights), DIGITS_SPEC, digits_calibration)
        backend.load()
        built[name] = backend
    yield built
    for backend in built.values():
        backend.close()


@pytest.fixture(scope="module")
def scores(backends, digits_data):
    return {name: backend.predict(digits_data.eval_x) for name, backend in backends.items()}


def test_fp32_equals_a_plain_forward_of_the_state_dict(scores, digits_data, digits_weights):
    with torch.inference_mode():
        reference = _reference_model(digits_weights)(torch.from_numpy(digits_data.eval_x))
    assert scores["torch-fp32"].dtype == np.float32
    np.testing.assert_array_equal(scores["torch-fp32"], reference.numpy())


@pytest.mark.parametrize("name", REDUCED)
def test_reduced_precision_keeps_top1_within_one_point(scores, digits_data, name):
    fp32 = top1(scores["torch-fp32"], digits_data.eval_y)
    assert fp32 > 90
    assert scores[name].dtype == np.float32 and scores[name].shape == (len(digits_data.eval_y), 10)
    assert abs(top1(scores[name], digits_data.eval_y) - fp32) <= 1.0


def test_compile_computes_the_fp32_function(scores):
    """Inductor fuses and reorders float sums: logits within 1e-4 of the logit range."""
    reference = scores["torch-fp32"]
    assert np.abs(scores["torch-compile"] - reference).max() <= 1e-4 * np.abs(reference).max()
    assert (scores["torch-compile"].argmax(1) == reference.argmax(1)).all()


def test_executed_precision_evidence(backends):
    info = {name: backend.describe() for name, backend in backends.items()}
    for record in info.values():
        assert record["framework"] == "torch" and record["framework_version"] == torch.__version__
    fp32 = info["torch-fp32"]
    assert fp32["executed_precision"] == "fp32"
    assert fp32["layer_output_dtypes"] == {"Conv2d": {"float32": 3}, "Linear": {"float32": 1}}
    assert fp32["evidence"] == {"fp32_layers": 4}
    bf16 = info["torch-bf16"]
    assert bf16["executed_precision"] == "bf16"
    assert bf16["evidence"] == {"bf16_layers": 4, "fp32_layers": 0}
    int8 = info["torch-int8"]
    assert int8["executed_precision"] == "int8" and int8["quantized_engine"] == "x86"
    assert int8["executed_quantized_ops"]["quantized::conv2d_relu"] == 3  # conv+BN+ReLU fused
    assert int8["executed_quantized_ops"]["quantized::linear"] == 1
    assert int8["evidence"] == {"quantized_compute_ops": 4, "float_compute_ops": 0}
    assert int8["quantize_s"] > 0
    dynamic = info["torch-int8dyn"]
    assert dynamic["executed_precision"] == "int8+fp32"  # only the classifier is quantized
    assert dynamic["evidence"] == {"dynamic_int8_linear": 1, "float_compute_layers": 3}
    compiled = info["torch-compile"]
    assert compiled["executed_precision"] == "fp32"
    assert compiled["evidence"] == {"fp32_layers_eager": 4, "compiled_output_dtype": "float32"}
    assert compiled["compile"]["compiled_batch_sizes"] == [1, BATCH]
    assert set(compiled["compile"]["compile_s"]) == {"1", str(BATCH)}
    assert compiled["compile"]["graph_breaks"] == 0


def test_int8_artifact_is_cached_and_reloads_identically(backends, digits_weights,
                                                         digits_calibration, digits_data):
    again = create("torch-int8", _options(digits_weights), DIGITS_SPEC, digits_calibration)
    again.load()
    assert again.artifact.meta["cached"] is True
    assert again.artifact.path == backends["torch-int8"].artifact.path
    x = digits_data.eval_x[:BATCH]
    np.testing.assert_array_equal(again.predict(x), backends["torch-int8"].predict(x))


def test_int8_that_would_run_fp32_fails_loudly(monkeypatch, tmp_path, digits_weights,
                                               digits_data):
    """convert_fx leaving the model float must fail at load, not be measured as INT8."""
    from torch.ao.quantization import quantize_fx

    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path))  # never cache the broken artifact
    float_model = _reference_model(digits_weights)
    monkeypatch.setattr(quantize_fx, "convert_fx", lambda *_a, **_k: float_model)
    calibration = ArrayCalibration(digits_data.train_x[:16], source="refusal test")
    backend = create("torch-int8", _options(digits_weights), DIGITS_SPEC, calibration)
    with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
        backend.load()


def test_int8dyn_that_quantizes_nothing_fails_loudly(monkeypatch, digits_weights,
                                                     digits_calibration):
    from torch.ao import quantization

    monkeypatch.setattr(quantization, "quantize_dynamic", lambda model, *_a, **_k: model)
    backend = create("torch-int8dyn", _options(digits_weights), DIGITS_SPEC, digits_calibration)
    with pytest.raises(SutError, match="refusing to measure FP32 as INT8"):
        backend.load()


def test_bf16_without_bf16_layers_fails_loudly(monkeypatch, digits_weights, digits_calibration):
    monkeypatch.setattr(torch, "autocast", lambda *_a, **_k: contextlib.nullcontext())
    backend = create("torch-bf16", _options(digits_weights), DIGITS_SPEC, digits_calibration)
    with pytest.raises(SutError, match="refusing to measure FP32 as BF16"):
        backend.load()


@pytest.mark.parametrize("name", list(TORCH_CPU_SUTS))
def test_concurrent_predict_matches_sequential(backends, digits_data, name):
    backend = backends[name]
    x = digits_data.eval_x
    sizes = [8, 1, 7, 8, 3] * 2
    batches = [x[i:i + size] for i, size in zip(range(0, 200, 20), sizes, strict=True)]
    sequential = [backend.predict(b) for b in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        rounds = [pool.map(backend.predict, batches) for _ in range(4)]
        concurrent = [list(results) for results in rounds]
    for results in concurrent:
        for got, expected in zip(results, sequential, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(TORCH_CPU_SUTS))
def test_batch_1_and_7(backends, digits_data, name):
    backend = backends[name]
    x = digits_data.eval_x[:BATCH]
    full = backend.predict(x)
    one, seven = backend.predict(x[:1]), backend.predict(x[:7])
    assert one.shape == (1, 10) and seven.shape == (7, 10)
    assert one.dtype == seven.dtype == np.float32
    assert (seven.argmax(1) == full[:7].argmax(1)).all() and one.argmax(1) == full[0].argmax()
    if name != "torch-int8dyn":  # dynamic INT8 scales activations per batch: not batch-exact
        tolerance = 2e-2 if name == "torch-bf16" else 1e-4
        scale = np.abs(full).max()
        assert np.abs(seven - full[:7]).max() <= tolerance * scale
        assert np.abs(one - full[:1]).max() <= tolerance * scale


def test_compile_never_recompiles_after_load(digits_weights):
    """In its own process, as a run is: dynamo's graph counter is process-wide, so compiles
    of other backends in this test process would blur it."""
    from tests.conftest import run_json

    record = run_json(f"""
        import json
        from quantmark.sut.interface import SutOptions
        from quantmark.sut.pytorch.backend import create
        from tests.digits_model import DIGITS_SPEC, load_digits_data
        x = load_digits_data().eval_x
        options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", batch_size={BATCH},
                             model_path={str(digits_weights)!r})
        backend = create("torch-compile", options, DIGITS_SPEC, None)
        backend.load()
        for size in (1, 2, 7, 8, 9, 20):
            backend.predict(x[:size])
        print(json.dumps(backend.describe()["compile"]))
    """, timeout=600)
    assert record["graphs_compiled_after_load"] == 0
    assert record["padded_calls"] > 0  # 2, 7 and the tails of 9 and 20 ran zero-padded


def test_threads_option_sets_torch_threads(digits_weights, digits_calibration):
    before = torch.get_num_threads()
    try:
        backend = create("torch-fp32", _options(digits_weights, threads=1), DIGITS_SPEC,
                         digits_calibration)
        backend.load()
        assert backend.describe()["threads"] == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("file_name", "sut_hint"), [
    ("model.onnx", "ort-fp32"), ("model.tflite", "tflite-int8"), ("model.xml", "ov-fp32"),
    ("saved_model", "tf-fp32"),
])
def test_other_model_formats_are_one_line_user_errors(tmp_path, digits_calibration, file_name,
                                                      sut_hint):
    path = tmp_path / file_name
    path.mkdir() if "." not in file_name else path.write_bytes(b"not a torch file")
    with pytest.raises(UserError, match="take a torch state_dict") as err:
        create("torch-fp32", _options(path), DIGITS_SPEC, digits_calibration)
    assert sut_hint in str(err.value) and "\n" not in str(err.value)


def test_unreadable_state_dict_is_a_user_error(tmp_path, digits_calibration):
    path = tmp_path / "weights.pt"
    path.write_bytes(b"not a torch file")
    with pytest.raises(UserError, match="cannot read weights"):
        create("torch-int8", _options(path), DIGITS_SPEC, digits_calibration)
