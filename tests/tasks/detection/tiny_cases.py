"""What every framework's detector tests share: the tiny YOLO fixture's two files (raw head
and nms head), the spec a detection run hands a SUT for them, seeded input batches and
calibration, and the files' outputs as plain ONNX Runtime computes them (the function every
SUT must reproduce)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.tasks.detection.yolo_fixture import tiny_yolo_onnx

SIZE, CLASSES = 64, 3
#: output shapes of a batch of 2: 3 classes, 64 px: 64 + 16 anchors; the nms head's top 20
SHAPES = {"raw": (2, 4 + CLASSES, 80), "nms": (2, 20, 6)}


def _no_builder(*_: Any) -> None:
    raise AssertionError("a detector spec is built from its file, never from torch")


def detector_spec(head: str, classes: int = CLASSES) -> Any:
    """The spec the detection task resolves for the tiny file (letterbox, pixels / 255)."""
    from quantmark.models.zoo import ModelSpec

    return ModelSpec(name="tiny-yolo", mean=(0.0,) * 3, std=(255.0,) * 3, builder=_no_builder,
                     input_size=SIZE, resize_short=SIZE, num_classes=classes,
                     resize_rule="letterbox", task="detection", head=head)


def detector_options(path: Path | str) -> Any:
    """A SUT's options for running the file at ``path`` Offline."""
    from quantmark.sut.interface import SutOptions

    return SutOptions(model="tiny-yolo", scenario="Offline", model_path=str(path))


def detector_files(folder: Path) -> dict[str, Path]:
    """The two heads' files, written into ``folder``."""
    return {"raw": tiny_yolo_onnx(folder / "raw.onnx"),
            "nms": tiny_yolo_onnx(folder / "nms.onnx", nms=True)}


def seeded_images(seed: int, count: int = 2) -> np.ndarray:
    """A seeded batch, NCHW, as the spec's preprocessing leaves pixels (0..1)."""
    return np.random.default_rng(seed).random((count, 3, SIZE, SIZE), dtype=np.float32)


def random_calibration(count: int = 32) -> Any:
    """Calibration on seeded random images (the fixture's weights are random too)."""
    from tests.digits_model import ArrayCalibration

    return ArrayCalibration(seeded_images(0, count), source="random images")


def onnxruntime_output(path: Path, batch: np.ndarray) -> np.ndarray:
    """The file run by plain ONNX Runtime: the function every SUT must compute."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": batch})[0]


def box_errors(output: np.ndarray, reference: np.ndarray, head: str) -> tuple[float, float]:
    """(median |box error| in pixels, max |score error|). nms rows are the top-K, whose order
    near-equal random scores may swap: each row is matched to its nearest reference box."""
    if head == "raw":
        return (float(np.median(np.abs(output[:, :4] - reference[:, :4]))),
                float(np.abs(output[:, 4:] - reference[:, 4:]).max()))
    nearest = np.abs(output[:, :, None, :4] - reference[:, None, :, :4]).max(-1).min(-1)
    return float(np.median(nearest)), float(np.abs(output[..., 4] - reference[..., 4]).max())


def built_outputs(create: Any, suts: tuple[str, ...], heads: tuple[str, ...],
                  files: dict[str, Path], batch: np.ndarray) -> dict[tuple[str, str], Any]:
    """(sut, head) -> (output on ``batch``, describe(), artifact meta, label offset): each
    SUT made by its framework's ``create``, loaded once on random calibration, then closed."""
    calibration = random_calibration()
    out = {}
    for head in heads:
        for name in suts:
            backend = create(name, detector_options(files[head]), detector_spec(head),
                             calibration)
            backend.load()
            out[name, head] = (backend.predict(batch), backend.describe(), backend.artifact.meta,
                               backend.label_offset)
            backend.close()
    return out


class FixedHeadBackend:
    """A backend whose ``predict`` is a fixed raw head of 3 classes and 8 anchors: two
    overlapping boxes of class 1 (0.9 and 0.8), whatever the samples (timing the
    postprocessing, not a model)."""

    def encode_samples(self, samples: np.ndarray) -> np.ndarray:
        return samples

    def predict(self, samples: np.ndarray) -> np.ndarray:
        head = np.zeros((len(samples), 4 + 3, 8), np.float32)
        head[:, :4, :2] = [[10, 11], [10, 10], [8, 8], [8, 8]]
        head[:, 5, :2] = [0.9, 0.8]
        return head
