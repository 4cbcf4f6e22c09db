"""run.py diagnose's steps on the digits CNN with ONNX Runtime: a deliberately damaged layer is
found, and keeping it in FP32 wins the accuracy back."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from quantmark.diagnosis import layer_errors  # noqa: E402
from quantmark.diagnosis import steps as job  # noqa: E402
from quantmark.ground.errors import UserError  # noqa: E402
from quantmark.sut.layers import Recipe  # noqa: E402
from quantmark.tasks.catalog import get_task  # noqa: E402
from tests.digits_model import DIGITS_SPEC  # noqa: E402

DAMAGE_FACTOR = 100.0


class ArrayData:
    """``job.Data``'s interface over the digits arrays (NCHW float32)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.labels, self.groups = x, y, None

    def batch(self, layout: str, start: int, stop: int) -> np.ndarray:
        x = self.x[start:stop]
        return x if layout == "NCHW" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))


@pytest.fixture(scope="module")
def setting(digits_data, digits_weights, digits_calibration):
    config = job.DiagnoseConfig(model=DIGITS_SPEC.name, sut="ort-int8", samples=48, chunk=16,
                                worst=3, recover=1, rounds=2, round_seconds=0.05,
                                model_path=str(digits_weights))
    data = ArrayData(digits_data.eval_x, digits_data.eval_y)
    ref = job.build(config, "ort-fp32", DIGITS_SPEC, digits_calibration)
    healthy = job.build(config, "ort-int8", DIGITS_SPEC, digits_calibration)
    return config, data, ref, healthy, digits_calibration


def _top1(backend, data) -> float:
    scores = backend[0].predict(data.x)
    return float((scores.argmax(axis=1) == data.labels).mean() * 100)


def test_the_damaged_layer_is_the_worst_and_the_first_jump_and_k1_recovers_it(setting):
    config, data, ref, healthy, calibration = setting
    matching, _ = job.capture_errors(config, data, healthy, ref)
    target = [pair.name for pair in matching.pairs if pair.op_type == "Conv"][1]
    damaged = job.build(config, "ort-int8", DIGITS_SPEC, calibration,
                        Recipe(damage=((target, DAMAGE_FACTOR),)))
    broken, methods = job.capture_errors(config, data, damaged, ref)
    assert layer_errors.worst(broken.pairs, 1)[0].name == target
    assert layer_errors.first_jump(broken.pairs).name == target
    assert "intermediate tensors" in methods["test"]["method"]
    healthy_top1, damaged_top1 = _top1(healthy, data), _top1(damaged, data)
    assert damaged_top1 < healthy_top1 - 5  # the fault costs accuracy: a real fault

    judge = job.judge_of(config, get_task("classification"), DIGITS_SPEC, data)
    curve = job.recover(config, data, calibration, DIGITS_SPEC, damaged, ref, broken.pairs,
                        judge)
    rows = {row["label"]: row for row in curve["rows"]}
    assert rows["K=1"]["excluded"] == [target]
    assert abs(rows["K=1"]["top1"] - healthy_top1) <= 1.0
    assert rows["K=0"]["top1"] == pytest.approx(damaged_top1, abs=1e-3)
    assert rows["K=1"]["top1_change_vs_k0"]["points"] > 5
    assert rows["reference ort-fp32"]["k"] is None
    for row in curve["rows"]:
        assert len(row["samples_per_s"]["values"]) == config.rounds
        assert row["samples_per_s"]["median"] > 0


def test_a_healthy_int8_model_has_no_layer_far_from_fp32(setting):
    config, data, ref, healthy, _ = setting
    matching, _ = job.capture_errors(config, data, healthy, ref)
    assert min(pair.sqnr_db for pair in matching.pairs) > 15
    assert job.excludable(matching.pairs, 2) == [
        pair.name for pair in layer_errors.worst(matching.pairs, len(matching.pairs))
        if pair.precision == "int8"][:2]


def test_curve_points_and_bad_requests():
    from quantmark.diagnosis.recovery import curve_points

    assert curve_points(8) == [0, 1, 2, 4, 8]
    assert curve_points(5) == [0, 1, 2, 4, 5]
    assert curve_points(1) == [0, 1]
    assert curve_points(0) == [0]
    config = job.DiagnoseConfig(model="efficientnet-lite0", sut="ort-int8")
    assert job.reference_name(config) == "ort-fp32"
    with pytest.raises(UserError, match="against itself"):
        job.check(job.DiagnoseConfig(model="m", sut="ort-int8", against="ort-int8"),
                  "ort-int8", 10)
    with pytest.raises(UserError, match="--samples"):
        job.check(job.DiagnoseConfig(model="m", sut="ort-int8", samples=0), "ort-fp32", 10)
