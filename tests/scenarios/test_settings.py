"""TestSettings from mlperf.conf + user.conf + mode (each case in its own process)."""

from __future__ import annotations

import pytest

from quantmark.scenarios.settings import OFFICIAL_OFFLINE_QPS_MARGIN, OFFLINE_QPS_MARGIN
from tests.conftest import run_json

CODE = """
import json
from quantmark.scenarios.settings import Measurement, SettingsPlan, build_settings
plan = SettingsPlan(scenario="{scenario}", mode="{mode}", quick={quick}, loadgen_model="{model}",
                    known_models=("resnet50", "mobilenetv2"), user_conf={user_conf!r})
m = Measurement(latency_s=0.004, batch_latency_s=0.016, batch_size=8)
built = build_settings(plan, m)
s = built.settings
print(json.dumps({{
    "min_duration_ms": s.min_duration_ms, "min_query_count": s.min_query_count,
    "offline_expected_qps": s.offline_expected_qps,
    "single_stream_expected_latency_ns": s.single_stream_expected_latency_ns,
    "multi_stream_expected_latency_ns": s.multi_stream_expected_latency_ns,
    "server_target_qps": s.server_target_qps,
    "server_target_latency_ns": s.server_target_latency_ns,
    "pcount": s.performance_sample_count_override, "mode": str(s.mode),
    "qsl_rng_seed": s.qsl_rng_seed,
    "applied": built.applied, "notes": built.notes,
    "conf": built.effective_user_conf("{model}", "{scenario}", None)}}))
"""


def _settings(scenario="Offline", mode="performance", quick=True, model="resnet50",
              user_conf=None):
    return run_json(CODE.format(scenario=scenario, mode=mode, quick=quick, model=model,
                                user_conf=user_conf), timeout=60)


def test_official_keeps_mlperf_conf():
    s = _settings(quick=False)
    assert s["min_duration_ms"] == 600_000
    assert s["pcount"] == 1024  # resnet50's official performance sample count
    assert s["qsl_rng_seed"] == 2085463073848966840
    # expected QPS from the measurement (8 samples / 16 ms = 500/s), never guessed, with the
    # official margin: the 600 s run then lasts ~1.1 x 1.25 x 600 s
    assert s["offline_expected_qps"] == pytest.approx(500.0 * OFFICIAL_OFFLINE_QPS_MARGIN)
    assert OFFICIAL_OFFLINE_QPS_MARGIN < OFFLINE_QPS_MARGIN
    assert "min_duration" not in s["applied"]


def test_official_with_a_shortening_user_conf_is_flagged(tmp_path):
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    s = _settings(quick=False, user_conf=str(conf))
    assert s["min_duration_ms"] == 1000  # user.conf as given ...
    assert any("NOT VALID FOR SUBMISSION" in note for note in s["notes"])  # ... and flagged
    assert not any("NOT VALID" in note for note in _settings(quick=False)["notes"])


def test_quick_shortens_and_marks():
    s = _settings(quick=True)
    assert s["min_duration_ms"] == 5_000
    assert s["applied"]["min_duration"] == 5_000
    assert any("NOT VALID FOR SUBMISSION" in note for note in s["notes"])
    assert "resnet50.Offline.min_duration = 5000" in s["conf"]


def test_user_conf_wins_over_quick_and_measurement(tmp_path):
    conf = tmp_path / "user.conf"
    conf.write_text("resnet50.Offline.min_duration = 2500\n*.Offline.target_qps = 123\n")
    s = _settings(quick=True, user_conf=str(conf))
    assert s["min_duration_ms"] == 2500
    assert s["offline_expected_qps"] == pytest.approx(123)
    assert "min_duration" not in s["applied"] and "target_qps" not in s["applied"]


@pytest.mark.parametrize("scenario, field, expected", [
    ("SingleStream", "single_stream_expected_latency_ns", 2_000_000),  # half of 4 ms
    ("MultiStream", "multi_stream_expected_latency_ns", 8_000_000),  # half of one 8-batch
    ("Server", "server_target_qps", 150.0),  # 30% of 8 samples / 16 ms
])
def test_expected_values_come_from_measurement(scenario, field, expected):
    s = _settings(scenario=scenario)
    assert s[field] == pytest.approx(expected, rel=1e-6)


def test_quick_server_raises_latency_bound_only_when_needed():
    s = _settings(scenario="Server")  # resnet50 bound is 15 ms; 15 x 16 ms batch = 240 ms
    assert s["server_target_latency_ns"] == 240_000_000
    official = _settings(scenario="Server", quick=False)
    assert official["server_target_latency_ns"] == 15_000_000


def test_accuracy_mode():
    s = _settings(mode="accuracy")
    assert s["mode"].endswith("AccuracyOnly")


def test_server_capacity_counts_the_harness_per_query_cost():
    from quantmark.scenarios.settings import Measurement

    fast = Measurement(latency_s=0.0004, batch_latency_s=0.0004, batch_size=1,
                       query_path_s=0.0014)
    assert fast.server_capacity == pytest.approx(1 / 0.0014)  # not 1 / 0.0004
    batched = Measurement(latency_s=0.004, batch_latency_s=0.016, batch_size=8,
                          query_path_s=0.005)
    assert batched.server_capacity == pytest.approx(8 / 0.017)


def test_offline_expected_qps_comes_from_the_real_path_when_measured():
    """110,719 samples/s from predict alone against 2,659/s through the harness: LoadGen must
    be told the second, or it issues 40x the samples a quick run has time for."""
    from quantmark.scenarios.settings import Measurement

    fast = Measurement(latency_s=0.0001, batch_latency_s=0.0000723, batch_size=8,
                       path_throughput=2659.0)
    assert fast.offline_rate(workers=1) == 2659.0
    assert Measurement(latency_s=0.004, batch_latency_s=0.016,
                       batch_size=8).offline_rate(workers=2) == pytest.approx(1000.0)
