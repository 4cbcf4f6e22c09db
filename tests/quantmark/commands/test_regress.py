"""``run.py regress`` through the CLI on a stand-in store (``open_store`` patched): one line
per series, regressions first with what changed, exit 1 on a regression and 0 without, bad
input in one line with exit 2, the filters, ``--baseline`` and ``--json``. The last tests run
on the real store, SQLite and PostgreSQL (``tests.quantmark.store.backends``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from quantmark import cli
from quantmark.commands import regress as regress_verb
from quantmark.store.points import Point, SeriesKey
from quantmark.store.regress_simulate import BASE_ENVIRONMENT, job_point
from tests.quantmark.store import backends
from tests.quantmark.store.run_folders import write_run

postgres, store_url = backends.postgres, backends.store_url  # the two back ends
ROOT = Path(__file__).resolve().parents[3]
MODEL = "efficientnet-lite0"
DRIFT = (0.0, 0.05, -0.04, 0.02, -0.03, 0.04, -0.01)


def _series(sut: str, scenario: str, factor: float = 1.0, threads: int = 2) -> list[Point]:
    metric = "latency_ms" if scenario == "SingleStream" else "samples_per_s"
    key = SeriesKey(MODEL, sut, scenario, metric)
    points = []
    for j, drift in enumerate(DRIFT):
        newest = j == len(DRIFT) - 1
        level = (3.0 if metric == "latency_ms" else 300.0) * math.exp(drift)
        level = level * factor if newest else level
        environment = dict(BASE_ENVIRONMENT, **{"settings.threads": threads if newest else 2})
        points.append(job_point(key, f"job{j}", j, (level * 0.98, level, level * 1.02),
                                environment, tags=("nightly",) if j < 3 else (),
                                run_dir=f"/results/job{j}/{sut}"))
    return points


class FakeStore:
    """The store's reading API over a list of points; remembers what it was asked."""

    def __init__(self, points: list[Point]) -> None:
        self._points = points
        self.asked: list[dict] = []
        self.url = "sqlite:///fake.sqlite"

    def __enter__(self) -> FakeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def points(self, **filters: object) -> list[Point]:
        self.asked.append(filters)
        machine = filters.get("machine")
        return [p for p in self._points
                if machine is None or p.environment.get("machine.hostname") == machine]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch):
    def install(points: list[Point]) -> FakeStore:
        fake = FakeStore(points)
        monkeypatch.setattr(regress_verb, "open_store", lambda url: fake)
        return fake

    return install


STEADY = _series("ort-fp32", "Offline") + _series("ort-fp32", "SingleStream")


def test_identical_jobs_exit_zero_with_no_measurable_change(store, capsys):
    store(STEADY + _series("ort-int8", "SingleStream"))
    assert cli.main(["regress"]) == 0
    out = capsys.readouterr().out
    assert out.count("no measurable change: ") == 3
    assert "3 series: 3 no measurable change" in out


def test_one_thread_against_two_is_a_regression_naming_the_threads(store, capsys):
    store(STEADY + _series("ort-int8", "SingleStream", factor=1.8, threads=1))
    assert cli.main(["regress"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"regressed: {MODEL} ort-int8 SingleStream latency_ms")
    assert lines[1].strip().startswith("what changed: settings.threads 2 -> 1")
    assert "noise: own spread over 6 jobs" in lines[0]


def _default_job(jobs: int, slower: float, threads: int) -> list[Point]:
    """The default job's four series (ort-fp32/ort-int8 x Offline/SingleStream), ``jobs`` jobs
    of three repeats; the newest ``slower`` times slower with ``threads``."""
    points = []
    for sut in ("ort-fp32", "ort-int8"):
        for scenario in ("Offline", "SingleStream"):
            factor = slower if scenario == "SingleStream" else 1 / slower  # latency, throughput
            series = _series(sut, scenario, factor=factor, threads=threads)[-jobs:]
            points += [Point(**{**vars(p), "job_id": f"job{j}"}) for j, p in enumerate(series)]
    return points


@pytest.mark.parametrize(("slower", "threads", "flags", "code", "outcome"), [
    (1.0, 2, [], 0, "too little history"), (1.8, 1, [], 0, "too little history"),
    (3.0, 1, [], 1, "regressed"),
    (1.0, 2, ["--assume-drift"], 0, "no measurable change"),
    (1.8, 1, ["--assume-drift"], 1, "regressed")])
def test_the_default_job_run_twice(store, capsys, slower: float, threads: int,
                                   flags: list[str], code: int, outcome: str):
    """``python run.py`` then ``python run.py`` again (or with ``--threads 1``): one earlier
    job per series. Its drift cannot be told from a change: exit 1 only beyond 2x, or on the
    within-job fallback's assumption when ``--assume-drift`` asks for it."""
    store(_default_job(2, slower, threads))
    assert cli.main(["regress", *flags]) == code
    out = capsys.readouterr().out
    assert out.count(f"{outcome}: ") == 4
    assert out.count("what changed: settings.threads 2 -> 1") == (4 if code else 0)
    if outcome == "too little history":
        assert "1 earlier clean job (3+ measure the drift)" in out and "--assume-drift" in out
    else:
        assert "within-job spread only" in out


def test_an_improvement_does_not_fail_the_gate(store, capsys):
    store(STEADY + _series("ort-int8", "Offline", factor=1.8))
    assert cli.main(["regress"]) == 0
    assert capsys.readouterr().out.startswith(f"improved: {MODEL} ort-int8 Offline")


def test_filters_select_series_and_the_machine_goes_to_the_store(store, capsys):
    fake = store(STEADY + _series("ort-int8", "SingleStream", factor=1.8, threads=1))
    assert cli.main(["regress", "--sut", "ort-fp32", "--machine", "sim"]) == 0
    out = capsys.readouterr().out
    assert "ort-int8" not in out and "2 series" in out
    assert fake.asked == [{"machine": "sim"}]


@pytest.mark.parametrize(("flags", "message"), [
    (["--fdr", "1.5"], "--fdr 1.5: give a rate between 0 and 1"),
    (["--baseline", "weekly"], "--baseline weekly is neither a date"),
    (["--model", "resnet50"], "no results in sqlite:///fake.sqlite match --model resnet50"),
    (["--fdr", "lots"], "argument --fdr: invalid float value"),
])
def test_bad_input_is_one_line_and_exit_two(store, capsys, flags: list[str], message: str):
    store(STEADY)
    assert cli.main(["regress", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_empty_store_is_one_line_and_exit_two(store, capsys):
    store([])
    assert cli.main(["regress"]) == 2
    assert capsys.readouterr().err == (
        "error: the results store sqlite:///fake.sqlite holds no results; record runs (python "
        "run.py) or load results folders (run.py store import DIR)\n")


def test_a_baseline_tag_and_json(store, capsys, tmp_path: Path):
    store(STEADY + _series("ort-int8", "SingleStream", factor=1.8, threads=1))
    out_file = tmp_path / "verdicts.json"
    assert cli.main(["regress", "--baseline", "nightly", "--json", str(out_file)]) == 1
    data = json.loads(out_file.read_text())
    assert data["kind"] == "regress" and data["baseline"] == "nightly"
    first = data["verdicts"][0]
    assert first["verdict"] == "regressed" and len(first["history_jobs"]) == 3
    assert first["changes"][0]["key"] == "settings.threads"
    assert "noise: " in first["text"] and first["newest"]["run_dir"] == "/results/job6/ort-int8"
    assert f"verdicts written to {out_file}" in capsys.readouterr().out


EXAMPLE_RUN = (ROOT / "docs" / "example-sweep" / "runs" / "resnet50" / "tflite-fp32" /
               "Offline-b8-r2" / "vm-tflite-fp32" / "resnet50" / "Offline" / "performance" /
               "run_1" / "results.json")
DAY_S = 86_400.0


def _write_jobs(root: Path, slowed: float, threads: int) -> None:
    """Seven jobs of three runs each (repeat sets) made from a real run record: the same
    Offline test on drifting days; the newest ``slowed`` times slower with ``threads``."""
    record = json.loads(EXAMPLE_RUN.read_text())
    start = record["times"]["loadgen_started_at"]
    for j, drift in enumerate(DRIFT):
        newest = j == len(DRIFT) - 1
        for i, run_noise in enumerate((0.98, 1.0, 1.02)):
            rate = 20.0 * math.exp(drift) * run_noise / (slowed if newest else 1.0)
            run = json.loads(json.dumps(record))
            run["times"]["loadgen_started_at"] = start + j * DAY_S + i * 60.0
            run["config"]["threads"] = threads if newest else 2
            run["repeat"] = {"set": f"job{j}", "of": 3, "index": i + 1}
            # its LoadGen logs say the rate (the store checks results.json against them)
            write_run(root / f"job{j}" / f"run_{i + 1}", run, EXAMPLE_RUN.parent,
                      result_samples_per_second=rate)


@pytest.mark.parametrize(("slowed", "threads", "code"), [(1.0, 2, 0), (1.8, 1, 1)])
def test_on_the_real_store_a_thread_change_gates(tmp_path: Path, capsys, slowed: float,
                                                 threads: int, code: int, store_url: str):
    """Repeat sets recorded into a real store (SQLite, then PostgreSQL), then judged:
    identical jobs pass; one thread against a history of two is a regression naming the
    threads, exit 1."""
    from quantmark.store import open_store

    _write_jobs(tmp_path / "results", slowed, threads)
    url = store_url
    with open_store(url) as store:
        store.record(tmp_path / "results")
    assert cli.main(["regress", "--store", url]) == code
    lines = capsys.readouterr().out.splitlines()
    label = "resnet50 tflite-fp32 Offline samples_per_s"
    if code:
        assert lines[0].startswith(f"regressed: {label}")
        assert lines[1].strip().startswith("what changed: settings.threads 2 -> 1")
    else:
        assert lines[0].startswith(f"no measurable change: {label}")
    assert "own spread over 6 jobs" in lines[0]


def test_on_the_real_store_with_the_example_sweep(capsys, store_url: str):
    """The example sweep, recorded into a fresh store (SQLite, then PostgreSQL), then judged:
    each series gets a line, and the exit code is the gate's (0, or 1 with a regression listed
    first)."""
    from quantmark.store import open_store

    url = store_url
    with open_store(url) as store:
        store.record(ROOT / "docs" / "example-sweep")
    code = cli.main(["regress", "--store", url])
    out = capsys.readouterr().out
    assert code in (0, 1) and out.startswith("regressed: ") == (code == 1)
    assert " series: " in out.splitlines()[-1]
