"""What each framework's NMS op costs a detector's postprocessing, against quantmark's numpy NMS.

A detector's SUT answers LoadGen with final detections, so the NMS it runs (its framework's op
where it has one: ``FrameworkInfo.nms``) is inside its timed work. This times the task's whole
postprocessing step (``Postprocess``: threshold, best class, suppression, top-K, LoadGen's
arrays) with each suppressor on the same outputs, in interleaved rounds (the suppressors'
order rotates each round), and gives each op's time over numpy's with a paired interval
(``report.stats.speedup`` over the rounds). An op that takes a whole batch in one call
(``NativeSuppressor.batched``: OpenVINO's, ONNX Runtime's) is timed so, as the task runs it, and
again a call per image (its batch hidden), the path it ran before. Two workloads:

* ``digits-detect``: the built-in detector's real raw outputs (onnxruntime FP32 on its
  evaluation canvases, a batch of 8: 10 classes, 180 anchors);
* ``coco-shaped``: seeded random outputs of YOLOv8/11's COCO shape (80 classes, 8400 anchors,
  a batch of 8), scores skewed low as a trained model's are, so thousands pass 0.001.

    python -m quantmark.bench.nms_ops [--rounds 15] [--output bench-results/nms_ops]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import atomic_write_json
from quantmark.report.stats import speedup

log = logging.getLogger(__name__)

BATCH = 8
#: framework -> the module whose ``create`` builds its op
OPS = {"onnxruntime": "quantmark.sut.onnxruntime.nms", "openvino": "quantmark.sut.openvino.nms",
       "tflite": "quantmark.sut.tflite.nms", "tensorflow": "quantmark.sut.tensorflow.nms"}


class PerImage:
    """A batched op with its batch hidden: the task's per-sample path over the same op."""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.name = f"{op.name}, a call per image"

    def __call__(self, boxes: np.ndarray, scores: np.ndarray, iou_threshold: float,
                 max_keep: int) -> np.ndarray:
        return self.op(boxes, scores, iou_threshold, max_keep)


def suppressors() -> dict[str, Any]:
    """numpy's and every installed framework's op, as the task wraps them (and an op that
    takes batches, also a call per image)."""
    import importlib

    from quantmark.tasks.detection.postprocess import NativeSuppressor, NumpySuppressor

    found: dict[str, Any] = {"numpy": NumpySuppressor()}
    for framework, module in OPS.items():
        try:
            op = importlib.import_module(module).create()
        except ImportError as exc:
            log.warning("%s: not installed (%s), left out", framework, exc)
            continue
        found[framework] = NativeSuppressor(op)
        if found[framework].batched:
            found[f"{framework} per image"] = NativeSuppressor(PerImage(op))
    return found


def digits_outputs() -> np.ndarray:
    """The built-in detector's raw outputs on a batch of its evaluation canvases, as the
    ort-fp32 SUT computes them from the task's own samples."""
    from quantmark.bench.vendor_loops import prepared_backend, real_batches

    loaded = prepared_backend("ort-fp32", "digits-detect", BATCH, 0, None)
    batches, _indices = real_batches(loaded, BATCH, BATCH)
    outputs = loaded.backend.predict(batches[0])
    loaded.backend.close()
    return np.asarray(outputs)


def coco_shaped_outputs(seed: int = 0, classes: int = 80, anchors: int = 8400,
                        size: int = 640) -> np.ndarray:
    """Seeded outputs of YOLO's COCO head shape, [N, 4 + 80, 8400]."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, size, (BATCH, 2, anchors))
    sides = rng.uniform(8, 160, (BATCH, 2, anchors))
    scores = rng.random((BATCH, classes, anchors)) ** 6  # most low, a few confident
    return np.concatenate([centres, sides, scores], axis=1).astype(np.float32)


def time_rounds(posts: dict[str, Callable], outputs: np.ndarray, rounds: int
                ) -> dict[str, list[float]]:
    """ms per batch of each postprocessing, one call each per round, the order rotated."""
    indices = list(range(len(outputs)))
    names = list(posts)
    for name in names:  # warm: a first call builds per-thread requests and interpreters
        posts[name](outputs, indices)
    times: dict[str, list[float]] = {name: [] for name in names}
    for number in range(rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            posts[name](outputs, indices)
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def workload_entry(name: str, outputs: np.ndarray, rounds: int, found: dict[str, Any]
                   ) -> dict[str, Any]:
    """Each suppressor's median ms per batch and its time over numpy's, with the interval."""
    from quantmark.tasks.detection.postprocess import Postprocess

    classes = outputs.shape[1] - 4
    posts = {key: Postprocess(head="raw", num_classes=classes, suppressor=sup)
             for key, sup in found.items()}
    times = time_rounds(posts, outputs, rounds)
    rows = {}
    for key, values in times.items():
        ratio = speedup(times["numpy"], values, higher_is_better=False, paired=True)
        rows[key] = {"op": found[key].name, "median_ms": statistics.median(values),
                     "batched": bool(getattr(found[key], "batched", False)),
                     "rounds_ms": values,  # the evidence the page checks the two against
                     "numpy_over_op": {"point": ratio.point, "low": ratio.low,
                                       "high": ratio.high, "method": ratio.method}}
    return {"workload": name, "shape": list(outputs.shape), "rounds": rounds, "rows": rows}


def table(entries: list[dict[str, Any]]) -> str:
    lines = ["| workload | NMS | op calls | ms per batch of 8 (median) | numpy's time / this "
             "one's [95% CI] |", "|---|---|---|---|---|"]
    for entry in entries:
        for row in entry["rows"].values():
            ratio = row["numpy_over_op"]
            interval = (f" [{ratio['low']:.2f}, {ratio['high']:.2f}]"
                        if ratio["low"] is not None else "")
            calls = "one a batch" if row.get("batched") else "one an image"
            lines.append(f"| {entry['workload']} {entry['shape']} | {row['op']} | {calls} | "
                         f"{row['median_ms']:.2f} | {ratio['point']:.2f}x{interval} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", default="bench-results/nms_ops")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    found = suppressors()
    entries = [workload_entry("digits-detect", digits_outputs(), args.rounds, found),
               workload_entry("coco-shaped", coco_shaped_outputs(), args.rounds, found)]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "nms_ops.json", entries)
    log.info("%s", table(entries))
    (out / "table.md").write_text(table(entries))
    print(json.dumps({"written": str(out / "nms_ops.json")}))


if __name__ == "__main__":
    main()
