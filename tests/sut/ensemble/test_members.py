"""``--ensemble MODEL@SUT,...``: parsed into members, every mistake one line naming it."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.sut.ensemble.members import (
    Member,
    canonical,
    ensemble_name,
    parse_members,
    split_threads,
    sut_name,
)


def test_members_parse_in_order_with_spaces_trimmed() -> None:
    members = parse_members("efficientnet-lite0@ort-int8, resnet50@ov-int8")
    assert members == (Member("efficientnet-lite0", "ort-int8"), Member("resnet50", "ov-int8"))
    assert canonical(members) == "efficientnet-lite0@ort-int8,resnet50@ov-int8"
    assert ensemble_name(members) == "efficientnet-lite0@ort-int8+resnet50@ov-int8"


@pytest.mark.parametrize(("text", "named"), [
    ("efficientnet-lite0", "write MODEL@SUT"),
    ("efficientnet-lite0@ort-int8", "at least two"),
    ("nosuchnet@ort-int8,resnet50@ort-fp32", "nosuchnet@ort-int8"),
    ("resnet50@nosuchsut,resnet50@ort-fp32", "resnet50@nosuchsut"),
    ("resnet50@ort-fp32,resnet50@ort-fp32", "twice"),
    ("resnet50@,resnet50@ort-fp32", "write MODEL@SUT"),
])
def test_bad_specs_are_one_line_errors(text: str, named: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_members(text)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_sut_names_keep_modes_and_combines_apart() -> None:
    assert sut_name("sequential", "mean") == "ensemble-sequential"
    assert sut_name("concurrent", "vote") == "ensemble-concurrent-vote"
    with pytest.raises(UserError, match="choose sequential, concurrent"):
        sut_name("parallel", "mean")
    with pytest.raises(UserError, match="choose mean, vote"):
        sut_name("sequential", "max")


@pytest.mark.parametrize(("total", "count", "split"), [
    (2, 3, [1, 1, 1]), (8, 3, [3, 3, 2]), (4, 2, [2, 2]), (0, 2, [1, 1])])
def test_concurrent_members_split_the_cores(total: int, count: int, split: list[int]) -> None:
    assert split_threads(total, count) == split
