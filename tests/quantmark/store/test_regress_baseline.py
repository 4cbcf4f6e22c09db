"""``--baseline`` read as a tag, a date or a quantmark version, and refused in one line when it
names nothing in the store or two things at once."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_baseline import Baseline, instant, parse_baseline

KEY = SeriesKey("m", "ort-fp32", "Offline", "samples_per_s")


def _point(when: str, tags: tuple[str, ...] = (), version: str = "0.1.0") -> Point:
    return Point(KEY, when, when, 1.0, None, None, (1.0,), tags=tags, version=version)


POINTS = [_point("2026-10-01T10:00:00Z", ("nightly",), "0.1.0"),
          _point("2026-11-02T10:00:00+00:00", ("release",), "0.2.0"),
          _point("2026-11-20T10:00:00", (), "0.2.0")]


def test_no_baseline_selects_every_job():
    baseline = parse_baseline(None, POINTS)
    assert baseline == Baseline() and all(baseline.selects(p) for p in POINTS)


def test_a_tag_a_version_and_a_date_are_recognised():
    tag = parse_baseline("nightly", POINTS)
    assert (tag.kind, [tag.selects(p) for p in POINTS]) == ("tag", [True, False, False])
    version = parse_baseline("0.2.0", POINTS)
    assert (version.kind, [version.selects(p) for p in POINTS]) == ("version",
                                                                     [False, True, True])
    date = parse_baseline("2026-11-01", POINTS)
    assert (date.kind, [date.selects(p) for p in POINTS]) == ("date", [True, False, False])
    assert date.text() == "jobs before 2026-11-01"


def test_naive_and_zulu_times_are_utc():
    assert instant("2026-11-20T10:00:00") == instant("2026-11-20T10:00:00Z")
    assert instant("2026-11-20T12:00:00+02:00") == instant("2026-11-20T10:00:00Z")


def test_unknown_baseline_is_one_line_naming_what_the_store_has():
    with pytest.raises(UserError) as caught:
        parse_baseline("weekly", POINTS)
    message = str(caught.value)
    assert "\n" not in message and "nightly" in message and "0.2.0" in message


def test_a_word_that_is_both_tag_and_version_needs_a_prefix():
    points = POINTS + [_point("2026-11-21T10:00:00Z", ("0.1.0",), "0.2.0")]
    with pytest.raises(UserError, match="tag:0.1.0 or version:0.1.0"):
        parse_baseline("0.1.0", points)
    assert parse_baseline("tag:0.1.0", points).kind == "tag"
    assert parse_baseline("version:0.1.0", points).kind == "version"


def test_prefixed_values_are_checked():
    with pytest.raises(UserError, match="no job in the store has that tag"):
        parse_baseline("tag:weekly", POINTS)
    with pytest.raises(UserError, match="is not a date"):
        parse_baseline("date:yesterday", POINTS)
