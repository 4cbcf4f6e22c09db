"""run.py compare on folders of repeated runs whose figures are known: real LoadGen logs,
rewritten to say each run's figure (``relog``), with the results.json the runner writes from
them."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.errors import UserError
from quantmark.report.current_set import current_set
from quantmark.report.loadgen_log import DETAIL_FILE, OFFICIAL_METRIC, summarize_file
from quantmark.run.comparison import compare, resolve, verdict_line
from tests.conftest import run_cli
from tests.report.loadgen_runs import cut_before, loadgen_run, logged_at, relog

LOGS: dict[str, Path] = {}  # scenario -> a real LoadGen run's logs (whole, VALID)


@pytest.fixture(scope="module", autouse=True)
def loadgen_logs(tmp_path_factory) -> None:
    root = tmp_path_factory.mktemp("loadgen")
    for scenario in ("Offline", "SingleStream"):
        LOGS[scenario] = loadgen_run(root / scenario, scenario)


STARTS = itertools.count()  # each run its own LoadGen start, a minute apart
T0 = 1_790_000_000.0


def fake_run(folder: Path, value: float, *, set_id: str = "s1", index: int = 1,
             ended: float = 0.0, sut: str = "ort-fp32", scenario: str = "Offline",
             disturbed: bool | None = False, validity: str = "VALID",
             config: dict[str, Any] | None = None, model: dict[str, Any] | None = None
             ) -> Path:
    """A performance run folder as quantmark leaves it: a real LoadGen run's logs saying
    ``value`` (the scenario's official metric) and ``validity``, and a results.json with what
    compare reads (what ran) and LoadGen's summary, as the runner writes it."""
    shutil.copytree(LOGS[scenario], folder)
    started = T0 + 60 * next(STARTS)
    relog(folder, **{OFFICIAL_METRIC[scenario][0]: value}, result_validity=validity,
          result_min_duration_met=validity == "VALID", test_datetime=logged_at(started))
    record = {"config": {"sut": sut, "model": "m", "quick": True, "scenario": scenario,
                         **(config or {})},
              "model": model or {},
              "settings": {"quantmark_set": {"target_qps": 1.0}},
              "summary": summarize_file(folder / DETAIL_FILE).to_dict(),
              "repeat": {"set": set_id, "index": index, "of": 3},
              "times": {"loadgen_ended_at": ended or float(index),
                        "loadgen_started_at": started},
              "interference": {"disturbed": disturbed,
                               "why": ["other processes used 1.60 of 2 cores"]}}
    (folder / "results.json").write_text(json.dumps(record))
    return folder


def results_tree(root: Path, values: list[float], **kwargs) -> Path:
    perf = root / "host-ort-fp32" / "m" / "Offline" / "performance"
    for index, value in enumerate(values, 1):
        fake_run(perf / f"run_{index}", value, index=index, **kwargs)
    return root


def test_a_real_speedup_is_called_faster_with_its_interval(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 41.0, 39.5])
    b = results_tree(tmp_path / "b", [80.0, 82.5, 79.0])
    _, _, ratio = compare(str(a), str(b))
    assert ratio.verdict == "faster" and ratio.low < 2.0 < ratio.high
    assert verdict_line(ratio).startswith("B is faster: 2.00x A [")


def test_the_same_figures_are_no_measurable_difference(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 43.0, 39.5])
    b = results_tree(tmp_path / "b", [41.0, 39.8, 42.2])
    _, _, ratio = compare(str(a), str(b))
    assert ratio.verdict == "no measurable difference"
    assert verdict_line(ratio).startswith("no measurable difference: B is ")


def test_latency_runs_compare_the_right_way(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [8e6, 8.1e6, 7.9e6], scenario="SingleStream")
    b = results_tree(tmp_path / "b", [4e6, 4.1e6, 3.9e6], scenario="SingleStream")
    _, _, ratio = compare(str(a), str(b), paired=True)
    assert ratio.verdict == "faster" and ratio.point == pytest.approx(2.0, rel=0.02)


def test_only_the_newest_repeat_set_counts(tmp_path) -> None:
    perf = tmp_path / "performance"
    old = [fake_run(perf / f"run_{i}", 10.0, set_id="old", index=i, ended=i) for i in (1, 2, 3)]
    new = [fake_run(perf / "run_1b", 50.0, set_id="new", index=1, ended=10),
           fake_run(perf / "run_2b", 52.0, set_id="new", index=2, ended=11)]
    assert current_set(old + new) == new
    # a run of an older quantmark (no set id) is a set of its own
    legacy = perf.parent / "legacy"
    legacy.mkdir()
    (legacy / "results.json").write_text(json.dumps({"times": {"loadgen_ended_at": 99}}))
    assert current_set(old + [legacy]) == [legacy]


def test_a_sweep_cell_names_its_repeats(tmp_path) -> None:
    cell = tmp_path / "runs" / "m" / "ort-fp32"
    for repeat, value in enumerate([40.0, 41.0], 1):
        fake_run(cell / f"Offline-b8-r{repeat}" / "sys" / "m" / "Offline" / "performance" /
                 "run_1", value)
    fake_run(cell / "SingleStream-b1-r1" / "sys" / "m" / "SingleStream" / "performance" /
             "run_1", 4e6, scenario="SingleStream")
    assert len(resolve(str(cell / "Offline-b8"))) == 2
    with pytest.raises(UserError, match="different tests"):
        compare(str(cell), str(cell))


def test_bad_sides_are_one_line_errors(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 41.0])
    b = results_tree(tmp_path / "b", [4e6, 4.1e6], scenario="SingleStream")
    with pytest.raises(UserError, match="same scenario"):
        compare(str(a), str(b))
    with pytest.raises(UserError, match="neither a folder nor a sweep cell"):
        compare(str(tmp_path / "nowhere" / "x"), str(a))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no finished performance run"):
        compare(str(tmp_path / "empty"), str(a))
    c = results_tree(tmp_path / "c", [40.0, 41.0, 42.0])
    with pytest.raises(UserError, match="pairing needs"):
        compare(str(a), str(c), paired=True)


def test_the_cli_prints_the_verdict_and_flags_disturbed_runs(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 41.0, 39.5])
    b = results_tree(tmp_path / "b", [40.5, 40.0, 41.0], disturbed=True)
    done = run_cli("compare", str(a), str(b), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no measurable difference: B is" in done.stdout
    assert "B has a disturbed run: other processes used 1.60 of 2 cores" in done.stdout
    bad = run_cli("compare", str(a), timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_runs_of_different_tests_are_refused_not_pooled(tmp_path) -> None:
    """The issue's folder: one ort-fp32 run and one ort-int8 run made one median."""
    mixed = tmp_path / "mixed"
    fake_run(mixed / "host-ort-fp32" / "m" / "Offline" / "performance" / "run_1", 45.85)
    fake_run(mixed / "host-ort-int8" / "m" / "Offline" / "performance" / "run_1", 7191.9,
             sut="ort-int8")
    a = results_tree(tmp_path / "a", [40.0, 41.0, 39.5])
    with pytest.raises(UserError, match=r"different tests.*SUT differs: ort-fp32 \("):
        compare(str(a), str(mixed))
    done = run_cli("compare", str(a), str(mixed), timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    for name, change in (("batch", {"config": {"batch_size": 32}}),
                         ("model file", {"model": {"key": "other-artifact"}}),
                         ("options", {"config": {"sut_options": {"ov_api": "async"}}}),
                         ("threads", {"config": {"threads": 1}})):
        folder = results_tree(tmp_path / name, [40.0, 41.0])
        fake_run(folder / "host-ort-fp32" / "m" / "Offline" / "performance-b" / "run_1",
                 40.5, **change)
        with pytest.raises(UserError, match="not repeats of one"):
            compare(str(a), str(folder))


def test_invalid_and_incomplete_runs_are_left_out_and_named(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 41.0, 39.5])
    perf = tmp_path / "b" / "host-ort-fp32" / "m" / "Offline" / "performance"
    for index, (value, validity) in enumerate([(80.0, "VALID"), (7000.0, "INVALID"),
                                               (82.0, "VALID"), (9000.0, "VALID")], 1):
        fake_run(perf / f"run_{index}", value, index=index, validity=validity)
    # a copy cut short: its results.json (written from the whole log) says VALID
    cut_before(perf / "run_4" / "mlperf_log_detail.txt", "result_validity")
    _, side_b, ratio = compare(str(a), str(tmp_path / "b"))
    assert side_b.values == [80.0, 82.0] and ratio.point == pytest.approx(2.0, rel=0.03)
    assert [run.name for run, _ in side_b.left_out] == ["run_2", "run_4"]
    assert [run.name for run, _ in side_b.flagged] == ["run_4"]
    done = run_cli("compare", str(a), str(tmp_path / "b"), timeout=120)
    assert done.returncode == 1, done.stderr  # run_4's results.json is not what LoadGen says
    lines = [line for line in done.stdout.splitlines() if line.startswith("B: left out")]
    assert len(lines) == 2 and "run_2: INVALID: min duration not met" in lines[0]
    assert "incomplete: mlperf_log_detail.txt" in lines[1]
    assert "Reduce expected QPS" not in done.stdout  # a quick run: quantmark's words
    assert "2 (2 left out)" in done.stdout
    assert "B: host-ort-fp32/m/Offline/performance/run_4: results.json disagrees with " \
           "LoadGen's logs (it says VALID, but LoadGen's logs are not whole" in done.stdout


def test_a_side_with_no_usable_run_is_an_error(tmp_path) -> None:
    a = results_tree(tmp_path / "a", [40.0, 41.0])
    b = results_tree(tmp_path / "b", [145.7, 121.5], validity="INVALID")
    with pytest.raises(UserError, match="no run under .* can be used, every one is INVALID"):
        compare(str(a), str(b))
    done = run_cli("compare", str(a), str(b), timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


def test_paired_runs_pair_by_repeat_index(tmp_path) -> None:
    a = tmp_path / "a" / "host-ort-fp32" / "m" / "Offline" / "performance"
    for index, (value, validity) in enumerate([(40.0, "VALID"), (10.0, "INVALID"),
                                               (39.0, "VALID")], 1):
        fake_run(a / f"run_{index}", value, index=index, validity=validity)
    b = results_tree(tmp_path / "b", [80.0, 82.0, 78.0])
    side_a, side_b, ratio = compare(str(tmp_path / "a"), str(b), paired=True)
    assert ratio.paired and ratio.point == pytest.approx(2.0) and ratio.n_candidate == 2
    assert side_b.values == [80.0, 78.0]
    assert [why for _, why in side_b.left_out] == ["its partner, repeat 2 of A, was left out"]
