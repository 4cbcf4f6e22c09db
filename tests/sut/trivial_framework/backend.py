"""A backend that predicts the same scores for every image: enough of a framework for LoadGen
to run it end to end, and cheap, so the plugin test measures the plumbing and not a model."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build
from quantmark.sut.interface import Backend, SutOptions

VERSION = "0.1"
#: each predict's least time, a small model's: at microseconds, LoadGen's own cost per query
#: dominates, and a quick SingleStream run, which gets the queries of its warm-up's rate (800k
#: samples/s), ran past its wall bound beside a CPU hog
PREDICT_S = 0.0005


class FixedScoresBackend(Backend):
    """Class 0 first, every time."""

    def __init__(self, artifact: Artifact, classes: int, fault: str = "none") -> None:
        self.artifact = artifact
        self.classes = classes
        self.fault = fault  # "raise" or "hang" on every predict (trivial-faulty)
        self._scores = np.zeros(classes, np.float32)

    def load(self) -> None:
        scores = json.loads(self.artifact.path.read_text())["scores"]
        self._scores = np.asarray(scores, np.float32)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        if self.fault == "raise":
            raise RuntimeError("injected fault")
        if self.fault == "hang":
            threading.Event().wait()  # never set: a call that never returns
        time.sleep(PREDICT_S)
        return np.tile(self._scores, (len(batch), 1))

    def describe(self) -> dict[str, Any]:
        return {"framework": "trivial", "framework_version": VERSION,
                "requested_precision": "fp32", "executed_precision": "fp32",
                "model_file": str(self.artifact.path)}


def _model(spec: Any) -> Artifact:
    """The "model": a file of fixed scores, cached like every artifact."""
    scores = [1.0] + [0.0] * (spec.num_classes - 1)
    key = hash_json({"what": "trivial-scores", "model": spec.name, "scores": scores})

    def build(folder: Path) -> Artifact:
        path = folder / "scores.json"
        path.write_text(json.dumps({"scores": scores}))
        return Artifact(path=path, format="json", precision="fp32", key=key,
                        weights="fixed scores", source_hash=hash_file(path),
                        meta={"model": spec.name, "layout": "NCHW"})

    return cached_build(spec.name, key, build)


def create(name: str, options: SutOptions, spec: Any, calibration: Any) -> FixedScoresBackend:
    """The registry entry's factory: ``create(name, SutOptions, ModelSpec, Calibration)``."""
    return FixedScoresBackend(_model(spec), spec.num_classes,
                              str(options.extra.get("trivial_fault", "none")))
