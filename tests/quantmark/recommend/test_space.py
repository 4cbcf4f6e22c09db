"""The recommend search space: registry-driven, narrowed by the flags, bad input one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.recommend import space as space_module
from quantmark.recommend.space import (
    DEFAULT_BATCHES,
    DEFAULT_LEFT_OUT,
    SLOW_BUILD_VARIANTS,
    cpu_counts,
    parse_settings,
    space,
)
from quantmark.sut import registry
from quantmark.sut.registry import SUTS


@pytest.fixture(autouse=True)
def cpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CPU SUT runs, no GPU SUT does (whatever is installed here); 2 cores, no SMT."""
    def availability(info):
        if info.unavailable:
            return False, info.unavailable
        return (info.device == "cpu" and info.implemented), "no GPU in this test"

    monkeypatch.setattr(registry, "availability", availability)
    monkeypatch.setattr(space_module, "cpu_counts", lambda: (2, 2, 2))


def _cpu_default() -> set[str]:
    return {info.name for info in SUTS.values() if info.device == "cpu" and info.implemented
            and not info.unavailable and info.variant not in SLOW_BUILD_VARIANTS}


def test_default_is_every_available_sut_but_the_compile_ones() -> None:
    found = space("Offline", "digits-cnn")
    assert {c.sut for c in found} == _cpu_default()
    assert "torch-compile" not in {c.sut for c in found} and "ort-int8" in {c.sut for c in found}
    assert not any(SUTS[c.sut].device == "gpu" for c in found)
    assert len({c.key for c in found}) == len(found)  # no candidate twice


@pytest.mark.parametrize("scenario", list(DEFAULT_BATCHES))
def test_batch_sizes_follow_the_scenario(scenario: str) -> None:
    found = space(scenario, "digits-cnn", suts="ort-fp32")
    assert sorted({c.batch_size for c in found}) == sorted(DEFAULT_BATCHES[scenario])
    assert DEFAULT_BATCHES["SingleStream"] == (1,)


def test_every_option_value_of_the_registry_where_it_can_change_the_run() -> None:
    ov = space("Offline", "digits-cnn", suts="ov-int8")
    assert {dict(c.settings)["ov_api"] for c in ov} == set(dict(SUTS["ov-int8"].options)
                                                          ["ov_api"])
    streams = {dict(c.settings)["ov_streams"] for c in ov}
    assert streams == {"auto", *(str(n) for n in (1, 2, 4, 8) if n <= cpu_counts()[0])}
    assert len(ov) == len(DEFAULT_BATCHES["Offline"]) * 2 * len(streams)
    # SingleStream predicts inline: the API cannot matter there
    assert all(c.settings == () for c in space("SingleStream", "digits-cnn", suts="ov-int8"))
    lite = space("Offline", "digits-cnn", suts="tflite-int8,tflite-fp32")
    assert all("tflite_invoke" not in dict(c.settings) for c in lite if c.batch_size == 1)
    assert {dict(c.settings).get("tflite_invoke") for c in lite if c.batch_size == 8} == \
        {"batched", "per-sample"}
    # only the full-integer model quantizes its input; the old timed path is not a default
    assert all("tflite_quantize" not in dict(c.settings) for c in lite if c.sut == "tflite-fp32")
    quantize = {dict(c.settings).get("tflite_quantize") for c in lite if c.sut == "tflite-int8"}
    assert quantize == {"at-load"} and ("tflite_quantize", "per-call") in DEFAULT_LEFT_OUT


def test_settings_narrow_and_can_name_a_value_left_out_by_default() -> None:
    found = space("Offline", "digits-cnn", suts="ov-int8,ort-int8",
                  settings=["ov_api=async"])
    assert {dict(c.settings).get("ov_api") for c in found if c.sut == "ov-int8"} == {"async"}
    assert all(c.settings == () for c in found if c.sut == "ort-int8")
    named = space("Offline", "digits-cnn", suts="tflite-int8",
                  settings={"tflite_quantize": ["per-call"]})
    assert {dict(c.settings)["tflite_quantize"] for c in named} == {"per-call"}
    # more streams than this machine has CPUs: only when named
    many = space("Offline", "digits-cnn", suts="ov-int8", settings=["ov_streams=8"])
    assert {dict(c.settings)["ov_streams"] for c in many} == {"8"}


def test_the_space_is_the_product_of_its_dimensions() -> None:
    found = space("Offline", "digits-cnn", suts="ov-int8,ort-fp32", batch_sizes="1,8",
                  threads="0,1")
    streams = len({dict(c.settings)["ov_streams"] for c in found if c.sut == "ov-int8"})
    # ov: batches x threads x APIs x streams; ort: no options
    assert len(found) == 2 * 2 * 2 * streams + 2 * 2
    assert {c.threads for c in found} == {0, 1}


def test_threads_default_adds_the_core_count_only_where_it_can_differ(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert {c.threads for c in space("Offline", "digits-cnn", suts="ort-fp32")} == {0}
    monkeypatch.setattr(space_module, "cpu_counts", lambda: (4, 4, 2))  # SMT
    assert {c.threads for c in space("Offline", "digits-cnn", suts="ort-fp32")} == {0, 4}
    monkeypatch.setattr(space_module, "cpu_counts", lambda: (2, 8, 2))  # a CPU mask
    assert {c.threads for c in space("Offline", "digits-cnn", suts="ort-fp32")} == {0, 2}


def test_cpu_counts_reads_the_cores_from_sysfs(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    for cpu in range(4):  # two cores, two threads each
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{cpu // 2}\n")
    assert cpu_counts(tmp_path) == (4, 4, 2)
    assert cpu_counts(tmp_path / "missing") == (4, 4, None)


def test_groups_and_names_narrow_and_a_named_compile_sut_comes_in() -> None:
    assert {c.sut for c in space("SingleStream", "digits-cnn", suts="cpu")} == _cpu_default()
    assert {c.sut for c in space("SingleStream", "digits-cnn",
                                 suts=["ort-int8", "torch-compile"])} == \
        {"ort-int8", "torch-compile"}
    # each framework's FP32 first, as a sweep orders them
    assert space("SingleStream", "digits-cnn", suts="ort-int8,ort-fp32")[0].sut == "ort-fp32"


def _one_line(**kwargs) -> str:
    with pytest.raises(UserError) as info:
        space(**{"scenario": "Offline", "model": "digits-cnn", **kwargs})
    text = str(info.value)
    assert "\n" not in text
    return text


def test_bad_input_is_one_line_naming_the_fix() -> None:
    assert "ov_api=sync,async" in _one_line(suts="ov-int8", settings=["ov_apu=async"])
    text = _one_line(suts="ov-int8", settings=["ov_api=fast"])
    assert "ov_api=fast" in text and "sync or async" in text
    assert "--batch-sizes" in _one_line(suts="ov-int8", settings=["threads=2"])
    assert "KEY=V1,V2" in _one_line(suts="ov-int8", settings=["ov_api"])
    assert "ort-cuda-fp32" in _one_line(suts="ort-cuda-fp32")  # not here: why
    assert "unknown SUT" in _one_line(suts="ort-fp64")
    assert "SingleStream" in _one_line(scenario="SingleStream", batch_sizes="1,8")
    assert "at least 1" in _one_line(batch_sizes="0,8")
    assert "at least 0" in _one_line(threads="two")
    assert "Offline" in _one_line(scenario="Offlin")
    assert "performance samples" in _one_line(batch_sizes="100000")


def test_settings_parse_gathers_a_repeated_key() -> None:
    assert parse_settings(["ov_api=sync", " ov_api = async ,sync"]) == \
        {"ov_api": ["sync", "async"]}
    assert parse_settings(None) == {}
