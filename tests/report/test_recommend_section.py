"""The report's Recommendation section, from a folder written as ``run.py recommend`` writes it
(``recommend.answer`` from a search's outcome with planted evidence): the record and its
figure, the honest answers (tie, undecided, infeasible) in words, found under the folders by
``run.py report`` and carried into the characterization report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from quantmark.commands import report as report_verb
from quantmark.ground.records import RESULTS, RecommendationRecord, RunRecord, load_record
from quantmark.ground.records import write_record as write_json_record
from quantmark.recommend import answer
from quantmark.recommend.candidates import (
    AccuracyResult,
    Candidate,
    Evidence,
    Excluded,
    Limits,
    Measurement,
    Outcome,
)
from quantmark.report import recommend_section
from quantmark.report.recommend_figure import pareto_png

FAST, FP32, LOSSY = Candidate("ort-int8"), Candidate("ort-fp32"), Candidate("tflite-int8")


def _runs(latencies: list[float], run_dir: str = "", disturbed: int = 0) -> list[Measurement]:
    return [Measurement(latency_ms=ms, samples_per_s=1000 / ms, valid=True,
                        disturbed=i < disturbed, memory_mb=100.0 + i, seconds=2.0,
                        run_dir=run_dir) for i, ms in enumerate(latencies)]


def _accuracy(change: float, half: float = 0.5) -> AccuracyResult:
    return AccuracyResult(top1=70 + change, change_points=change, low=change - half,
                          high=change + half, reference="ort-fp32", model_size_mb=4.2)


def _outcome(tmp_path: Path, verdict: str = "winner") -> Outcome:
    """ort-int8 at 10 ms (its run records int8, one run disturbed), ort-fp32 at 20 ms, and
    tflite-int8 at 8 ms that loses 3 points: excluded by --max-accuracy-drop 1."""
    run_dir = tmp_path / "runs" / "ort-int8"
    write_json_record(run_dir / RESULTS, RunRecord(sut={"name": "ort-int8",
                                                        "executed_precision": "int8"}))
    fast = Evidence(FAST, _runs([10.0, 10.5, 9.8], str(run_dir), disturbed=1), _accuracy(-0.4))
    fp32 = Evidence(FP32, _runs([20.0, 21.0, 19.5]), _accuracy(0.0, 0.0),
                    dropped="clearly slower than ort-int8 b1 tauto", dropped_round=3)
    lossy = Evidence(LOSSY, _runs([8.0, 8.2, 7.9]), _accuracy(-3.0),
                     dropped="breaks --max-accuracy-drop", dropped_round=1)
    tied = verdict in ("tied", "undecided")
    return Outcome(verdict=verdict, objective="latency_ms", higher_is_better=False,
                   limits=Limits(max_accuracy_drop=1.0),
                   recommended=fast if verdict == "winner" else None,
                   tied=[fast, fp32] if tied else [],
                   excluded=[Excluded("max_accuracy_drop", lossy, 3.0, 1.0, 2.0, 1.25)],
                   binding="max_accuracy_drop" if verdict == "infeasible" else "",
                   closest=fast if verdict == "infeasible" else None,
                   evidence=[fast, fp32, lossy], rounds=3, spent_s=90.0, budget_s=900.0,
                   notes=["disturbed runs are kept in a figure and counted"])


def _written(tmp_path: Path, verdict: str = "winner") -> RecommendationRecord:
    folder = tmp_path / "results" / "host-recommend" / "m" / "recommend-SingleStream"
    folder.mkdir(parents=True)
    outcome = _outcome(tmp_path, verdict)
    commands = {FAST.key: {"run": "python run.py --scenario SingleStream --sut ort-int8",
                           "vendor": None}}
    record = answer.build_record(outcome, model="m", scenario="SingleStream",
                                 commands=commands, config={"scenario": "SingleStream"},
                                 started=0.0)
    return answer.write(folder, record)


def test_the_winner_record_holds_its_evidence_and_its_figure(tmp_path: Path) -> None:
    record = _written(tmp_path)
    loaded = load_record(record.source, RecommendationRecord.KIND)
    assert isinstance(loaded, RecommendationRecord) and loaded.kind == "recommendation"
    assert loaded.to_dict()["schema"] >= 2 and loaded.verdict == "winner"
    best = loaded.recommended
    assert best["key"] == FAST.key and best["objective"]["point"] == 10.0
    assert best["objective"]["low"] < 10.0 < best["objective"]["high"]
    assert best["executed_precision"] == "int8" and best["disturbed_runs"] == 1
    assert best["accuracy"]["text"] == "-0.40 [-0.90, +0.10]" and best["memory_mb"] == 101.0
    assert [c["key"] for c in loaded.candidates] == [FAST.key, FP32.key, LOSSY.key]
    assert loaded.excluded == [{"limit": "max_accuracy_drop", "candidate": LOSSY.key,
                                "value": 3.0, "bound": 1.0, "margin": 2.0,
                                "objective_ratio": 1.25}]
    png = (record.source.parent / "pareto.png").read_bytes()
    assert loaded.figure == "pareto.png" and png.startswith(b"\x89PNG")


def test_the_winner_in_words(tmp_path: Path) -> None:
    lines = recommend_section.answer_lines(_written(tmp_path))
    text = "\n".join(lines)
    assert lines[0] == f"Recommended: {FAST.key}"
    assert "latency: 10.0 [" in text and "ms over 3 of its 3 runs" in text
    assert "accuracy change vs ort-fp32: -0.40 [-0.90, +0.10] pts (top-1 69.60%)" in text
    assert "executed precision: int8" in text
    assert "DISTURBED: 1 of its 3 runs (other processes took the machine), kept in" in text
    assert (f"--max-accuracy-drop 1 pts excluded {LOSSY.key} (3.00 pts, beyond the limit by "
            "2.00); 1.25x better on latency (ms) than the recommendation") in text
    assert f"reproduce {FAST.key}: python run.py --scenario SingleStream --sut ort-int8" in text
    assert "search: 3 round(s), 9 runs of 3 candidates, 1.5 of 15.0 min of runs" in text


@pytest.mark.parametrize("verdict, expected", [
    ("tied", f"Tied: {FAST.key}, {FP32.key} cannot be told apart"),
    ("undecided", f"Cannot tell {FAST.key} and {FP32.key} apart within the budget "
                  "(1.5 of 15.0 min)"),
    ("infeasible", f"No candidate meets the limits: --max-accuracy-drop binds; closest: "
                   f"{FAST.key}")])
def test_the_honest_answers(tmp_path: Path, verdict: str, expected: str) -> None:
    record = _written(tmp_path, verdict)
    lines = recommend_section.answer_lines(record)
    assert lines[0].startswith(expected), lines[0]
    assert not any(line.startswith("Recommended:") for line in lines)
    assert record.recommended is None


def test_the_figure_needs_a_valid_run(tmp_path: Path) -> None:
    record = _written(tmp_path).to_dict()
    assert pareto_png(record) is not None
    for candidate in record["candidates"]:
        candidate["objective"] = None
    assert pareto_png(record) is None


@pytest.mark.parametrize("value, text", [(9.97, "9.97"), (10.24, "10.2"), (1234.4, "1234"),
                                         (0.02531, "0.0253")])
def test_figures_keep_three_significant_digits(value: float, text: str) -> None:
    assert answer.decimals(value).format(value) == text


def test_a_failed_accuracy_run_is_unknown_not_a_number(tmp_path: Path) -> None:
    evidence = Evidence(FAST, _runs([10.0]), AccuracyResult(
        top1=math.nan, change_points=math.nan, low=math.nan, high=math.nan, reference="",
        why="ort-int8 failed to load"))
    found = answer.summarize(evidence, "latency_ms")
    assert found["accuracy"]["change_points"] is None and found["accuracy"]["text"] == "-"
    assert found["objective"]["text"] == "10.0 (n=1)"


def test_run_report_shows_the_recommendation(tmp_path: Path, capsys) -> None:
    record = _written(tmp_path)
    report_verb.report([str(tmp_path / "results")])
    shown = capsys.readouterr().out
    assert "Recommendation: m, SingleStream" in shown and f"Recommended: {FAST.key}" in shown
    assert "every candidate measured" in shown and "dropped: breaks --max-accuracy-drop" in shown
    out = tmp_path / "report"
    report_verb.report([str(tmp_path / "results")], str(out))
    markdown = (out / "report.md").read_text()
    assert "## Recommendation: m, SingleStream" in markdown
    assert f"- Recommended: {FAST.key}" in markdown
    assert "figures/recommend-m-SingleStream.png" in markdown
    assert "<h2>Recommendation: m, SingleStream" in (out / "report.html").read_text()
    assert (out / "figures" / "recommend-m-SingleStream.png").read_bytes() == \
        (record.source.parent / "pareto.png").read_bytes()


def test_a_tie_within_one_sut_says_the_sut_is_decided(tmp_path: Path) -> None:
    record = _written(tmp_path, "undecided")
    assert not any("the SUT is decided" in line
                   for line in recommend_section.answer_lines(record))  # two SUTs
    for candidate in record.candidates:  # the same two as batch variants of one SUT
        candidate["sut"] = "ov-int8"
    lines = recommend_section.answer_lines(record)
    assert lines[1] == ("All of them are ov-int8: the SUT is decided; its settings tried here "
                        "made no difference these runs could measure")


def test_cannot_tell_is_said_with_what_would_tell_it(tmp_path: Path) -> None:
    """Issue 43: a candidate whose accuracy interval holds the limit is listed as "cannot
    tell" beside a winner; with no candidate known to meet the limits, nothing is
    recommended and the answer says why, with the set's resolving power."""
    lossy_line = (f"{LOSSY.key}: cannot tell whether it meets max_accuracy_drop 1: 1.2 "
                  "[-0.1, 2.5] holds the limit; this set (7 independent units) resolves a "
                  "paired change of about ±1.3 points")
    for verdict, head in (("winner", f"Not ruled out: {LOSSY.key} might beat it"),
                          ("cannot tell", "Nothing recommended: no candidate is known to meet "
                                          f"the limits, and {LOSSY.key} cannot be told")):
        outcome = _outcome(tmp_path / verdict, verdict)
        outcome.cannot_tell_why = {LOSSY.key: [lossy_line]}
        record = answer.build_record(outcome, model="m", scenario="SingleStream", commands={},
                                     config={}, started=0.0)
        lines = recommend_section.answer_lines(record)
        at = next(i for i, line in enumerate(lines) if line.startswith(head))
        assert lines[at + 1] == f"  {lossy_line}"
        assert (verdict == "winner") == any(line.startswith("Recommended:") for line in lines)
        loaded = RecommendationRecord.from_dict(record.to_dict())
        assert loaded.cannot_tell == {LOSSY.key: [lossy_line]}


def test_an_accuracy_line_names_what_the_set_resolves(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path)
    fast = outcome.recommended
    fast.accuracy = AccuracyResult(69.6, -0.4, -4.9, 4.1, "ort-fp32", 4.2, units=7)
    record = answer.build_record(outcome, model="m", scenario="SingleStream", commands={},
                                 config={}, started=0.0)
    text = "\n".join(recommend_section.answer_lines(record))
    assert "-0.40 [-4.90, +4.10] pts (top-1 69.60%); the set resolves about ±4.5 points (7 " \
           "independent units)" in text


def test_the_label_free_agreement_is_printed_beside_the_accuracy_change(tmp_path: Path) -> None:
    outcome = _outcome(tmp_path)
    agreement = ("top-1 agreement with ort-fp32 96.1% over 1536 crops of 7 source images "
                 "(fewer than 50 sources: no interval holds)")
    outcome.recommended.accuracy = AccuracyResult(69.6, -0.4, -4.9, 4.1, "ort-fp32", 4.2,
                                                  units=7, agreement=agreement)
    record = answer.build_record(outcome, model="m", scenario="SingleStream", commands={},
                                 config={}, started=0.0)
    lines = recommend_section.answer_lines(record)
    at = next(i for i, line in enumerate(lines) if "the set resolves" in line)
    assert lines[at + 1].strip() == agreement
    loaded = AccuracyResult.from_dict(outcome.recommended.accuracy.to_dict())
    assert loaded.agreement == agreement


@pytest.mark.parametrize(("units", "decides", "change", "reference", "said"), [
    (7, False, (-0.4, -4.9, 4.1), "ort-fp32",
     "; its 7 independent units are too few for the interval to hold (a verdict needs 50)"),
    (7, True, (0.0, 0.0, 0.0), "ort-int8", "; the FP32 reference itself"),
    (600, True, (-0.4, -1.4, 0.6), "ort-fp32",
     "; the set resolves about ±1 points (600 independent units)"),
])
def test_the_resolving_words_fit_the_change(tmp_path: Path, units: int, decides: bool,
                                            change: tuple[float, float, float], reference: str,
                                            said: str) -> None:
    # issue 43's Lite0 answer printed "the set resolves about ±0 points (6 independent
    # units)" for the FP32 reference's change against itself
    outcome = _outcome(tmp_path)
    outcome.recommended.accuracy = AccuracyResult(69.6, *change, reference, 4.2, units=units,
                                                  decides=decides)
    record = answer.build_record(outcome, model="m", scenario="SingleStream", commands={},
                                 config={}, started=0.0)
    line = next(line for line in recommend_section.answer_lines(record)
                if "accuracy change vs" in line)
    assert line.endswith(said), line
