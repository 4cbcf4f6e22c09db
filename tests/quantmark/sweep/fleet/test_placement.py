"""Node resources from a fingerprint, placement rules, and what a cell requests."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.sweep.placement import (
    SLOT,
    describe,
    fits,
    node_name,
    node_resources,
    parse_rule,
    requirements,
)

XEON = {"arch": "x86_64", "cpu_flags": ["avx2", "avx512f", "avx512_vnni", "amx_int8"],
        "board": {"model": None}}
PI5 = {"arch": "aarch64", "cpu_flags": ["asimd", "asimddp"],
       "board": {"model": "Raspberry Pi 5 Model B Rev 1.0", "cpu_core": "Cortex-A76"}}


def test_a_node_advertises_its_name_arch_instruction_sets_board_and_one_slot():
    xeon = node_resources("box-1", XEON)
    assert xeon[SLOT] == 1.0
    for fact in ("node:box-1", "arch:x86_64", "isa:amx_int8", "isa:amx", "isa:vnni",
                 "isa:avx512"):
        assert f"quantmark_{fact}" in xeon
    assert not any(key.startswith("quantmark_board:") for key in xeon)
    pi = node_resources("Pi 5 (lab)", PI5)
    for fact in ("node:pi-5-lab", "arch:aarch64", "isa:dotprod", "core:cortex-a76",
                 "board:raspberry-pi",
                 "board:raspberry-pi-5", "board:raspberry-pi-5-model-b-rev-1.0"):
        assert f"quantmark_{fact}" in pi
    assert "quantmark_isa:amx" not in pi
    assert node_name(pi) == "pi-5-lab" and node_name({"CPU": 2.0}) is None


def test_rules_add_requirements_to_the_suts_they_match():
    rules = [parse_rule("tflite-*:arch=aarch64"), parse_rule("*:isa=dotprod"),
             parse_rule("ort-int8:node=Pi 5 (lab),gpu")]
    tflite = requirements("tflite-int8", "cpu", rules)
    assert tflite == {SLOT: 1.0, "quantmark_arch:aarch64": 1.0, "quantmark_isa:dotprod": 1.0,
                      "quantmark_sut:tflite-int8": 1.0}
    assert fits(tflite, node_resources("pi", PI5, ["tflite-fp32", "tflite-int8"]))
    assert not fits(tflite, node_resources("pi", PI5, ["tflite-fp32"]))  # not installed there
    assert not fits(tflite, node_resources("box", XEON, ["tflite-int8"]))
    assert requirements("trt-int8", "gpu", [])["GPU"] == 1.0  # a GPU SUT needs Ray's GPU
    ort = requirements("ort-int8", "cpu", rules)
    assert ort["GPU"] == 1.0 and "quantmark_node:pi-5-lab" in ort
    assert describe(ort) == "gpu, isa=dotprod, node=pi-5-lab, sut=ort-int8"
    assert describe(requirements("ort-fp32", "cpu", [], runs_sut=False)) == "any quantmark node"


@pytest.mark.parametrize("text", ["tflite-int8", ":arch=aarch64", "*:", "*:cpu=fast",
                                  "*:arch=", "*:gpu=2"])
def test_a_bad_rule_is_one_line_naming_it(text):
    with pytest.raises(UserError) as error:
        parse_rule(text)
    message = str(error.value)
    assert repr(text) in message and "\n" not in message and "--place" in message


def test_a_node_name_needs_a_letter_or_digit():
    with pytest.raises(UserError, match="--name"):
        node_resources("--", XEON)
