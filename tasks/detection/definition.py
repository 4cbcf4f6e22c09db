"""Object detection: a model with one image input and a detector's output (Ultralytics' raw
head ``[N, 4 + C, anchors]`` with NMS outside, or selected detections ``[N, K, 6]``), a COCO-
or YOLO-format dataset, letterboxed inputs, NMS inside the SUT's timed work, COCO mAP."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.metric import Metric
from quantmark.tasks.contract import QualityChange, Respond, Task

#: the built-in detector (trained by quantmark on real digit scans, see digits_detect/)
BUILTIN_MODEL = "digits-detect"
#: the COCO-format results (one entry per detection) an accuracy run leaves beside its log
DETECTIONS_FILE = "detections.json"
#: the COCO-format ground truth of the images it scored, beside it
GROUND_TRUTH_FILE = "ground_truth.json"
#: the built-in set's calibration: this many of its train canvases (MLPerf calibrates on 500)
CALIBRATION_IMAGES = 256


#: each framework's NMS op, built once per process (framework name -> its suppressor)
_SUPPRESSORS: dict[str, Any] = {}
_SUPPRESSORS_LOCK = threading.Lock()


def _framework_suppressor(sut: Any) -> Any:
    """The suppression step of ``sut``'s framework: its NMS op, built on first use (at run
    start, by the run's first ``respond``), or the shared numpy NMS with the reason it has
    none. An op that fails to build is the SUT's one-line error, never numpy in its place."""
    from quantmark.sut.registry import load_nms, no_nms_reason
    from quantmark.tasks.detection.postprocess import NativeSuppressor, NumpySuppressor

    with _SUPPRESSORS_LOCK:
        if sut.framework not in _SUPPRESSORS:
            try:
                build = load_nms(sut)
                _SUPPRESSORS[sut.framework] = (
                    NumpySuppressor(reason=no_nms_reason(sut)) if build is None
                    else NativeSuppressor(build()))
            except (UserError, SutError):
                raise
            except Exception as exc:  # noqa: BLE001 - any framework error is the SUT's
                lines = str(exc).strip().splitlines() or [""]
                raise SutError(f"{sut.name}: {sut.framework}'s NMS op could not be built "
                               f"({type(exc).__name__}: {lines[0]})") from exc
        return _SUPPRESSORS[sut.framework]


def _no_builder(num_classes: int) -> Any:
    raise UserError("this detector comes from its ONNX file: it has no torch architecture "
                    "quantmark can rebuild; the torch-* SUTs need a built-in --model")


class DetectionTask(Task):
    name: ClassVar[str] = "detection"
    metric: ClassVar[Metric] = Metric(key="map", name="mAP@[.5:.95]", unit="%")
    models: ClassVar[tuple[str, ...]] = (BUILTIN_MODEL,)
    pairs_runs: ClassVar[bool] = True

    def __init__(self, sut: Any = None) -> None:
        #: the SUT (its SutInfo) whose framework's NMS op suppresses; None: the shared numpy
        #: NMS (what diagnose judges accuracy with)
        self.sut = sut

    def for_sut(self, sut: Any) -> DetectionTask:
        """This task with NMS on ``sut``'s framework's op (``FrameworkInfo.nms``)."""
        return DetectionTask(sut)

    def claims(self, model_path: Path) -> bool:
        from quantmark.models.workload import inspect_onnx

        try:
            inspect_onnx(model_path, str(model_path), self.name)
        except UserError:
            return False
        return True

    def model_file(self, config: Any) -> str | None:
        """``--model-path``, or the built-in detector exported at the run's size."""
        if config.model_path:
            return config.model_path
        from quantmark.models.workload import parse_input_size
        from quantmark.tasks.detection.digits_detect.detector import builtin_detector_onnx

        given = parse_input_size(config.input_size)
        if given and given[0] != given[1]:
            raise UserError(f"--input-size {config.input_size}: {BUILTIN_MODEL} runs on square "
                            "inputs; give one size, e.g. --input-size 128")
        return str(builtin_detector_onnx(size=given[0] if given else None))

    def resolve_spec(self, config: Any) -> Any:
        """The detector's spec from its file: input size, head and classes as it states them
        (an [N, K, 6] head states none: --num-classes or the dataset's count), letterboxed
        0-1 RGB inputs as Ultralytics' models take them. The built-in detector also names its
        torch architecture and trainer (the torch SUTs build it from them)."""
        from quantmark.models.workload import inspect_onnx, model_size, parse_input_size
        from quantmark.models.zoo import ModelSpec

        path = self.model_file(config)
        where = f"--model-path {path}" if config.model_path else f"model {config.model}"
        stated = inspect_onnx(path, where, self.name)
        height, width = model_size(stated, parse_input_size(config.input_size), where)
        classes = stated.classes or config.num_classes
        if config.num_classes and stated.classes and config.num_classes != stated.classes:
            raise UserError(f"{where} scores {stated.classes} classes, not --num-classes "
                            f"{config.num_classes}; drop --num-classes")
        spec = ModelSpec(name=config.model, mean=(0.0, 0.0, 0.0), std=(255.0, 255.0, 255.0),
                         builder=_no_builder, input_size=height, input_width=width,
                         resize_short=max(height, width), num_classes=classes,
                         resize_rule="letterbox", channels=stated.channels,
                         input_dtype=stated.dtype, builtin_dataset=BUILTIN_MODEL,
                         performance_sample_count=1024, task=self.name, head=_head_of(path))
        if config.model_path:
            return spec
        from quantmark.tasks.detection.digits_detect import detector

        return replace(spec, builder=detector.sized_builder(height), trainer=detector.__name__)

    def open_dataset(self, config: Any, spec: Any) -> Any:
        from quantmark.tasks.detection.datasets import check_model_classes, open_detection_dataset

        builtin = config.dataset_path is None
        if builtin:
            from quantmark.tasks.detection.digits_detect.canvases import (
                DESCRIPTION,
                builtin_detection_root,
            )

            dataset = open_detection_dataset(builtin_detection_root(), names=config.labels)
            dataset.description = DESCRIPTION
        else:
            dataset = open_detection_dataset(config.dataset_path, names=config.labels)
        #: MLPerf's yolo target is set on COCO's own val2017 (the built-in only mimics its layout)
        dataset.coco_val2017 = (not builtin and dataset.layout == "coco"
                                and dataset.source.name == "instances_val2017.json")
        if spec.num_classes:  # an [N, K, 6] head states no class count: the dataset's rule
            check_model_classes(dataset, spec.num_classes, spec.name)
        return dataset

    def calibration_list(self, config: Any, dataset: Any) -> str | None:
        """The built-in set calibrates on its train canvases (every evaluation image stays
        scored); another dataset as classification's do."""
        if config.calibration_list or config.dataset_path is not None:
            return config.calibration_list
        from quantmark.ground.hashing import atomic_write_text
        from quantmark.ground.paths import cache_dir
        from quantmark.tasks.detection.digits_detect.canvases import TRAIN, identity_key

        train = sorted((dataset.root / TRAIN).glob("*.png"))[:CALIBRATION_IMAGES]
        listing = cache_dir("calibration-lists") / f"{BUILTIN_MODEL}-{identity_key()}.txt"
        text = "".join(f"{TRAIN}/{path.name}\n" for path in train)
        if not listing.is_file() or listing.read_text() != text:
            atomic_write_text(listing, text)
        return str(listing)

    def respond(self, spec: Any) -> Respond | None:
        """Threshold, best class, the SUT's framework's NMS op (or numpy's), top-K: the
        SUT's final detections."""
        from quantmark.tasks.detection.postprocess import Postprocess

        suppressor = (_framework_suppressor(self.sut)
                      if self.sut is not None and spec.head == "raw" else None)
        return Postprocess(head=spec.head, num_classes=spec.num_classes, suppressor=suppressor)

    def describe(self, spec: Any) -> dict[str, Any]:
        post = self.respond(spec)
        return {**super().describe(spec), "head": spec.head, "postprocess": post.describe(),
                "input": f"letterbox {spec.input_size}x{spec.input_width}, RGB, pixels/255"}

    def score(self, work: Path, prepared: Any) -> dict[str, Any]:
        """COCO mAP of the accuracy log's detections, mapped back to each image's pixels;
        the detections (COCO results) and the ground truth they were scored against stay in
        the run folder, so two runs are later paired image by image."""
        from quantmark.tasks.detection import scoring
        from quantmark.tasks.detection.targets import check_workload

        dataset, spec = prepared.dataset, prepared.spec
        by_index, missing = scoring.read_detections(work / "mlperf_log_accuracy.json",
                                                    prepared.qsl.total_count)
        if missing:
            return {"missing": missing}
        rows = dataset.cache_rows
        original = {}
        for index, detections in by_index.items():
            height, width = (int(v) for v in dataset.image_sizes[rows[index]])
            original[index] = scoring.to_original(detections, height, width, spec.input_size,
                                                  spec.input_width)
        results = scoring.coco_detections(original, [dataset.image_id(int(r)) for r in rows],
                                          dataset.categories)
        truth = dataset.ground_truth(rows)
        atomic_write_text(work / DETECTIONS_FILE, json.dumps(results))
        atomic_write_text(work / GROUND_TRUTH_FILE, json.dumps(truth))
        found = scoring.evaluate(truth, results)
        target = check_workload(100.0 * found.map, dataset.coco_val2017, len(rows))
        atomic_write_text(work / "accuracy.txt", scoring.accuracy_text(found, target))
        return {"map": 100.0 * found.map, "map50": 100.0 * found.map50, "images": len(rows),
                "detections": len(results), "target": target.line()}

    def paired_change(self, baseline: Path, candidate: Path) -> QualityChange | None:
        """The candidate's mAP change against the baseline's over the images both scored,
        with a paired bootstrap interval over images; None where either run lacks its files
        or the two were scored against other ground truth."""
        from quantmark.tasks.detection import scoring

        files = [(folder / DETECTIONS_FILE, folder / GROUND_TRUTH_FILE)
                 for folder in (baseline, candidate)]
        if not all(path.is_file() for pair in files for path in pair):
            return None
        truths = [json.loads(truth.read_text()) for _, truth in files]
        if truths[0] != truths[1]:
            return None
        change = scoring.paired_change(truths[0], *(json.loads(found.read_text())
                                                    for found, _ in files))
        return QualityChange(delta_points=change.delta, low=change.low, high=change.high,
                             n_samples=change.images, n_groups=change.images,
                             method=change.method, metric=self.metric.name,
                             baseline=change.baseline, candidate=change.candidate)


def _head_of(path: str | Path) -> str:
    """"raw" or "nms": the detector's output form (its first 3-D float output)."""
    import onnx

    from quantmark.models.workload import detector_head

    proto = onnx.load(str(path), load_external_data=False)
    for output in proto.graph.output:
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in output.type.tensor_type.shape.dim]
        head = detector_head(dims)
        if head:
            return head[0]
    return "raw"


TASK = DetectionTask()
