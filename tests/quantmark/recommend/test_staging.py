"""Settings staged behind their SUT (``staging``): round 1 measures each SUT's base only; a
SUT's other settings race once its base is near the leader, and are dropped unmeasured (with
the assumption named) when it is far behind; a resumed search derives what is held again."""

from __future__ import annotations

import json

import pytest

from quantmark.ground.errors import UserError
from quantmark.recommend.candidates import BASE_BATCH, Candidate, Evidence
from quantmark.recommend.search import SearchConfig, search
from quantmark.recommend.staging import NOT_MEASURED, bases
from tests.quantmark.recommend.standins import ScriptedMeasurer, accuracy_of, quiet

LEAD, LEAD_1 = Candidate("lead", 8), Candidate("lead", 1)
FAR, FAR_1, FAR_32 = Candidate("far", 8), Candidate("far", 1), Candidate("far", 32)
NEAR, NEAR_1 = Candidate("near", 8), Candidate("near", 1)
SPACE = [LEAD, LEAD_1, FAR, FAR_1, FAR_32, NEAR, NEAR_1]
#: latency (ms): near's base is 1.3x behind lead's, but its batch-1 variant is the best
SPEEDS = {LEAD: 10.0, LEAD_1: 11.0, FAR: 40.0, FAR_1: 35.0, FAR_32: 36.0, NEAR: 13.0,
          NEAR_1: 8.0}


def config(**kwargs) -> SearchConfig:
    fields = {"budget_s": 10_000.0, "max_rounds": 5, "base_batch": 8, **kwargs}
    return SearchConfig("latency_ms", False, **fields)


def measurer(speeds: dict[Candidate, float] = SPEEDS) -> ScriptedMeasurer:
    runs = {c.key: [quiet(ms), quiet(ms * 1.01), quiet(ms * 0.99), quiet(ms * 1.005)]
            for c, ms in speeds.items()}
    return ScriptedMeasurer(runs, {sut: accuracy_of(0.0) for sut in ("lead", "far", "near")})


def test_each_suts_base_is_the_scenarios_batch_else_its_first():
    space = [Candidate("a", 1), Candidate("a", 8, 0, (("k", "x"),)),
             Candidate("a", 8, 0, (("k", "y"),)), Candidate("a", 8, 2, (("k", "x"),)),
             Candidate("b", 1, 2), Candidate("b", 32), Candidate("b", 1)]
    found = bases(space, BASE_BATCH["Offline"])
    assert found == {"a": Candidate("a", 8, 0, (("k", "x"),)), "b": Candidate("b", 1, 2)}
    assert bases(space, None)["a"] == Candidate("a", 1)
    assert SearchConfig.for_scenario("Offline").base_batch == 8
    assert SearchConfig.for_scenario("SingleStream").base_batch == 1
    with pytest.raises(UserError, match="settings_spread 0.5 must be at least 1"):
        config(settings_spread=0.5)


def test_round_one_measures_the_bases_only():
    script = measurer()
    search(SPACE, script, config())
    assert script.order[:3] == [LEAD.key, FAR.key, NEAR.key]
    assert not {FAR_1.key, FAR_32.key} & set(script.order)


def test_a_variant_behind_a_base_far_behind_is_never_measured_and_says_why():
    script = measurer()
    outcome = search(SPACE, script, config())
    by = {item.candidate: item for item in outcome.evidence}
    for variant in (FAR_1, FAR_32):
        assert not by[variant].runs and script.order.count(variant.key) == 0
        assert by[variant].dropped == (
            f"{NOT_MEASURED} far b8 tauto was 5.0x above the leader near b1 tauto, beyond "
            "the x2 settings may move it")
    assert any("2 candidates not measured" in note and "at most x2" in note
               for note in outcome.notes)
    # with room for x5, far's settings are measured too
    wide = measurer()
    search(SPACE, wide, config(settings_spread=5.0))
    assert wide.order.count(FAR_1.key) >= 1


def test_a_variant_behind_a_base_close_to_the_leader_is_released_and_can_win():
    script = measurer()
    outcome = search(SPACE, script, config())
    assert outcome.verdict == "winner" and outcome.recommended.candidate == NEAR_1
    assert script.order.count(NEAR_1.key) >= 3
    first = script.order.index(NEAR_1.key)
    assert script.order[:first].count(NEAR.key) >= 1  # after its base was judged


def test_a_resumed_search_derives_the_held_variants_again():
    """Interrupted after round 1 (the variants held, nothing saved of that), the search
    resumes to the same answer and the same unmeasured drops."""
    saved: list[dict] = []

    class Interrupted(ScriptedMeasurer):
        def run(self, candidate, seconds):
            if len(self.order) >= 3:
                raise KeyboardInterrupt
            return super().run(candidate, seconds)

    broken = Interrupted(measurer().script, measurer().accuracy_results)
    with pytest.raises(KeyboardInterrupt):
        search(SPACE, broken, config(), checkpoint=lambda evidence: saved.__setitem__(
            slice(None), [json.loads(json.dumps(e.to_dict())) for e in evidence]))
    resume = [Evidence.from_dict(item) for item in saved]
    assert [len(item.runs) for item in resume] == [1, 0, 1, 0, 0, 1, 0]
    assert not any(item.dropped for item in resume)
    again = measurer()
    outcome = search(SPACE, again, config(), resume=resume)
    by = {item.candidate: item for item in outcome.evidence}
    assert outcome.recommended.candidate == NEAR_1
    assert by[FAR_1].dropped.startswith(NOT_MEASURED) and not by[FAR_1].runs
    assert again.order[0] == LEAD.key  # round 2 goes on, best first; no variant yet


def test_a_released_setting_not_measured_yet_goes_at_its_bases_point():
    """Near comes first in the space, but once lead's variants are released its batch 1 (at
    its base's 10 ms) runs before near's third run (13 ms): the leading SUT's settings first.
    A budget that ends before racing candidates are measured says so."""
    space = [NEAR, NEAR_1, FAR, FAR_1, FAR_32, LEAD, LEAD_1]
    script = measurer()
    outcome = search(space, script, config(budget_s=115.0, run_seconds=10.0, start_s=0.0))
    assert script.order[-1] == LEAD_1.key and script.order.count(NEAR.key) == 2
    assert NEAR_1.key not in script.order
    assert outcome.notes[1].startswith("3 candidates still racing were never measured (near: "
                                       "1, far: 2): the answer is among those measured")
