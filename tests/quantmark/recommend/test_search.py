"""The search's rules on scripted runs: figures, drops, disturbed and INVALID runs, accuracy
once per artifact, the limits' cost, rotation, progress, and its evidence saved and read back."""

from __future__ import annotations

import json
import math

import pytest

from quantmark.ground.errors import UserError
from quantmark.recommend import judging
from quantmark.recommend.candidates import (
    AccuracyResult,
    Candidate,
    Evidence,
    Limits,
    Measurement,
)
from quantmark.recommend.search import SearchConfig, search
from quantmark.recommend.sweep_check import brute_force
from tests.quantmark.recommend.standins import ScriptedMeasurer, accuracy_of, quiet

A, B, C = Candidate("fp32-a"), Candidate("fp32-b"), Candidate("int8-a")


def latency_config(**kwargs) -> SearchConfig:
    fields = {"budget_s": 10_000.0, "run_seconds": 10.0, "max_rounds": 6, **kwargs}
    return SearchConfig("latency_ms", False, **fields)


def measurer(runs: dict[Candidate, list[Measurement]], **accuracy: AccuracyResult
             ) -> ScriptedMeasurer:
    results = {"fp32-a": accuracy_of(0.0, 0.0, 100.0), "fp32-b": accuracy_of(0.0, 0.1, 100.0),
               "int8-a": accuracy_of(-0.2), **accuracy}
    return ScriptedMeasurer({c.key: values for c, values in runs.items()}, results)


@pytest.mark.parametrize("fields, words", [
    ({"min_runs": 2}, "at least 3 runs"),
    ({"objective": "fps"}, "unknown objective"),
    ({"max_rounds": 2}, "below min_runs"),
    ({"confidence": 1.0}, "confidence"),
    ({"budget_s": 0.0}, "must be positive"),
    ({"budget_s": float("inf")}, "must be positive and finite"),
    ({"budget_s": float("nan")}, "must be positive and finite"),
])
def test_bad_settings_are_one_line(fields, words):
    settings = {"objective": "latency_ms", "higher_is_better": False, **fields}
    with pytest.raises(UserError, match=words):
        SearchConfig(**settings)


def test_the_scenario_sets_the_objective():
    assert SearchConfig.for_scenario("Offline").objective == "samples_per_s"
    assert SearchConfig.for_scenario("Offline").higher_is_better
    single = SearchConfig.for_scenario("SingleStream")
    assert (single.objective, single.higher_is_better) == ("latency_ms", False)
    named = SearchConfig.for_scenario("Offline", objective="latency_ms")
    assert (named.objective, named.higher_is_better) == ("latency_ms", False)
    with pytest.raises(UserError, match="unknown scenario"):
        SearchConfig.for_scenario("Batch")


def test_a_budget_below_one_run_of_each_base_is_refused_before_any_run():
    """A and B are bases (15 s each expected); A's variant waits: 30 s decides something."""
    variant = Candidate("fp32-a", threads=2)
    script = measurer({A: [quiet(10)], B: [quiet(11)], variant: [quiet(12)]})
    with pytest.raises(UserError, match=r"--budget 0.48 min cannot race the 2 SUTs' base "
                                        r"candidates once each \(2 runs of ~15 s with their "
                                        r"start\): it needs at least 0.5 min; "
                                        r"raise --budget to 0.5"):
        search([A, B, variant], script, latency_config(budget_s=29.0))
    assert script.order == []
    limited = latency_config(budget_s=100.0, accuracy_seconds=40.0,
                             limits=Limits(max_accuracy_drop=1.0))
    with pytest.raises(UserError, match="and the accuracy of the fastest 2"):
        search([A, B, variant], script, limited)
    search([A, B, variant], script, latency_config(budget_s=30.0))
    assert script.order[:2] == [A.key, B.key] and variant.key not in script.order


def test_invalid_runs_never_enter_a_figure():
    config = latency_config()
    item = Evidence(A, [quiet(10.0), Measurement(1.0, 1000.0, False, False), quiet(12.0)])
    assert judging.figure(item, "latency_ms", config).point == pytest.approx(11.0)
    assert judging.figure(item, "latency_ms", config).n == 2


def test_a_candidate_without_a_valid_run_is_dropped_with_the_reason():
    broken = Measurement(None, None, False, False, seconds=10.0, why="predict failed")
    outcome = search([A, B], measurer({A: [quiet(10), quiet(10.2), quiet(9.9)], B: [broken]}),
                     latency_config())
    dropped = {item.candidate: item for item in outcome.evidence}[B]
    assert dropped.dropped == "no VALID run in 3 (predict failed)"
    assert dropped.dropped_round == 3
    assert outcome.verdict == "winner" and outcome.recommended.candidate == A
    assert any("3 of 3 runs INVALID" in note for note in outcome.notes)


def test_a_clearly_slower_candidate_is_dropped_after_min_runs_only():
    runs = {A: [quiet(10), quiet(10.2), quiet(9.9)], B: [quiet(20), quiet(20.5), quiet(19.8)]}
    outcome = search([A, B], measurer(runs), latency_config())
    slow = {item.candidate: item for item in outcome.evidence}[B]
    assert slow.dropped.startswith("clearly above fp32-a b1 tauto")
    assert slow.dropped_round == 3 and len(slow.runs) == 3
    assert outcome.verdict == "winner" and outcome.rounds == 3


def test_disturbed_runs_do_not_count_toward_a_drop():
    """B is as fast as A, but its first three runs were disturbed and slow: flagged, they
    cannot drop it; the same runs unflagged drop it at round 3."""
    slow = [quiet(20.0, disturbed=True), quiet(21.0, disturbed=True), quiet(19.0, disturbed=True)]
    fast = [quiet(10.0), quiet(10.1), quiet(9.9), quiet(10.05), quiet(9.95), quiet(10.0)]
    outcome = search([A, B], measurer({A: fast, B: slow + fast[:3]}), latency_config())
    kept = {item.candidate: item for item in outcome.evidence}[B]
    assert not kept.dropped and len(kept.runs) == 6
    assert judging.figure(kept, "latency_ms", latency_config()).n == 3  # its quiet runs
    assert outcome.verdict == "tied"
    assert any("3 of 6 runs disturbed, left out of its figures" in n for n in outcome.notes)
    unflagged = [quiet(20.0), quiet(21.0), quiet(19.0)]
    outcome = search([A, B], measurer({A: fast, B: unflagged + fast[:3]}), latency_config())
    assert {item.candidate: item for item in outcome.evidence}[B].dropped_round == 3


def test_accuracy_is_run_once_per_artifact_and_a_breaker_leaves_after_one_run():
    c2 = Candidate("int8-a", batch_size=8)
    script = measurer({A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4.0)],
                       c2: [quiet(5.0)]}, **{"int8-a": accuracy_of(-3.0, 0.4, 26.0)})
    outcome = search([A, C, c2], script, latency_config(limits=Limits(max_accuracy_drop=1.0)))
    assert script.accuracy_calls == {"fp32-a": 1, "int8-a": 1}
    by = {item.candidate: item for item in outcome.evidence}
    assert by[C].dropped.startswith("breaks max_accuracy_drop 1") and len(by[C].runs) == 1
    assert by[c2].dropped_round == 2 and not by[c2].runs  # C's variant shares its accuracy
    assert outcome.recommended.candidate == A
    (cost,) = outcome.excluded
    assert cost.limit == "max_accuracy_drop" and cost.evidence.candidate == C
    assert cost.value == pytest.approx(3.0) and cost.margin == pytest.approx(2.0)
    assert cost.objective_ratio == pytest.approx(10.0 / 4.0)


def test_a_point_inside_the_limit_with_an_interval_across_it_cannot_be_told():
    """Issue 43: a limit is judged by its interval, never by the point. A drop of 0.8
    [0.2, 1.4] against a 1-point limit is neither met nor broken: not recommended, listed as
    "cannot tell" with what would tell it, and it stops racing (its accuracy is measured
    once: more runs cannot tell it)."""
    script = measurer({A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4), quiet(4.1),
                                                                     quiet(3.9)]},
                      **{"int8-a": accuracy_of(-0.8, 0.6)})
    outcome = search([A, C], script, latency_config(limits=Limits(max_accuracy_drop=1.0)))
    assert outcome.verdict == "winner" and outcome.recommended.candidate == A
    by = {item.candidate: item for item in outcome.evidence}
    assert by[C].dropped.startswith(judging.UNDECIDABLE) and len(by[C].runs) == 1
    assert outcome.cannot_tell == [by[C]]
    (line,) = outcome.cannot_tell_why[C.key]
    assert "cannot tell whether it meets max_accuracy_drop 1" in line
    assert "0.8 [0.2, 1.4]" in line and "larger evaluation set" in line
    assert not outcome.excluded  # not broken: no limit excluded it


def test_a_point_beyond_the_limit_with_an_interval_reaching_inside_cannot_be_told():
    """Its point breaks the limit but its interval reaches inside: not excluded by the limit
    (that needs the whole interval beyond), not recommended, listed as "cannot tell"."""
    script = measurer({A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4), quiet(4.1),
                                                                     quiet(3.9)]},
                      **{"int8-a": accuracy_of(-1.2, 0.6)})
    outcome = search([A, C], script, latency_config(limits=Limits(max_accuracy_drop=1.0)))
    by = {item.candidate: item for item in outcome.evidence}
    assert by[C].dropped.startswith(judging.UNDECIDABLE) and len(by[C].runs) == 1
    assert outcome.recommended.candidate == A and outcome.cannot_tell == [by[C]]
    assert not outcome.excluded


def test_no_candidate_known_to_meet_a_limit_recommends_nothing_and_says_why():
    """The FP32 breaks the latency limit and the INT8's accuracy holds the accuracy limit:
    the verdict is "cannot tell", nothing is recommended, and the INT8 is listed with what
    would tell it."""
    script = measurer({A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4), quiet(4.1),
                                                                     quiet(3.9)]},
                      **{"int8-a": accuracy_of(-0.8, 0.6)})
    config = latency_config(limits=Limits(max_accuracy_drop=1.0, latency_ms=5.0))
    outcome = search([A, C], script, config)
    assert outcome.verdict == judging.CANNOT_TELL and outcome.recommended is None
    assert [item.candidate for item in outcome.cannot_tell] == [C]


def test_the_budget_keeps_back_the_leaders_accuracy_for_the_answer():
    """No accuracy limit: accuracy is due at round min_runs, which this budget never reaches;
    the search keeps back what the best candidate's accuracy costs and measures it last."""
    script = measurer({A: [quiet(10), quiet(10.2)], B: [quiet(12), quiet(12.1)],
                       C: [quiet(5), quiet(5.1)]})
    config = latency_config(budget_s=75.0, accuracy_seconds=30.0)
    outcome = search([A, B, C], script, config)
    assert script.accuracy_calls == {"int8-a": 1}  # the best by point, only
    best = {item.candidate: item for item in outcome.evidence}[C]
    assert best.accuracy is not None and len(best.runs) < config.min_runs
    assert outcome.spent_s <= config.budget_s


def test_round_one_runs_in_the_space_order_later_rounds_best_point_first():
    runs = {A: [quiet(12), quiet(12.2), quiet(11.8)], B: [quiet(10), quiet(10.2), quiet(9.8)],
            C: [quiet(10.5), quiet(9.5), quiet(10.1)]}
    script = measurer(runs)
    search([A, B, C], script, latency_config(max_rounds=3))
    a, b, c = A.key, B.key, C.key
    # round 2 by round 1's points (B 10, C 10.5, A 12); round 3 by the medians (C 10.0, B 10.1)
    assert script.order == [a, b, c, b, c, a, c, b, a]


def test_progress_counts_up_within_the_budget():
    calls = []
    runs = {c: [quiet(10), quiet(10.2), quiet(9.8)] for c in (A, B)}
    config = latency_config(max_rounds=4, budget_s=200.0)
    search([A, B], measurer(runs), config, on_progress=lambda *args: calls.append(args))
    assert [call[0] for call in calls] == list(range(1, len(calls) + 1))
    assert all(planned >= done and 0 <= eta <= config.budget_s and spent <= config.budget_s
               for done, planned, spent, eta, _ in calls)
    assert calls[0][1] == 8 and calls[-1][3] == 0.0
    assert calls[0][4].startswith("round 1/4: fp32-a b1 tauto (2 racing)")


def test_brute_force_judges_every_candidate_by_the_same_rules():
    config = latency_config(limits=Limits(latency_ms=9.0))
    evidence = [Evidence(A, [quiet(10), quiet(10.1), quiet(9.9)], accuracy_of(0.0, 0.0)),
                Evidence(C, [quiet(5), quiet(5.1), quiet(4.9)], accuracy_of(-0.3)),
                Evidence(B, [quiet(8), quiet(8.1), quiet(7.9)], accuracy_of(0.0, 0.0))]
    outcome = brute_force(evidence, config)
    assert outcome.verdict == "winner" and outcome.recommended.candidate == C
    assert outcome.excluded[0].evidence.candidate == A
    assert outcome.excluded[0].objective_ratio == pytest.approx(5 / 10)


def test_evidence_is_saved_and_read_back_as_plain_json():
    failed = AccuracyResult(math.nan, math.nan, math.nan, math.nan, "fp32-a", why="crashed")
    item = Evidence(Candidate("ov-int8", 8, 2, (("ov_api", "async"),), ("conv1",)),
                    [quiet(10.0, memory_mb=120.0, run_dir="runs/1"),
                     Measurement(None, None, False, True, why="INVALID")], failed,
                    "no VALID run", 3)
    text = json.dumps(item.to_dict(), allow_nan=False)
    back = Evidence.from_dict(json.loads(text))
    assert back.candidate == item.candidate and back.runs == item.runs
    assert (back.dropped, back.dropped_round) == ("no VALID run", 3)
    assert math.isnan(back.accuracy.change_points) and back.accuracy.why == "crashed"
    good = accuracy_of(-0.5)
    assert AccuracyResult.from_dict(json.loads(json.dumps(good.to_dict()))) == good


@pytest.mark.parametrize("damage", [
    lambda d: d.pop("candidate"),
    lambda d: d["runs"][0].pop("valid"),
    lambda d: d["runs"][0].update(latency_ms="fast"),
    lambda d: d["runs"][0].update(colour="red"),
    lambda d: d.update(accuracy={"top1": 1.0}),
])
def test_a_damaged_saved_entry_is_one_line(damage):
    data = Evidence(A, [quiet(10.0)], accuracy_of(0.0)).to_dict()
    damage(data)
    with pytest.raises(UserError, match="saved search evidence: a damaged"):
        Evidence.from_dict(data)


def test_resumed_evidence_is_judged_afresh_under_the_new_limits():
    """Dropped for a 0.5-point accuracy limit, C races again when the rerun allows 5 points;
    nothing measured is measured again."""
    strict = latency_config(limits=Limits(max_accuracy_drop=0.5))
    runs = {A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4), quiet(4.1), quiet(3.9)]}
    first = search([A, C], measurer(runs, **{"int8-a": accuracy_of(-2.0)}), strict)
    assert first.recommended.candidate == A
    saved = [Evidence.from_dict(item.to_dict()) for item in first.evidence]
    assert saved[1].dropped.startswith("breaks max_accuracy_drop")
    script = measurer(runs, **{"int8-a": accuracy_of(-2.0)})
    again = search([A, C], script, latency_config(limits=Limits(max_accuracy_drop=5.0)),
                   resume=saved)
    assert again.recommended.candidate == C
    assert script.order == [C.key, C.key] and not script.accuracy_calls


def test_an_empty_or_repeated_space_is_one_line():
    with pytest.raises(UserError, match="no candidate to search: widen --suts"):
        search([], measurer({}), latency_config())
    with pytest.raises(UserError, match="appears twice in the space: fp32-a b1 tauto"):
        search([A, Candidate("fp32-a")], measurer({A: [quiet(10)]}), latency_config())


class _DatasetMeasurer(ScriptedMeasurer):
    """Runs that record the dataset's size; an accuracy run takes what the dataset takes at
    the SUT's rate (the FP32 reference runs with the first), as a real one does."""

    def __init__(self, runs: dict[Candidate, list[Measurement]], rates: dict[str, float],
                 samples: int) -> None:
        super().__init__({c.key: values for c, values in runs.items()},
                         {"fp32-a": accuracy_of(0.0, 0.0, 100.0), "int8-a": accuracy_of(-0.2)})
        self.rates, self.samples, self.done = rates, samples, set()

    def accuracy_suts_due(self, candidate: Candidate) -> tuple[str, ...]:
        due = [] if candidate.sut in self.done else [candidate.sut]
        return tuple(due + [name for name in ("fp32-a",) if name not in self.done | set(due)])

    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        due = self.accuracy_suts_due(candidate)
        self.done |= set(due)
        seconds = sum(self.samples / self.rates[name] + 5.0 for name in due)
        found = super().accuracy(candidate)
        return AccuracyResult(**{**found.__dict__, "seconds": seconds})


def _timed(latency_ms: float, rate: float, samples: int = 1536) -> Measurement:
    return Measurement(latency_ms, rate, True, False, seconds=15.0, samples=samples)


def test_an_accuracy_run_is_priced_at_its_suts_measured_rate_over_the_dataset():
    """1536 samples at fp32-a's slowest 25/s (its runs' start: 15 - 10 s) and at int8-a's
    90/s; a SUT the race has not run: the configured guess (not another SUT's slow rate)."""
    from quantmark.recommend.race import Race

    evidence = [Evidence(A, [_timed(40, 25.0), _timed(41, 30.0)]), Evidence(C, [_timed(11, 90)])]
    race = Race.start([item.candidate for item in evidence],
                       latency_config(accuracy_seconds=42.0), evidence)
    assert race.accuracy_run_estimate("fp32-a") == pytest.approx(1536 / 25 + 5)
    assert race.accuracy_run_estimate("int8-a") == pytest.approx(1536 / 90 + 5)
    assert race.accuracy_run_estimate("fp32-b") == 42.0
    script = _DatasetMeasurer({}, {"fp32-a": 25.0, "int8-a": 90.0}, 1536)
    assert race.accuracy_cost(script, race.evidence[1]) == pytest.approx(1536 / 25 + 1536 / 90
                                                                         + 10)
    blind = Race.start([A], latency_config(accuracy_seconds=42.0), [Evidence(A, [quiet(10)])])
    assert blind.accuracy_run_estimate("fp32-a") == 42.0  # its run did not record the dataset


def test_a_slow_reference_accuracy_keeps_the_search_within_its_budget():
    """The guess (10 s an accuracy run) is far below what the slow FP32 reference takes over
    the dataset (1536 / 20 per s); priced from the measured rates, the kept-back accuracy still
    fits: the search never spends more than its budget."""
    runs = {A: [_timed(50, 20.0) for _ in range(6)], C: [_timed(11, 90.0) for _ in range(6)]}
    script = _DatasetMeasurer(runs, {"fp32-a": 20.0, "int8-a": 90.0}, 1536)
    config = latency_config(budget_s=150.0, accuracy_seconds=10.0)
    outcome = search([A, C], script, config)
    assert script.accuracy_calls == {"int8-a": 1}
    assert outcome.spent_s <= config.budget_s


def test_an_option_that_builds_another_model_is_another_artifact():
    """TensorRT's INT8 route builds another engine: its accuracy is not shared across routes;
    batch and threads never change the artifact."""
    qdq = Candidate("trt-int8", 8, 0, (("trt_int8_route", "qdq"),))
    calibrator = Candidate("trt-int8", 8, 0, (("trt_int8_route", "calibrator"),))
    assert qdq.artifact == "trt-int8 trt_int8_route=qdq" != calibrator.artifact
    assert Candidate("trt-int8", 1, 2, (("trt_int8_route", "qdq"),)).artifact == qdq.artifact
    assert Candidate("ov-int8", 8, 0, (("ov_api", "async"),)).artifact == "ov-int8"


def test_a_budget_that_ends_before_any_accuracy_is_undecided_not_infeasible():
    """Under an accuracy limit, nothing measured for accuracy is not "none fits": after A's
    run its accuracy (1536 samples at 20/s) no longer fits, so the answer says the budget
    ended before it could tell whether A meets the limits."""
    from quantmark.recommend.answer import build_record
    from quantmark.report.recommend_section import verdict_lines

    runs = {A: [_timed(50, 20.0)], C: [_timed(11, 90.0)]}
    script = _DatasetMeasurer(runs, {"fp32-a": 20.0, "int8-a": 90.0}, 1536)
    config = latency_config(budget_s=60.0, accuracy_seconds=5.0, start_s=5.0,
                            limits=Limits(max_accuracy_drop=1.0))
    outcome = search([A, C], script, config)
    assert not script.accuracy_calls
    # both raced once (a first run keeps nothing back), C the faster by point
    assert outcome.verdict == "undecided" and [i.candidate for i in outcome.tied] == [C, A]
    record = build_record(outcome, model="m", scenario="SingleStream", commands={},
                          config={}, started=0.0, min_runs=config.min_runs)
    assert verdict_lines(record)[0].startswith(
        "The budget (0.5 of 1.0 min) ended before the accuracy of int8-a b1 tauto and fp32-a "
        "b1 tauto was measured: whether they meet the limits is unknown")


class _FiveReferences(ScriptedMeasurer):
    """A real machine's accuracy: the candidate's own run and, with the first, five FP32
    references' (``LoadGenMeasurer.accuracy_suts_due``): far more than a short run."""

    def accuracy_suts_due(self, candidate: Candidate) -> tuple[str, ...]:
        return (candidate.sut, *(f"ref-{n}" for n in range(5)))


def test_every_base_is_raced_before_the_answers_accuracy_is_kept_back():
    """Issue 43 item 6 (``--suts ort-fp32,ort-int8 --budget 2``): after fp32-a's run, the
    kept-back accuracy (six runs of 60 s) no longer fit beside int8-a's run, and fp32-a was
    recommended unraced against it. Now int8-a's first run comes first, and an accuracy the
    budget can never hold no longer stops the runs: both race to a decision (noise-free runs:
    int8-a, clearly faster after three runs each) within the budget."""
    runs = {A: [_timed(44, 30.0, 1536)], C: [_timed(20, 60.0, 1536)]}
    script = _FiveReferences({c.key: v for c, v in runs.items()}, {})
    config = latency_config(budget_s=120.0, run_seconds=5.0, accuracy_seconds=60.0)
    outcome = search([A, C], script, config)
    assert script.order[:2] == [A.key, C.key] and script.order.count(A.key) == 3
    assert outcome.verdict == "winner" and outcome.recommended.candidate == C
    assert not any(note.startswith("not raced") for note in outcome.notes)
    assert outcome.spent_s <= config.budget_s and not script.accuracy_calls


def test_a_budget_spent_before_a_base_ran_recommends_nothing_and_names_it():
    """fp32-a's first run took 100 s of a 120 s budget (a conversion the estimate did not
    know): int8-a's run no longer fits. Nothing is recommended over int8-a, which the answer
    names as not raced beside the leader."""
    runs = {A: [Measurement(10.0, 100.0, True, False, seconds=100.0)], C: [quiet(5)]}
    script = measurer(runs)
    outcome = search([A, C], script, latency_config(budget_s=120.0))
    assert script.order == [A.key]
    assert outcome.verdict == "undecided" and outcome.recommended is None
    assert [item.candidate for item in outcome.tied] == [A, C]
    (note,) = [note for note in outcome.notes if note.startswith("not raced")]
    assert C.key in note and A.key not in note and "larger --budget" in note


def test_an_unraced_candidate_turns_none_fits_into_undecided():
    """fp32-a breaks the latency limit; int8-a never ran: whether it fits is unknown, so the
    answer is not "no candidate meets the limits" (exit 1) but undecided, naming it."""
    runs = {A: [Measurement(50.0, 20.0, True, False, seconds=100.0)], C: [quiet(5)]}
    config = latency_config(budget_s=120.0, limits=Limits(latency_ms=20.0))
    outcome = search([A, C], measurer(runs), config)
    assert outcome.verdict == "undecided" and [i.candidate for i in outcome.tied] == [C]


def test_an_accuracy_on_too_few_sources_judges_no_limit():
    """Issue 43: the built-in set's crops of 6 sources hold no interval: even a change whose
    interval lies wholly within (or beyond) the limit cannot be told, and the answer says
    what set would tell it."""
    from dataclasses import replace

    for change in (-0.1, -4.0):
        few = replace(accuracy_of(change, 0.3), units=6, decides=False)
        script = measurer({A: [quiet(10), quiet(10.1), quiet(9.9)], C: [quiet(4), quiet(4.1),
                                                                         quiet(3.9)]},
                          **{"int8-a": few})
        outcome = search([A, C], script, latency_config(limits=Limits(max_accuracy_drop=1.0)))
        assert outcome.recommended.candidate == A
        (line,) = outcome.cannot_tell_why[C.key]
        assert "rests on 6 independent sources, too few" in line and "50+" in line
