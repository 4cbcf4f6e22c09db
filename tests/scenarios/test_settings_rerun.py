"""A quick rerun's TestSettings are sized by the rate its INVALID first run met, with the
margins of any quick run, and say so (each case in its own process: one FromConfig each)."""

from __future__ import annotations

import pytest

from quantmark.scenarios.settings import LATENCY_MARGIN, OFFLINE_QPS_MARGIN
from tests.conftest import run_json

CODE = """
import json
from quantmark.scenarios.settings import Measurement, SettingsPlan, build_settings
plan = SettingsPlan(scenario="{scenario}", mode="performance", quick=True,
                    loadgen_model="resnet50", known_models=("resnet50",), met_rate={met})
warmup = Measurement(latency_s=0.004, batch_latency_s=0.016, batch_size=8)
built = build_settings(plan, warmup)
s = built.settings
print(json.dumps({{"qps": s.offline_expected_qps,
                  "ss_ns": s.single_stream_expected_latency_ns,
                  "ms_ns": s.multi_stream_expected_latency_ns, "notes": built.notes}}))
"""


def _settings(scenario: str, met: float) -> dict:
    return run_json(CODE.format(scenario=scenario, met=met), timeout=60)


@pytest.mark.parametrize("scenario, key, expected", [
    ("Offline", "qps", 1000.0 * OFFLINE_QPS_MARGIN),
    ("SingleStream", "ss_ns", 1e9 / 1000.0 * LATENCY_MARGIN),
    ("MultiStream", "ms_ns", 8 * 1e9 / 1000.0 * LATENCY_MARGIN),  # 8 samples a query
])
def test_a_rerun_is_sized_by_the_rate_it_met(scenario: str, key: str, expected: float) -> None:
    rerun = _settings(scenario, 1000.0)
    assert rerun[key] == pytest.approx(expected, rel=1e-6)
    assert any("sized by the 1000 samples/s the INVALID first run met" in n
               for n in rerun["notes"])
    first = _settings(scenario, 0.0)  # the warm-up's: 500 samples/s Offline, 250 at batch 1
    assert first[key] != pytest.approx(expected) and not any("rerun" in n
                                                             for n in first["notes"])
