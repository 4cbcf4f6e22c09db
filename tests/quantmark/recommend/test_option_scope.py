"""Which ``--sut-option`` values the recommend space tries is the SUT's registry entry's say
(``SutInfo.option_scopes``): the space is the one recommend searched when the rules were a table
of its own (``OPTION_MATTERS``), for every SUT, scenario and batch."""

from __future__ import annotations

import pytest

from quantmark.recommend import space as space_module
from quantmark.recommend.space import DEFAULT_BATCHES, option_variants
from quantmark.sut.info import OptionScope, SutInfo
from quantmark.sut.registry import SUTS

BATCHES = (1, 8, 32)


def _old_rule(info: SutInfo, key: str, scenario: str, batch: int) -> bool:
    """recommend's table before the registry said it (``space.OPTION_MATTERS``), kept as the
    oracle of this test: an option not named here could always change the run."""
    rules = {"tflite_invoke": batch > 1, "tflite_quantize": info.precision_key == "int8",
             "ov_api": scenario != "SingleStream", "ov_streams": scenario != "SingleStream"}
    return rules.get(key, True)


@pytest.fixture(autouse=True)
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO's streams fit up to the usable CPUs: pin them."""
    monkeypatch.setattr(space_module, "cpu_counts", lambda: (4, 4, 4))


@pytest.mark.parametrize("cell, expected", [
    (("tflite-int8", "Offline", 8), [(("tflite_invoke", "batched"), ("tflite_quantize", "at-load")),
                                     (("tflite_invoke", "per-sample"),
                                      ("tflite_quantize", "at-load"))]),
    (("tflite-int8", "SingleStream", 1), [(("tflite_quantize", "at-load"),)]),
    (("tflite-fp32", "Offline", 1), [()]),
    (("tflite-fp32", "Offline", 8), [(("tflite_invoke", "batched"),),
                                     (("tflite_invoke", "per-sample"),)]),
    (("ov-int8", "SingleStream", 1), [()]),
    (("ov-fp32", "Server", 1), [((("ov_api", api), ("ov_streams", streams)))
                                for api in ("sync", "async")
                                for streams in ("auto", "1", "2", "4")]),
    (("trt-int8", "SingleStream", 1), [(("trt_int8_route", "calibrator"),),
                                       (("trt_int8_route", "qdq"),)]),
    (("torch-cuda-compile", "SingleStream", 1), [(("cuda_graphs", "on"),),
                                                 (("cuda_graphs", "off"),)]),
    (("ort-fp32", "Offline", 32), [()]),
])
def test_the_space_of_a_few_suts_is_pinned(cell: tuple[str, str, int],
                                           expected: list[tuple]) -> None:
    sut, scenario, batch = cell
    assert option_variants(SUTS[sut], scenario, batch, {}) == expected


def test_every_sut_scenario_and_batch_tries_the_options_the_old_table_let_through() -> None:
    checked = 0
    for info in SUTS.values():
        for scenario in DEFAULT_BATCHES:
            for batch in BATCHES:
                keys = {key for variant in option_variants(info, scenario, batch, {})
                        for key, _ in variant}
                assert keys == {key for key, _ in info.options
                                if _old_rule(info, key, scenario, batch)}, \
                    (info.name, scenario, batch)
                checked += bool(info.options)
    assert checked >= 11 * len(DEFAULT_BATCHES) * len(BATCHES)  # tflite, ov, trt, torch, ort


def test_a_scope_is_data_of_the_entry_that_declares_the_option() -> None:
    lite = SUTS["tflite-fp32"]
    assert not lite.option_matters("tflite_quantize", "Offline", 8)  # not full-integer
    assert SUTS["tflite-int8"].option_matters("tflite_quantize", "Offline", 8)
    assert not lite.option_matters("tflite_invoke", "Offline", 1)
    assert not SUTS["ov-int8"].option_matters("ov_api", "SingleStream", 1)
    assert SUTS["trt-int8"].option_matters("trt_int8_route", "SingleStream", 1)  # no scope
    scope = OptionScope(scenarios=("Offline",), min_batch=4, precision_keys=("int8",))
    assert scope.reaches("int8", "Offline", 4)
    assert not scope.reaches("int8", "Server", 4)
    assert not scope.reaches("int8", "Offline", 2)
    assert not scope.reaches("fp32", "Offline", 4)


def test_a_scope_for_an_option_the_sut_does_not_declare_is_refused() -> None:
    from quantmark.sut.registry import _check_declared

    info = SutInfo("x-fp32", "x", "fp32", "cpu", "x", (), None, precision_key="fp32",
                   option_scopes=(("x_mode", OptionScope(min_batch=2)),))
    with pytest.raises(TypeError, match="x_mode"):
        _check_declared(info, "x.suts.FRAMEWORK")
