"""Which cells must share a node: a model's cells of one framework, an ensemble with its
members alone; and what each cell requests."""

from __future__ import annotations

from quantmark.sweep.fleet.node_groups import Groups
from quantmark.sweep.placement import SLOT, parse_rule
from quantmark.sweep.plan import Cell

ENSEMBLE = "efficientnet-lite0@ort-int8,efficientnet-lite1@ov-fp32"


def _cell(model: str, sut: str, **more) -> Cell:
    return Cell(model, sut, "Offline", 8, **more)


def test_a_models_precisions_of_one_framework_share_a_group():
    groups = Groups([])
    assert groups.key(_cell("resnet50", "ort-fp32")) == groups.key(_cell("resnet50", "ort-int8"))
    assert groups.key(_cell("resnet50", "ort-fp32")) != groups.key(_cell("resnet50", "ov-fp32"))
    assert groups.key(_cell("resnet50", "ort-fp32")) != groups.key(
        _cell("mobilenetv2", "ort-fp32"))


def test_different_requirements_split_a_group():
    groups = Groups([parse_rule("ort-int8:isa=vnni")])
    assert groups.key(_cell("resnet50", "ort-fp32")) != groups.key(_cell("resnet50", "ort-int8"))
    assert groups.needs(_cell("resnet50", "ort-int8")) == {
        SLOT: 1.0, "quantmark_isa:vnni": 1.0, "quantmark_sut:ort-int8": 1.0}


def test_an_ensemble_joins_its_members_groups_and_needs_what_they_need():
    groups = Groups([parse_rule("ov-*:isa=amx")])
    ensemble = _cell("efficientnet-lite0+efficientnet-lite1", "ensemble-sequential",
                     ensemble=ENSEMBLE)
    key = groups.key(ensemble)
    assert groups.key(_cell("efficientnet-lite0", "ort-int8")) == key
    assert groups.key(_cell("efficientnet-lite1", "ov-fp32")) == key
    assert groups.key(_cell("efficientnet-lite0", "ort-fp32")) == key  # same framework, model
    assert groups.key(_cell("efficientnet-lite2", "ort-int8")) != key
    assert groups.needs(ensemble) == {SLOT: 1.0, "quantmark_isa:amx": 1.0,  # every member's SUT
                                      "quantmark_sut:ort-int8": 1.0, "quantmark_sut:ov-fp32": 1.0}
    gpu = _cell("a+b", "ensemble-concurrent", ensemble="resnet50@trt-int8,mobilenetv2@ort-fp32")
    assert groups.needs(gpu)["GPU"] == 1.0
