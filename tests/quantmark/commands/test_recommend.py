"""``run.py recommend`` end to end on stand-in SUTs (``tests/quantmark/recommend/standins``:
planted speeds, accuracies and noise, so the right answer is known): the winner's screen,
``recommendation.json`` and its figure; a limit nobody meets; a tie; bad flags in one line;
Ctrl-C mid-search, then the same command resumes without measuring anything twice, and another
command in the same folder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantmark import cli
from quantmark.commands import recommend as recommend_verb
from quantmark.ground.records import RecommendationRecord, load_record
from quantmark.recommend.candidates import Candidate, Measurement
from tests.quantmark.recommend.standins import (
    PlantedAccuracy,
    PlantedSpeed,
    Space,
    StandInMeasurer,
)

FP32, INT8, LOSSY = Candidate("fp32-a"), Candidate("int8-a"), Candidate("int8-b")
MODEL = "digits-cnn"


def _space(latencies: dict[Candidate, float], changes: dict[str, float]) -> Space:
    return Space(list(latencies), {c.key: PlantedSpeed(ms, 1000.0 / ms)
                                   for c, ms in latencies.items()},
                 {sut: PlantedAccuracy(change, 0.1 if change else 0.0, 10.0)
                  for sut, change in changes.items()})


THREE = _space({FP32: 20.0, INT8: 10.0, LOSSY: 5.0}, {"fp32-a": 0.0, "int8-a": -0.3,
                                                       "int8-b": -4.0})


class Interrupted(StandInMeasurer):
    """The stand-in, with Ctrl-C arriving during its ``after``-th run."""

    def __init__(self, space: Space, after: int, **kwargs: object) -> None:
        super().__init__(space, **kwargs)  # type: ignore[arg-type]
        self.after = after

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        if sum(self.runs.values()) + 1 >= self.after:
            raise KeyboardInterrupt
        return super().run(candidate, seconds)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch):
    """Install a stand-in space and measurer in the command; returns the installer."""

    def install(space: Space, measurer: StandInMeasurer) -> StandInMeasurer:
        monkeypatch.setattr(recommend_verb, "make_space", lambda args, model: space.candidates)
        monkeypatch.setattr(recommend_verb, "make_measurer", lambda args, model, folder: measurer)
        monkeypatch.setattr(recommend_verb, "reproduce", lambda c, args, model, run_dirs: {
            "run": f"python run.py --scenario {args.scenario} --sut {c.sut} --model {model}",
            "vendor": f"benchmark_app -m {c.sut}.xml" if c.sut == "int8-a" else None})
        return measurer

    return install


def _recommend(tmp_path: Path, *flags: str) -> int:
    return cli.main(["recommend", "--scenario", "SingleStream", "--model", MODEL, "--output",
                     str(tmp_path), *flags])


def _folder(tmp_path: Path) -> Path:
    (found,) = tmp_path.glob(f"*-recommend/{MODEL}/recommend-SingleStream")
    return found


def _record(tmp_path: Path) -> RecommendationRecord:
    record = load_record(_folder(tmp_path) / "recommendation.json", "recommendation")
    assert isinstance(record, RecommendationRecord)
    return record


def test_the_winner_screen_and_record(tmp_path: Path, stand_in, capsys) -> None:
    """int8-b is fastest but loses 4 points: --max-accuracy-drop 1 excludes it, int8-a wins."""
    measurer = stand_in(THREE, StandInMeasurer(THREE, seed=1, noise=0.02, invalid_rate=0.0,
                                               disturbed_rate=0.0))
    assert _recommend(tmp_path, "--max-accuracy-drop", "1") == 0
    out = capsys.readouterr().out
    assert f"Recommended: {INT8.key}" in out
    assert "accuracy change vs fp32-a: -0." in out and "no run of it was disturbed" in out
    assert f"--max-accuracy-drop 1 pts excluded {LOSSY.key}" in out
    assert (f"reproduce {INT8.key}: python run.py --scenario SingleStream --sut int8-a "
            f"--model {MODEL}") in out and "the vendor tool: benchmark_app -m int8-a.xml" in out
    assert "ETA" in out  # the progress lines (no terminal here: one per update)
    record = _record(tmp_path)
    assert record.verdict == "winner" and record.recommended["key"] == INT8.key
    assert abs(record.recommended["objective"]["point"] - 10.0) < 0.5
    assert record.limits["max_accuracy_drop"] == 1.0 and record.objective == "latency_ms"
    assert {c["key"] for c in record.candidates} == {FP32.key, INT8.key, LOSSY.key}
    assert [e["candidate"] for e in record.excluded] == [LOSSY.key]
    assert (_folder(tmp_path) / "pareto.png").read_bytes().startswith(b"\x89PNG")
    assert sum(measurer.accuracy_calls.values()) == 3  # once per artifact


def test_a_limit_nobody_meets(tmp_path: Path, stand_in, capsys) -> None:
    stand_in(THREE, StandInMeasurer(THREE, seed=2, noise=0.02, invalid_rate=0.0,
                                    disturbed_rate=0.0))
    assert _recommend(tmp_path, "--latency", "2") == 1
    out = capsys.readouterr().out
    assert "No candidate meets the limits: --latency binds; closest: " + LOSSY.key in out
    assert "Recommended:" not in out
    record = _record(tmp_path)
    assert record.verdict == "infeasible" and record.recommended is None
    assert record.binding == "latency_ms" and record.closest == LOSSY.key


def test_a_tie_names_both_and_picks_neither(tmp_path: Path, stand_in, capsys) -> None:
    twins = _space({FP32: 10.0, Candidate("fp32-b"): 10.0}, {"fp32-a": 0.0, "fp32-b": 0.0})
    stand_in(twins, StandInMeasurer(twins, seed=3, noise=0.05, invalid_rate=0.0,
                                    disturbed_rate=0.0))
    assert _recommend(tmp_path) == 0
    out = capsys.readouterr().out
    assert "Recommended:" not in out
    line = next(line for line in out.splitlines()
                if line.startswith(("Tied:", "Cannot tell")))
    assert FP32.key in line and Candidate("fp32-b").key in line
    record = _record(tmp_path)
    assert record.verdict in ("tied", "undecided") and record.recommended is None
    assert set(record.tied) == {FP32.key, Candidate("fp32-b").key}


@pytest.mark.parametrize("flags, says", [
    (["--scenario", "Sideways", "--model", MODEL], "invalid choice: 'Sideways'"),
    (["--model", MODEL], "the following arguments are required: --scenario"),
    (["--scenario", "Offline"], "name the model: --model M"),
    (["--scenario", "Offline", "--model", "nosuch"], "unknown model 'nosuch'"),
    (["--scenario", "Offline", "--model", MODEL, "--budget", "0"], "--budget 0: give minutes"),
    (["--scenario", "Offline", "--model", MODEL, "--seconds", "-1"], "--seconds -1"),
    (["--scenario", "Offline", "--model", MODEL, "--max-accuracy-drop", "-1"],
     "--max-accuracy-drop -1"),
    (["--scenario", "Offline", "--model", MODEL, "--latency", "0"], "--latency 0: give a bound"),
    (["--scenario", "Offline", "--model", MODEL, "--objective", "joules"], "invalid choice"),
    (["--scenario", "Offline", "--model", MODEL, "--budget", "much"], "invalid float value"),
])
def test_bad_flags_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
                                flags: list[str], says: str) -> None:
    def nothing(*args: object) -> None:
        raise AssertionError("a bad flag must be refused before the space is built")

    monkeypatch.setattr(recommend_verb, "make_space", nothing)
    assert cli.main(["recommend", "--output", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err


def test_every_tasks_built_in_model_is_a_model_recommend_takes(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The text task's built-in ``minilm`` (a sweep took it; recommend refused it as unknown):
    its flags pass the checks and the search is built."""
    built = []

    def space(*args: object, **kwargs: object) -> None:
        built.append(True)
        raise SystemExit(0)

    monkeypatch.setattr(recommend_verb, "make_space", space)
    with pytest.raises(SystemExit):
        cli.main(["recommend", "--output", str(tmp_path), "--scenario", "Offline", "--model",
                  "minilm", "--suts", "ort-fp32,ort-int8dyn", "--budget", "30"])
    assert built


def test_a_budget_too_small_for_one_run_of_each_sut_is_one_line(tmp_path: Path, stand_in,
                                                                 capsys) -> None:
    """Three SUTs, each run expected to take its 5 s and 5 s of start: 18 s cannot hold the
    first round."""
    stand_in(THREE, StandInMeasurer(THREE, seed=4))
    assert _recommend(tmp_path, "--budget", "0.3") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "raise --budget" in err[0]
    # the minimum: three runs of 5 s with 5 s of start each
    assert "cannot race the 3 SUTs' base candidates once each" in err[0]
    assert "it needs at least 0.5 min; raise --budget to 0.5 or more" in err[0]


class SlowFirst(StandInMeasurer):
    """The stand-in, where ``slow``'s first run takes ``seconds_first`` (a conversion)."""

    def __init__(self, space: Space, slow: str, seconds_first: float, **kwargs: object) -> None:
        super().__init__(space, **kwargs)  # type: ignore[arg-type]
        self.slow, self.seconds_first = slow, seconds_first

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        found = super().run(candidate, seconds)
        if candidate.sut == self.slow and self.runs[candidate.key] == 1:
            return Measurement(**{**found.__dict__, "seconds": self.seconds_first})
        return found


def test_a_budget_spent_before_every_sut_ran_recommends_none_of_them(tmp_path: Path, stand_in,
                                                                     capsys) -> None:
    """Issue 43 item 6: fp32-a's first run takes 110 s of a 2-minute budget; int8-a and
    int8-b never run. Exit 0 with no recommendation: the screen names the candidates not
    raced, and nothing is recommended over them."""
    stand_in(THREE, SlowFirst(THREE, "fp32-a", 110.0, seed=6, invalid_rate=0.0,
                              disturbed_rate=0.0))
    assert _recommend(tmp_path, "--budget", "2") == 0
    out = capsys.readouterr().out
    assert "Recommended:" not in out
    assert (f"Cannot tell {FP32.key} and {INT8.key} and {LOSSY.key} apart within the budget"
            in out)
    assert f"not raced (the budget ended before their first run): {INT8.key}, {LOSSY.key}" \
        in " ".join(out.split())
    record = _record(tmp_path)
    assert record.verdict == "undecided" and record.recommended is None
    assert record.tied == [FP32.key, INT8.key, LOSSY.key]


def test_interrupted_then_resumed_without_measuring_twice(tmp_path: Path, stand_in,
                                                          capsys) -> None:
    """Noise-free runs, so an uninterrupted search is the reference: Ctrl-C during the 5th
    run keeps 4 runs and 3 accuracies; the rerun measures only what is left, and ends where
    the uninterrupted search ends. Another command in the same folder is refused."""
    quiet = {"noise": 0.0, "invalid_rate": 0.0, "disturbed_rate": 0.0}
    whole = stand_in(THREE, StandInMeasurer(THREE, seed=5, **quiet))
    assert _recommend(tmp_path / "reference", "--max-accuracy-drop", "1") == 0
    reference = _record(tmp_path / "reference")

    first = stand_in(THREE, Interrupted(THREE, after=5, seed=5, **quiet))
    assert _recommend(tmp_path, "--max-accuracy-drop", "1") == 130
    assert "run the same command to resume" in capsys.readouterr().out
    saved = json.loads((_folder(tmp_path) / "evidence.json").read_text())
    assert sum(len(item["runs"]) for item in saved["evidence"]) == 4
    assert not (_folder(tmp_path) / "recommendation.json").exists()

    second = stand_in(THREE, StandInMeasurer(THREE, seed=5, **quiet))
    assert _recommend(tmp_path, "--max-accuracy-drop", "1") == 0
    assert "resuming" in capsys.readouterr().out
    assert not set(second.accuracy_calls) & set(first.accuracy_calls)  # none measured twice
    record = _record(tmp_path)
    runs = {c["key"]: c["runs"] for c in record.candidates}
    assert sum(runs.values()) == 4 + sum(second.runs.values())
    assert runs == {c["key"]: c["runs"] for c in reference.candidates}
    assert sum(runs.values()) == sum(whole.runs.values())
    assert record.verdict == reference.verdict and record.recommended["key"] == INT8.key

    assert _recommend(tmp_path, "--max-accuracy-drop", "1", "--seconds", "3") == 2
    err = capsys.readouterr().err
    assert "holds a search measured with other settings (seconds)" in err


def test_a_model_whose_classes_the_built_in_set_does_not_fit_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A 10-class network on the built-in 1000-class photos: every run would fail on its
    first label beyond class 9, and the search would end 'no candidate meets the limits'."""
    from tests.docs.guide_files import onnx_classifier

    def nothing(*args: object) -> None:
        raise AssertionError("the labels must be refused before the space is built")

    monkeypatch.setattr(recommend_verb, "make_space", nothing)
    mine = onnx_classifier(tmp_path / "mine.onnx", classes=10, size=224)
    assert cli.main(["recommend", "--output", str(tmp_path / "out"), "--scenario", "Offline",
                     "--model-path", str(mine), "--budget", "20"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is beyond model mine's 10 classes" in err[0], err
