"""Mixed-precision points in the search: an INT8 candidate breaking the accuracy limit brings
its worst layers kept in float, and the search picks the point that meets the limit; on
stand-in SUTs with planted values, and (slow) one real keep_float point of ort-int8."""

from __future__ import annotations

import math
import shlex
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from quantmark.recommend.candidates import Candidate, Evidence, Limits
from quantmark.recommend.mixed_points import (
    DiagnosisRanker,
    Ranking,
    measuring,
    mixed_points,
    points,
)
from quantmark.recommend.search import SearchConfig, search
from tests.quantmark.recommend.standins import (
    PlantedAccuracy,
    PlantedSpeed,
    Space,
    StandInMeasurer,
    accuracy_of,
    quiet,
)

LAYERS = ("L0", "L1", "L2", "L3", "L4", "L5", "L6", "L7", "L8")
DIAGNOSIS_S = 20.0
FP32, INT8 = Candidate("fp32-a", 1, 1), Candidate("int8-a", 1, 1)
#: latency of the plain INT8 and of its points keeping 1, 2, 4, 8 layers in float
MIXED_MS = {0: 10.0, 1: 10.8, 2: 11.5, 4: 14.0, 8: 18.0}


class RecoveringMeasurer(StandInMeasurer):
    """Stand-ins whose INT8 SUTs can keep layers in float, with a planted layer ranking that
    takes ``DIAGNOSIS_S``; ``ranked`` counts the diagnoses by SUT."""

    def __init__(self, space: Space, seed: int, **kwargs: float) -> None:
        super().__init__(space, seed, **kwargs)
        self.ranked: Counter[str] = Counter()

    def takes_keep_float(self, sut: str) -> bool:
        return sut.startswith("int8")

    def worst_layers(self, candidate: Candidate, count: int) -> Ranking:
        self.ranked[candidate.sut] += 1
        return Ranking(LAYERS[:count], DIAGNOSIS_S)


def planted(int8_change: float, mixed_changes: dict[int, float]) -> Space:
    """fp32-a at 30 ms and int8-a at 10 ms (SingleStream), int8-a's points slower by the
    layers they keep in float and their accuracy changes as planted (observed exactly)."""
    speeds = {FP32.key: PlantedSpeed(30.0, 1000 / 30.0)}
    accuracies = {"fp32-a": PlantedAccuracy(0.0, 0.0, observed=0.0),
                  "int8-a": PlantedAccuracy(int8_change, 0.3, observed=int8_change)}
    for k, ms in MIXED_MS.items():
        candidate = Candidate("int8-a", 1, 1, keep_float=LAYERS[:k])
        speeds[candidate.key] = PlantedSpeed(ms, 1000 / ms)
        if k in mixed_changes:
            change = mixed_changes[k]
            accuracies[candidate.artifact] = PlantedAccuracy(change, 0.3, observed=change)
    return Space([FP32, INT8], speeds, accuracies)


def config(**kwargs: object) -> SearchConfig:
    settings: dict[str, object] = {"limits": Limits(max_accuracy_drop=1.0), "budget_s": 3600.0,
                                   "run_seconds": 10.0}
    return SearchConfig.for_scenario("SingleStream", **{**settings, **kwargs})


def measurer_for(space: Space, seed: int) -> RecoveringMeasurer:
    return RecoveringMeasurer(space, seed, noise=0.02, invalid_rate=0.0, disturbed_rate=0.0)


@pytest.mark.parametrize("seed", range(8))
def test_the_search_adds_the_points_and_picks_the_one_meeting_the_limit(seed: int) -> None:
    """int8-a loses 2 points: its points keeping 1, 2, 4, 8 layers in float race; keeping 2
    meets the 1-point limit and is faster than keeping more, so it wins."""
    space = planted(-2.0, {1: -1.6, 2: -0.4, 4: -0.3, 8: -0.1})
    measurer = measurer_for(space, seed)
    outcome = search(space.candidates, measurer, config())
    assert measurer.ranked == Counter({"int8-a": 1})  # diagnosed once
    kept = {item.candidate.keep_float for item in outcome.evidence}
    assert kept == {(), LAYERS[:1], LAYERS[:2], LAYERS[:4], LAYERS[:8]}
    assert outcome.verdict == "winner", outcome.notes
    assert outcome.recommended is not None
    assert outcome.recommended.candidate == Candidate("int8-a", 1, 1, keep_float=LAYERS[:2])
    # the diagnosis's time is the budget's, beside the runs' and accuracy runs'
    assert outcome.spent_s == pytest.approx(measurer.spent_s + DIAGNOSIS_S)
    plain = next(item for item in outcome.evidence if item.candidate == INT8)
    assert plain.dropped  # it breaks the limit


def test_a_resumed_search_with_its_points_diagnoses_nothing_again() -> None:
    """The points an earlier search added come back with its evidence (the space alone
    does not hold them): they are not diagnosed, measured or added again."""
    space = planted(-2.0, {1: -1.6, 2: -0.4, 4: -0.3, 8: -0.1})
    first = search(space.candidates, measurer_for(space, 3), config())
    again = measurer_for(space, 4)
    outcome = search(space.candidates, again, config(), resume=first.evidence)
    assert not again.ranked and not again.accuracy_calls
    assert [item.candidate.key for item in outcome.evidence] == \
        [item.candidate.key for item in first.evidence]
    assert outcome.recommended is not None
    assert outcome.recommended.candidate.keep_float == LAYERS[:2]


def test_no_point_where_the_limit_holds() -> None:
    space = planted(-0.3, {1: -0.2, 2: -0.1, 4: -0.1, 8: 0.0})
    measurer = measurer_for(space, 0)
    outcome = search(space.candidates, measurer, config())
    assert not measurer.ranked
    assert all(not item.candidate.keep_float for item in outcome.evidence)
    assert outcome.recommended is not None and outcome.recommended.candidate == INT8


def test_no_point_without_an_accuracy_limit_or_with_recover_0() -> None:
    space = planted(-2.0, {1: -1.6, 2: -0.4, 4: -0.3, 8: -0.1})
    for settings in ({"limits": Limits()}, {"recover": 0}):
        measurer = measurer_for(space, 1)
        outcome = search(space.candidates, measurer, config(**settings))
        assert not measurer.ranked
        assert all(not item.candidate.keep_float for item in outcome.evidence)


def test_when_no_point_meets_the_limit_the_answer_says_so() -> None:
    space = planted(-3.0, {1: -2.8, 2: -2.5, 4: -2.2, 8: -2.0})
    outcome = search(space.candidates, measurer_for(space, 2), config(
        limits=Limits(max_accuracy_drop=1.0, latency_ms=20.0)))
    assert outcome.verdict == "infeasible"
    assert any(item.candidate.keep_float for item in outcome.evidence)


def _broken(candidate: Candidate, latency: float, change: float = -2.0, **kwargs: str
            ) -> Evidence:
    return Evidence(candidate, [quiet(latency)] * 3, accuracy_of(change), **kwargs)


def test_points_copy_the_best_candidate_of_each_sut_that_can_keep_layers_in_float() -> None:
    """The best by point of int8-a's candidates not dropped as too slow: its batch, threads
    and options; int8-b's accuracy holds, the fp32's breaks but it keeps nothing in float."""
    fast = Candidate("int8-a", 1, 2, (("opt", "x"),))
    evidence = [_broken(Candidate("int8-a", 1, 1), 12.0),
                _broken(fast, 11.0),
                _broken(Candidate("int8-a", 4, 2), 5.0, dropped="clearly slower than b"),
                _broken(Candidate("int8-b", 1, 1), 9.0, change=-0.5),
                _broken(Candidate("fp32-b", 1, 1), 20.0)]
    measurer = measurer_for(planted(-2.0, {}), 0)
    added, seconds = mixed_points(evidence, measurer, config(recover=4))
    assert added == [Candidate("int8-a", 1, 2, (("opt", "x"),), keep_float=LAYERS[:k])
                     for k in (1, 2, 4)]
    assert seconds == DIAGNOSIS_S and measurer.ranked == Counter({"int8-a": 1})
    # each SUT is diagnosed once a search: not again, with its points or without
    assert mixed_points(evidence, measurer, config(recover=4)) == ([], 0.0)
    fresh = measurer_for(planted(-2.0, {}), 0)
    with_points = evidence + [Evidence(c) for c in added]
    assert mixed_points(with_points, fresh, config(recover=4)) == ([], 0.0)
    assert not fresh.ranked


def test_the_journal_s_recording_measurer_is_seen_through(tmp_path: Path) -> None:
    """``run.py recommend`` and a fleet node give the search the journal's wrapper: the
    ranking is the measurer's inside it, and the real ranker reads the LoadGen measurer's
    model and settings."""
    from quantmark.recommend.journal import Journal, RecordingMeasurer
    from quantmark.recommend.measure import LoadGenMeasurer

    inner = measurer_for(planted(-2.0, {}), 0)
    wrapped = RecordingMeasurer(inner, Journal(tmp_path / "a", {}), [])
    added, _ = mixed_points([_broken(INT8, 12.0)], wrapped, config(recover=2))
    assert len(added) == 2 and inner.ranked == Counter({"int8-a": 1})
    real = LoadGenMeasurer("Offline", "digits-cnn", tmp_path / "b", num_classes=10)
    ranker = DiagnosisRanker(measuring(RecordingMeasurer(real, Journal(tmp_path / "c", {}), [])))
    found = ranker.diagnose_config(Candidate("ort-int8", 8, 2))
    assert (found.model, found.sut, found.threads, found.num_classes) == \
        ("digits-cnn", "ort-int8", 2, 10)


def test_no_diagnosis_the_budget_cannot_hold() -> None:
    evidence = [_broken(Candidate("int8-a", 1, 1), 12.0)]
    measurer = measurer_for(planted(-2.0, {}), 0)
    # 3 runs of 10 s and 30 s of accuracy spent: a diagnosis and a point need ~90 s more
    assert mixed_points(evidence, measurer, config(budget_s=100.0)) == ([], 0.0)
    assert mixed_points(evidence, measurer, config(budget_s=100.0), spent_s=80.0) == ([], 0.0)
    assert not measurer.ranked
    added, _ = mixed_points(evidence, measurer, config(budget_s=200.0))
    assert len(added) == 4


def test_a_failed_accuracy_run_brings_no_point() -> None:
    item = _broken(Candidate("int8-a", 1, 1), 12.0)
    item.accuracy = accuracy_of(math.nan)
    assert mixed_points([item], measurer_for(planted(-2.0, {}), 0), config()) == ([], 0.0)


def test_a_set_too_small_to_judge_the_limit_brings_no_point() -> None:
    """Issue 43's Lite0 search diagnosed ov-int8 and raced 4 points on a set of 6 source
    photos, where no point could ever be told to meet the limit: the budget went for
    nothing. A change that cannot decide (too few independent units) brings none."""
    item = _broken(Candidate("int8-a", 1, 1), 12.0)
    item.accuracy = replace(accuracy_of(-2.0), units=6, decides=False)
    measurer = measurer_for(planted(-2.0, {}), 0)
    assert mixed_points([item], measurer, config()) == ([], 0.0)
    assert not measurer.ranked
    item.accuracy = replace(item.accuracy, units=600, decides=True)  # the same change, judged
    assert len(mixed_points([item], measurer, config())[0]) == 4


def test_points_of_fewer_ranked_layers_are_each_set_once() -> None:
    base = Candidate("ort-int8", 8, 2)
    assert [c.keep_float for c in points(base, ["a", "b", "c"], 8)] == \
        [("a",), ("a", "b"), ("a", "b", "c")]
    assert points(base, [], 8) == []
    assert [c.keep_float for c in points(base, list("abcdefgh"), 3)] == \
        [("a",), ("a", "b"), ("a", "b", "c")]


def test_the_diagnosis_ranker_reads_the_registry_and_turns_a_failure_into_a_why(
        tmp_path: Path) -> None:
    from quantmark.recommend.measure import LoadGenMeasurer

    ranker = DiagnosisRanker(LoadGenMeasurer("Offline", "no-such-model", tmp_path))
    assert ranker.takes_keep_float("ort-int8") and ranker.takes_keep_float("ov-int8")
    assert not ranker.takes_keep_float("ort-fp32") and not ranker.takes_keep_float("nope")
    found = ranker.worst_layers(Candidate("ort-int8"), 4)
    assert found.layers == () and found.why and found.seconds >= 0


def test_the_measurer_runs_a_point_with_keep_float_among_its_sut_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its short run and its own accuracy run (an artifact of its own) carry the layers as
    ``--sut-option keep_float``, and so does the command that reproduces it."""
    from quantmark.recommend.measure import LoadGenMeasurer, accuracy_key

    cells = []

    def fake(root: Path, spec: object, cell: object) -> dict[str, str]:
        cells.append(cell)
        return {"status": "failed", "message": "x"}

    monkeypatch.setattr("quantmark.sweep.cell.run_cell", fake)
    measurer = LoadGenMeasurer("Offline", "digits-cnn", tmp_path, references=("ort-fp32",))
    mixed = Candidate("ov-int8", 8, 2, (("ov_api", "async"),), keep_float=("a", "b"))
    assert accuracy_key(mixed) != accuracy_key(Candidate("ov-int8"))
    assert accuracy_key(mixed) == accuracy_key(replace(mixed, batch_size=1, settings=()))
    assert measurer.accuracy_suts_due(mixed) == ("ov-int8", "ort-fp32")
    assert measurer.run(mixed, 1.0).why and measurer.accuracy(mixed).why
    assert [(c.mode, c.sut_options) for c in cells] == [
        ("performance", (("keep_float", "a,b"), ("ov_api", "async"))),
        ("accuracy", (("keep_float", "a,b"),))]
    line = shlex.split(measurer.run_command(mixed))
    assert [line[i + 1] for i, arg in enumerate(line) if arg == "--sut-option"] == \
        ["keep_float=a,b", "ov_api=async"]


@pytest.mark.slow
def test_loadgen_measurer_runs_a_keep_float_point_of_ort_int8(tmp_path: Path) -> None:
    """The real diagnosis ranks digits-cnn's ort-int8 layers; its worst kept in float is run
    by the measurer like any candidate (a VALID run, its own accuracy run), and the command
    that reproduces it names the layer."""
    from quantmark.recommend.measure import LoadGenMeasurer

    measurer = LoadGenMeasurer("Offline", "digits-cnn", tmp_path, references=("ort-fp32",))
    ranking = DiagnosisRanker(measurer, samples=16).worst_layers(Candidate("ort-int8", 8), 2)
    assert ranking.why == "" and len(ranking.layers) == 2, ranking
    mixed = Candidate("ort-int8", 8, keep_float=ranking.layers[:1])
    run = measurer.run(mixed, 1.0)
    assert run.why == "" and run.valid and run.samples_per_s > 0, run
    plain = measurer.accuracy(Candidate("ort-int8", 8))
    result = measurer.accuracy(mixed)
    assert result.why == "" and plain.why == "", (result, plain)
    assert 50 < result.top1 <= 100 and result.reference == "ort-fp32"
    assert measurer.accuracy(Candidate("ort-int8", 1, keep_float=ranking.layers[:1])) \
        .seconds == 0.0  # the same artifact
    line = shlex.split(measurer.run_command(mixed))
    assert line[line.index("--sut-option") + 1] == f"keep_float={ranking.layers[0]}"
    from quantmark.recommend.measure import read_record

    record = read_record(run.run_dir)
    assert record is not None and record.config["sut_options"] == \
        {"keep_float": ranking.layers[0]}
    assert np.isfinite(result.change_points)
