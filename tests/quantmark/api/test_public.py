"""The Python API end to end on the small built-in digits model: a run, a repeat set,
compare, a sweep's table, history and regress, each returning typed answers whose figures are
LoadGen's own; bad input raises ``quantmark.UserError`` with the CLI's one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import quantmark as qm
from quantmark.report.logged_run import verify

MODEL = "digits-cnn"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('api-store') / 'store.db'}"


@pytest.fixture(scope="module")
def repeat_sets(tmp_path_factory: pytest.TempPathFactory, store_url: str
                ) -> dict[str, Any]:
    """ort-fp32 and ort-int8, 3 quick runs each (1 s), recorded in their own store."""
    root = tmp_path_factory.mktemp("api-runs")
    conf = root / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTMARK_STORE", store_url)
        return {sut: qm.run(scenario="Offline", sut=sut, model=MODEL, repeats=3,
                            user_conf=str(conf), output=str(root / sut))
                for sut in ("ort-fp32", "ort-int8")}


def test_a_repeat_set_is_typed_with_its_interval(repeat_sets: dict[str, Any]) -> None:
    found = repeat_sets["ort-int8"]
    assert isinstance(found, qm.RunResult) and found.valid and found.unit == "samples/s"
    assert len(found.records) == len(found.run_dirs) == 3
    logged = [verify(folder).summary.metric_value for folder in found.run_dirs]
    assert found.figure == pytest.approx(sorted(logged)[1])  # the median of LoadGen's figures
    assert found.interval.n == 3 and found.interval.low <= found.figure <= found.interval.high
    assert found.record.sut["name"] == "ort-int8"


def test_a_single_run_has_its_figure_and_no_interval(tmp_path: Path) -> None:
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    found = qm.run(scenario="SingleStream", sut="ort-fp32", model=MODEL, user_conf=str(conf),
                   output=str(tmp_path / "out"))
    assert found.valid and found.unit == "ns" and found.figure > 0
    assert (found.interval.n, found.interval.low) == (1, None)
    assert found.figure == verify(found.run_dir).summary.metric_value


def test_compare_returns_the_ratio_and_its_verdict(repeat_sets: dict[str, Any]) -> None:
    a, b = (repeat_sets[s].record.config["output"] for s in ("ort-fp32", "ort-int8"))
    found = qm.compare(a, b)
    assert isinstance(found, qm.Comparison) and len(found.a_runs) == len(found.b_runs) == 3
    assert found.speedup == pytest.approx(
        repeat_sets["ort-int8"].figure / repeat_sets["ort-fp32"].figure, rel=0.5)
    assert found.verdict in ("faster", "slower", "no measurable difference")
    assert found.notes == ()


def test_history_and_regress_read_the_runs_store(repeat_sets: dict[str, Any],
                                                 store_url: str) -> None:
    frame = qm.history(store=store_url, model=MODEL).to_frame()
    assert sorted(frame["sut"]) == ["ort-fp32", "ort-int8"]
    row = frame[frame["sut"] == "ort-int8"].iloc[0]
    assert row["value"] == pytest.approx(repeat_sets["ort-int8"].figure, rel=1e-6)
    assert row["runs"] == 3 and row["low"] <= row["value"] <= row["high"]
    verdicts = qm.regress(store=store_url)
    assert len(verdicts.verdicts) == 2 and not verdicts.regressed
    assert set(verdicts.to_frame()["outcome"]) == {"cannot judge"}  # one job each: no baseline
    empty = qm.history(store=store_url, model="no-such-model")
    assert empty.points == () and "no-such-model" in (empty.nothing or "")
    assert empty.exit_code == 1 and verdicts.exit_code == 0


def test_a_sweeps_table_is_a_data_frame(tmp_path: Path) -> None:
    found = qm.sweep(models=MODEL, suts=["ort-fp32", "ort-int8"], scenarios="Offline",
                     seconds=1, output=str(tmp_path / "sweep"))
    assert isinstance(found, qm.SweepResult) and found.failed == 0 and found.ran >= 2
    frame = found.to_frame()
    assert set(frame["sut"]) == {"ort-fp32", "ort-int8"}
    int8 = frame[frame["sut"] == "ort-int8"].iloc[0]
    assert int8["samples_per_s_median"] > 0 and not math.isnan(int8["top1"])  # numbers
    assert int8["agreement_low_pct"] <= int8["agreement_with_fp32_pct"] <= \
        int8["agreement_high_pct"]
    assert int8["speedup_vs_fp32"] > 0 and math.isnan(int8["speedup_vs_fp32_low"])  # one run


@pytest.mark.parametrize(("call", "kwargs", "said"), [
    (qm.run, {"scenario": "Offline", "sut": "ort-int8", "model": MODEL, "batchsize": 4},
     "quantmark.run() got unknown argument(s) batchsize"),
    (qm.run, {"scenario": "Offline", "sut": "no-such-sut", "model": MODEL},
     "no-such-sut"),
    (qm.run, {"scenario": "Offline", "sut": "ort-int8", "list_suts": True},
     "quantmark.run() runs one test or a repeat set"),
    (qm.sweep, {"models": MODEL, "suts": "ort-int8", "repeats": "three"},
     "invalid int value: 'three'"),
])
def test_bad_input_raises_the_clis_one_line(tmp_path: Path, call: Any, kwargs: dict[str, Any],
                                            said: str) -> None:
    with pytest.raises(qm.UserError) as caught:
        call(output=str(tmp_path / "out"), **kwargs)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "out").exists()  # refused before any work


def test_profile_returns_its_typed_record(tmp_path: Path) -> None:
    found = qm.profile(sut="ort-int8", model=MODEL, iterations=3, warmup=1,
                       output=str(tmp_path / "out"))
    assert found.KIND == "profile" and found.sut == "ort-int8" and found.model == MODEL
    assert found.source is not None and found.source.is_file()


@pytest.mark.slow
def test_diagnose_and_recommend_return_their_answers(tmp_path: Path) -> None:
    diagnosis = qm.diagnose(sut="ort-int8", model=MODEL, samples=16,
                            output=str(tmp_path / "diagnose"))
    assert diagnosis.KIND == "diagnosis" and diagnosis.sut == "ort-int8" and diagnosis.worst
    found = qm.recommend(scenario="Offline", model=MODEL, suts="ort-fp32,ort-int8",
                         batch_sizes="8", budget=1, seconds=1,
                         output=str(tmp_path / "recommend"))
    assert isinstance(found, qm.Recommendation)
    assert found.verdict in ("winner", "tied", "undecided", "infeasible", "cannot tell")
    assert (found.folder / "recommendation.json").is_file()
    frame = found.to_frame()
    assert set(frame["sut"]) == {"ort-fp32", "ort-int8"}
    if found.recommended:
        assert found.recommended in set(frame["key"])
