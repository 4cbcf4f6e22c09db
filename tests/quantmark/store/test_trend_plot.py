"""``history --plot``: a PNG, one panel per series, written atomically."""

from __future__ import annotations

import pytest

from quantmark.ground.errors import UserError
from quantmark.store.points import Point, SeriesKey
from quantmark.store.trend_plot import by_series, plot_history

PNG = b"\x89PNG\r\n\x1a\n"


def _points() -> list[Point]:
    a = SeriesKey("resnet50", "ort-fp32", "Offline", "samples_per_s")
    b = SeriesKey("resnet50", "ort-int8", "SingleStream", "latency_ms")
    return [Point(a, "1", "2026-11-01T10:00:00Z", 100.0, 95.0, 104.0, runs=(95, 100, 104)),
            Point(a, "2", "2026-11-02T10:00:00Z", 90.0, None, None, runs=(90,),
                  disturbed=True),
            Point(a, "3", "2026-11-03T10:00:00Z", None, None, None, valid=False,
                  invalid_runs=1, left_out_runs=(20.0,)),
            Point(b, "4", "2026-11-01T10:00:00Z", 3.1, None, None, runs=(3.1,))]


def test_one_panel_per_series_in_one_png(tmp_path):
    path = tmp_path / "trend.png"
    assert [key.sut for key, _ in by_series(_points())] == ["ort-fp32", "ort-int8"]
    assert plot_history(_points(), path) == 2
    assert path.read_bytes().startswith(PNG)
    assert [p.name for p in tmp_path.iterdir()] == ["trend.png"]  # no temp file left


def test_a_plot_that_is_not_a_png_is_one_line(tmp_path):
    with pytest.raises(UserError, match="give a .png file name"):
        plot_history(_points(), tmp_path / "trend.pdf")
