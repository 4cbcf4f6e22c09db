"""TensorFlow layer profiling on the trained digits CNN: the SUTs as create() builds them, their
serving function frozen and traced in a Session (step stats); tf-xla is one line, not a crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("onnx2tf")

from quantmark.ground.errors import SutError, UserError  # noqa: E402
from quantmark.sut.interface import SutOptions  # noqa: E402
from quantmark.sut.profiling import CATEGORIES, Profile  # noqa: E402
from quantmark.sut.tensorflow import backend as tf_sut  # noqa: E402
from quantmark.sut.tensorflow import profile as tp  # noqa: E402
from tests.digits_model import DIGITS_SPEC, DigitsData  # noqa: E402


def _backend(name: str, weights: Path) -> tf_sut.TensorFlowBackend:
    options = SutOptions(model=DIGITS_SPEC.name, scenario="Offline", threads=0,
                         model_path=str(weights))
    backend = tf_sut.create(name, options, DIGITS_SPEC, None)
    backend.load()
    return backend


def _samples(digits_data: DigitsData) -> np.ndarray:
    return np.ascontiguousarray(digits_data.eval_x[:8].transpose(0, 2, 3, 1))


@pytest.fixture(scope="module")
def fp32(digits_weights: Path):
    backend = _backend("tf-fp32", digits_weights)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def fp32_profile(fp32, digits_data: DigitsData) -> Profile:
    return tp.profile(fp32, _samples(digits_data), iterations=5, warmup=2)


def _compute(profile: Profile, op: str) -> list:
    return [layer for layer in profile.layers if layer.category == "compute"
            and layer.op_type == op]


def test_fp32_profile_has_every_layer_of_the_digits_cnn(fp32_profile: Profile) -> None:
    profile = fp32_profile
    assert (profile.sut, profile.framework) == ("tf-fp32", "tensorflow")
    assert (profile.batch_size, profile.iterations, profile.method) == (8, 5, tp.PROFILER)
    assert profile.layers and all(layer.median_ms > 0 for layer in profile.layers)
    assert {layer.category for layer in profile.layers} <= set(CATEGORIES)
    convs = _compute(profile, "Conv2D") + _compute(profile, "FusedConv2D")
    assert len(convs) == 3  # the digits CNN's three convolutions, each its own row
    assert all(conv.precision == "fp32" and conv.kernel.endswith("Conv2D") for conv in convs)
    assert len([layer for layer in profile.layers if "MatMul" in layer.op_type]) == 1
    assert len([layer for layer in profile.layers if layer.op_type == "MaxPool"]) == 2
    # the freezing's call scopes are gone from the names; rows in execution order
    assert not any(layer.name.startswith("PartitionedCall") for layer in profile.layers)
    names = [layer.name for layer in profile.layers]
    assert names.index(convs[0].name) < names.index(convs[1].name) < names.index(convs[2].name)
    assert profile.end_to_end_ms > 0
    assert 0 < profile.layer_sum_ms <= 3 * profile.end_to_end_ms


def test_amp_convolutions_run_bf16_and_its_casts_are_overhead(digits_weights: Path,
                                                              digits_data: DigitsData) -> None:
    """grappler's bf16 rewrite in the profiled Session, as tf-amp runs; closing the backend
    restores the process's options (see the backend's tests)."""
    backend = _backend("tf-amp", digits_weights)
    try:
        profile = tp.profile(backend, _samples(digits_data), iterations=3, warmup=1)
    finally:
        backend.close()
    convs = _compute(profile, "Conv2D") + _compute(profile, "FusedConv2D")
    assert len(convs) == 3 and {conv.precision for conv in convs} == {"bf16"}
    casts = [layer for layer in profile.layers if layer.op_type == "Cast"]
    assert casts and {cast.category for cast in casts} == {"overhead"}
    assert {cast.precision for cast in casts} >= {"bf16", "fp32"}  # into bf16 and back


def test_xla_is_one_line_not_a_traceback(digits_weights: Path, digits_data: DigitsData) -> None:
    backend = _backend("tf-xla", digits_weights)
    try:
        with pytest.raises(SutError, match="XLA compiles the whole function") as caught:
            tp.profile(backend, _samples(digits_data), iterations=3, warmup=1)
    finally:
        backend.close()
    assert "\n" not in str(caught.value)


def test_bad_requests_are_user_errors(fp32, digits_data: DigitsData) -> None:
    with pytest.raises(UserError, match="iterations >= 1"):
        tp.profile(fp32, _samples(digits_data), iterations=0, warmup=0)
    with pytest.raises(UserError, match="at least one sample"):
        tp.profile(fp32, _samples(digits_data)[:0], iterations=1, warmup=0)
    with pytest.raises(UserError, match="TensorFlow SUT"):
        tp.profile(object(), _samples(digits_data), iterations=1, warmup=0)


def test_op_categories_and_names() -> None:
    assert tp.executed_op("_MklNativeConv2D") == "Conv2D"
    assert tp.executed_op("_FusedConv2D") == "FusedConv2D"
    assert tp.executed_op("_Arg") == "_Arg" and tp.executed_op("Conv2D") == "Conv2D"
    for kernel in ("Transpose", "_MklTranspose", "Cast", "QuantizeV2", "Dequantize"):
        assert tp.category(kernel) == "overhead", kernel
    for kernel in ("_Arg", "_Retval", "Const", "NoOp", "Identity", "Reshape"):
        assert tp.category(kernel) == "other", kernel
    for kernel in ("_MklNativeFusedConv2D", "MatMul", "Relu", "AddV2", "_MklNativeMaxPool"):
        assert tp.category(kernel) == "compute", kernel
    assert tp.short_name("StatefulPartitionedCall/PartitionedCall/m/conv/Conv2D") == \
        "m/conv/Conv2D"
    assert tp.short_name("PartitionedCall") == "PartitionedCall"


@pytest.mark.slow
def test_profile_command_tf_amp_against_tf_fp32(tmp_path: Path) -> None:
    """As a user runs it: both sides profiled (tf-amp's rewrite in its own process), the
    convolutions paired, bf16 against fp32."""
    from quantmark.ground.records import load_record
    from tests.conftest import run_cli

    proc = run_cli("profile", "--sut", "tf-amp", "--against", "tf-fp32", "--model", "digits-cnn",
                   "--iterations", "5", "--warmup", "1", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = next(tmp_path.rglob("profile-tf-amp-vs-tf-fp32/results.json"))
    record = load_record(results, kind="profile")
    assert record.unsupported == {}
    counts = []
    for side, precision in ((record.test, "bf16"), (record.reference, "fp32")):
        convs = [row for row in side["layers"] if "Conv2D" in row["op_type"]]
        assert convs and {row["precision"] for row in convs} == {precision}
        assert all(row["median_ms"] > 0 for row in convs)
        counts.append(len(convs))
    assert counts[0] == counts[1]  # the CLI's digits-cnn: the same convolutions both sides
    paired = [row for row in record.layers if row["test"] and row["reference"]
              and "Conv2D" in row["test"]["op_type"]]
    assert len(paired) == counts[0]
    assert "tf-amp: INT8 compute" in proc.stdout and "layers sum to" in proc.stdout


def test_step_stats_fold_into_median_rows_in_start_order() -> None:
    """Hand-written step stats: _SOURCE dropped, a node run twice in one step summed, the
    kernel read from the timeline label where no partition graph names the node."""
    from tensorflow.core.framework import step_stats_pb2

    def step(conv_us: int, relu_us: tuple[int, int]) -> step_stats_pb2.StepStats:
        stats = step_stats_pb2.StepStats()
        device = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
        for name, label, start, took in (
                ("_SOURCE", "_SOURCE = NoOp()", 0, 1),
                ("m/relu", "m/relu = Relu(m/conv)", 30, relu_us[0]),
                ("m/conv", "m/conv = _MklNativeConv2D(images, w)", 10, conv_us),
                ("m/relu", "m/relu = Relu(m/conv)", 40, relu_us[1])):
            device.node_stats.add(node_name=name, timeline_label=label, all_start_micros=start,
                                  op_end_rel_micros=took)
        return stats

    found = tp.rows([step(100, (2, 3)), step(300, (1, 1)), step(200, (4, 4))], nodes={})
    assert [(row.name, row.kernel, row.calls) for row in found] == [
        ("m/conv", "_MklNativeConv2D", 1), ("m/relu", "Relu", 2)]
    assert found[0].times_s == pytest.approx([100e-6, 300e-6, 200e-6])
    assert found[1].times_s == pytest.approx([5e-6, 2e-6, 8e-6])
