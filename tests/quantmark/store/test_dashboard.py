"""The dashboard page: self-contained (inline CSS, inline SVG trends, no external asset),
regressions first with what changed, links that reach the runs' folders from where the page
sits, and written atomically."""

from __future__ import annotations

import math
import re
import sys
import types
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from quantmark.ground.errors import UserError
from quantmark.store import dashboard
from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_simulate import BASE_ENVIRONMENT, job_point
from quantmark.store.verdicts import regress

STEADY = SeriesKey("resnet50", "ort-fp32", "Offline", "samples_per_s")
SLOWED = SeriesKey("resnet50", "ort-int8", "SingleStream", "latency_ms")
DRIFT = (0.0, 0.05, -0.04, 0.02, -0.03, 0.04)


def _store(tmp_path: Path) -> list[Point]:
    """Two series of six jobs, each job with a real folder; the second's newest job is 1.7x
    slower with one thread, and one of its earlier jobs was disturbed."""
    points = []
    for key, base in ((STEADY, 400.0), (SLOWED, 3.0)):
        for j, drift in enumerate(DRIFT):
            newest = j == len(DRIFT) - 1
            level = base * math.exp(drift) * (1.7 if key == SLOWED and newest else 1.0)
            folder = tmp_path / "results" / f"job{j}" / key.sut / key.scenario
            folder.mkdir(parents=True)
            environment = dict(BASE_ENVIRONMENT)
            if key == SLOWED and newest:
                environment["settings.threads"] = 1
            points.append(job_point(key, f"job{j}", j, (level * 0.98, level, level * 1.02),
                                    environment, run_dir=str(folder),
                                    disturbed=key == SLOWED and j == 2, version="0.1.0"))
    return points


class _Collector(HTMLParser):
    """Every tag with its attributes, to check links and assets."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


@pytest.fixture
def page(tmp_path: Path) -> tuple[Path, str, list[Point]]:
    points = _store(tmp_path)
    written = dashboard.write_dashboard(points, regress(points), tmp_path / "site")
    return written, written.read_text(), points


def test_the_page_is_written_into_the_folder_and_is_self_contained(page):
    written, text, _ = page
    assert written.name == "dashboard.html" and written.parent.name == "site"
    parser = _Collector()
    parser.feed(text)
    for tag, attrs in parser.tags:
        assert tag not in ("script", "link", "img", "iframe"), tag  # nothing fetched
        for name in ("src", "href"):
            assert not (attrs.get(name) or "").startswith(("http:", "https:", "//"))
    assert text.count("<svg") == 2 and "<style>" in text and "<?xml" not in text
    assert not list(written.parent.glob(".*.tmp"))  # the atomic write left nothing behind


def test_regressions_come_first_with_what_changed(page):
    _, text, _ = page
    assert text.index(SLOWED.label()) < text.index(STEADY.label())
    assert "class='regressed'" in text
    assert "what changed: settings.threads 2 -&gt; 1" in text
    sections = re.findall(r"<section id='([^']+)'>", text)
    assert sections == ["resnet50-ort-int8-SingleStream-latency_ms",
                        "resnet50-ort-fp32-Offline-samples_per_s"]


def test_links_reach_the_run_folders_from_the_page(page):
    written, text, points = page
    parser = _Collector()
    parser.feed(text)
    links = [a["href"] for tag, a in parser.tags if tag == "a" and not a["href"].startswith("#")]
    assert links and all(not Path(unquote(h)).is_absolute() for h in links)
    reached = {(written.parent / unquote(h)).resolve() for h in links}
    assert reached <= {Path(p.run_dir).resolve() for p in points}
    newest = {Path(p.run_dir).resolve() for p in points if p.job_id == "job5"}
    assert newest <= reached


def test_a_series_without_a_verdict_is_still_shown(tmp_path: Path):
    points = _store(tmp_path)
    written = dashboard.write_dashboard(points, [], tmp_path / "page.html")
    text = written.read_text()
    assert written == tmp_path / "page.html"
    assert text.count("not judged") >= 2 and text.count("<svg") == 2


def test_a_failed_write_leaves_the_previous_page(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    points = _store(tmp_path)
    written = dashboard.write_dashboard(points, [], tmp_path)
    before = written.read_text()

    def broken(*args: object) -> str:
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(dashboard, "trend_svg", broken)
    with pytest.raises(RuntimeError):
        dashboard.write_dashboard(points, regress(points), tmp_path)
    assert written.read_text() == before


def test_the_trend_marks_disturbed_and_newest_jobs(tmp_path: Path):
    points = [p for p in _store(tmp_path) if p.series == SLOWED]
    svg = dashboard.trend_svg(SLOWED, points, None)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert dashboard.NEWEST in svg and dashboard.DISTURBED in svg


class _Stored:
    """A stand-in store holding ``points``."""

    def __init__(self, points: list[Point]) -> None:
        self._points = points

    def __enter__(self) -> _Stored:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def points(self) -> list[Point]:
        return self._points

    def quality_points(self) -> list[object]:
        return []  # no accuracy run


def _stand_in(monkeypatch: pytest.MonkeyPatch, points: list[Point]) -> None:
    module = types.ModuleType("quantmark.store.results_store")
    module.open_store = lambda url: _Stored(points)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "quantmark.store.results_store", module)


def test_the_store_dashboard_judges_and_draws_every_series(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    _stand_in(monkeypatch, _store(tmp_path))
    written, verdicts = dashboard.write_store_dashboard(None, tmp_path / "out")
    assert written == tmp_path / "out" / "dashboard.html"
    assert [v.outcome for v in verdicts] == ["regressed", "no measurable change"]
    assert "regressed" in written.read_text()
    _stand_in(monkeypatch, [])
    with pytest.raises(UserError, match="holds no results"):
        dashboard.write_store_dashboard("sqlite:///empty.sqlite", tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
