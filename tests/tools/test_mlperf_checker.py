"""The checker runner's only logic: giving a checker that lacks a round a copy of its newest."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("mlperf_checker", ROOT / "tools/mlperf_checker.py")
mlperf_checker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mlperf_checker)


def fake_constants() -> SimpleNamespace:
    return SimpleNamespace(
        MODEL_CONFIG={"v5.1": {"seeds": {"qsl_rng_seed": 1}, "models": ["resnet"]},
                      "v6.0": {"seeds": {"qsl_rng_seed": 2}, "models": ["resnet", "new"]}},
        RESULT_PATH={"v5.1": "old/{x}", "v6.0": "new/{x}"},
        UNRELATED={"a": 1},
    )


def test_missing_round_copies_the_newest_with_the_given_seeds():
    constants = fake_constants()
    assert mlperf_checker.add_round(constants, "v6.1", {"qsl_rng_seed": 3}) == "v6.0"
    assert constants.MODEL_CONFIG["v6.1"]["models"] == ["resnet", "new"]
    assert constants.MODEL_CONFIG["v6.1"]["seeds"] == {"qsl_rng_seed": 3}
    assert constants.MODEL_CONFIG["v6.0"]["seeds"] == {"qsl_rng_seed": 2}  # a copy, not shared
    assert constants.RESULT_PATH["v6.1"] == "new/{x}"
    assert "v6.1" not in constants.UNRELATED


def test_known_round_is_left_alone():
    constants = fake_constants()
    assert mlperf_checker.add_round(constants, "v6.0", {"qsl_rng_seed": 9}) is None
    assert constants.MODEL_CONFIG["v6.0"]["seeds"] == {"qsl_rng_seed": 2}
