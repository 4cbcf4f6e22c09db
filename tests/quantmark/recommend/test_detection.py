"""``run.py recommend`` on a detector: the accuracy limit is judged in its task's metric (mAP
points), the record names the task so the report says mAP and never top-1, a diagnosis that
cannot rank a detector's layers is one note and the search goes on; and (slow) a real
recommend of the tiny YOLO-shaped fixture on the built-in detection canvases."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from quantmark.ground.metric import Metric
from quantmark.recommend import answer
from quantmark.recommend.candidates import AccuracyResult, Limits
from quantmark.recommend.mixed_points import Ranking
from quantmark.recommend.search import SearchConfig, search
from quantmark.report import quality
from quantmark.report.recommend_section import answer_lines, rows
from tests.quantmark.recommend.test_mixed_points import FP32, INT8, measurer_for, planted

MAP = Metric(key="map", name="mAP@[.5:.95]", unit="%")
TASK = quality.task_section(MAP, "detection")


class DetectorMeasurer:
    """The stand-ins of ``test_mixed_points`` scored in mAP, whose layer ranking fails as
    ``run.py diagnose`` does on a task it cannot run on yet."""

    def __init__(self, seed: int) -> None:
        self.inner = measurer_for(planted(-3.0, {}), seed)

    def run(self, candidate, seconds):  # noqa: ANN001, ANN201 - the Measurer protocol
        return self.inner.run(candidate, seconds)

    def accuracy(self, candidate) -> AccuracyResult:  # noqa: ANN001
        found = self.inner.accuracy(candidate)
        return AccuracyResult(**{**found.__dict__, "top1": 30.0 + found.change_points,
                                 "metric": MAP.key})

    def takes_keep_float(self, sut: str) -> bool:
        return sut.startswith("int8")

    def worst_layers(self, candidate, count: int) -> Ranking:  # noqa: ANN001
        return Ranking((), 0.1, "UserError: diagnose: not yet for detection")


def _outcome() -> object:
    config = SearchConfig.for_scenario("SingleStream", limits=Limits(max_accuracy_drop=1.0),
                                       budget_s=3600.0, run_seconds=10.0)
    return search([FP32, INT8], DetectorMeasurer(seed=3), config)


def test_a_detector_breaking_the_limit_without_a_diagnosis_is_one_note() -> None:
    """int8-a loses 3 mAP points against a 1-point limit; the diagnosis cannot rank its layers:
    no mixed-precision point, one line in the notes, and the search still answers fp32-a."""
    outcome = _outcome()
    assert outcome.recommended is not None and outcome.recommended.candidate == FP32
    said = [note for note in outcome.notes if "no mixed-precision points" in note]
    assert said == ["int8-a: no mixed-precision points: run.py diagnose cannot rank its "
                    "layers (UserError: diagnose: not yet for detection)"]
    assert not any(item.candidate.keep_float for item in outcome.evidence)


def test_the_record_names_the_task_and_the_report_says_map(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTMARK_STORE", "off")  # the answer is recorded; not here
    record = answer.build_record(_outcome(), model="det", scenario="SingleStream",
                                 commands={}, config={}, started=time.time(), task=TASK)
    data = record.to_dict()
    assert data["task"] == TASK and quality.metric_of(data) == MAP
    measured = [c["accuracy"] for c in data["candidates"] if c["accuracy"]]
    assert measured and all("map" in a and "top1" not in a for a in measured)
    folder = tmp_path / "recommend-SingleStream"
    folder.mkdir()
    answer.write(folder, record)
    loaded = json.loads((folder / "recommendation.json").read_text())
    assert loaded["task"]["metric"]["key"] == "map"
    from quantmark.report.recommend_section import load

    [again] = load([tmp_path])
    text = "\n".join([*answer_lines(again), *(" ".join(row) for row in rows(again))])
    assert again.task == TASK and quality.metric_of(again) == MAP and "mAP@[.5:.95]" in text
    assert "top-1" not in text
    assert "--max-accuracy-drop 1 mAP@[.5:.95] pts excluded int8-a" in text


def test_a_bad_limit_names_the_detectors_metric() -> None:
    from quantmark.commands.recommend import limits_of
    from quantmark.ground.errors import UserError

    args = type("Args", (), {"max_accuracy_drop": -1.0, "latency": None,
                             "min_throughput": None, "max_memory": None,
                             "max_model_size": None})()
    with pytest.raises(UserError, match=r"give points of mAP@\[\.5:\.95\] at or above 0"):
        limits_of(args, MAP.name)


@pytest.mark.slow
def test_recommend_on_the_tiny_detector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The verb end to end on the tiny YOLO-shaped ONNX and the built-in canvases (ort-fp32
    the one reference, to keep it short): the limit is judged in mAP points and the answer,
    its record and its table say mAP, never top-1."""
    from quantmark import cli
    from quantmark.recommend.measure import LoadGenMeasurer
    from quantmark.tasks.detection.digits_detect.canvases import builtin_detection_root
    from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx

    model = tmp_path / "det.onnx"
    tiny_yolo_onnx(model, num_classes=10, size=96)
    monkeypatch.setattr(LoadGenMeasurer, "reference_suts", lambda self: ("ort-fp32",))
    code = cli.main(["recommend", "--scenario", "Offline", "--model-path", str(model),
                     "--dataset-path", str(builtin_detection_root()), "--suts",
                     "ort-fp32,ort-int8", "--batch-sizes", "8", "--max-accuracy-drop", "1",
                     "--budget", "2.5", "--seconds", "1", "--output", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    [found] = (tmp_path / "out").glob("*-recommend/det/recommend-Offline/recommendation.json")
    record = json.loads(found.read_text())
    assert record["task"]["name"] == "detection" and record["task"]["metric"]["key"] == "map"
    assert record["limits"]["max_accuracy_drop"] == 1.0
    accuracies = [c["accuracy"] for c in record["candidates"] if c.get("accuracy")]
    assert accuracies and all("map" in a and "top1" not in a for a in accuracies), accuracies
    assert "Δ mAP@[.5:.95] pts" in out and "top-1" not in out
