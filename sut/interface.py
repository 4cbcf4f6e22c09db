"""The one small interface every framework implements.

A framework SUT only loads its artifact, predicts a batch and says what executed. Everything
LoadGen needs (batching, threads, response buffers, exactly-once completion) lives once in
``sut.base`` and is shared by every framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from quantmark.models.artifacts import Artifact


@dataclass
class SutOptions:
    """Knobs a run hands to a framework SUT (plain data, built by the harness)."""

    model: str
    scenario: str
    batch_size: int = 1
    threads: int = 0  # 0: the framework's default (all cores)
    model_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: other models share these cores (an ensemble member): one call at a time, and no
    #: spin-waiting between calls that would take the CPU from the others
    co_located: bool = False


class Calibration(Protocol):
    """The calibration set a static INT8 path quantizes with (the test process's
    ``qsl.calibration_sets.CalibrationProvider``): decoded only when a SUT asks."""

    def arrays(self, layout: str) -> np.ndarray:
        """float32 calibration batch in ``layout`` ("NCHW" or "NHWC")."""

    def hash(self) -> str:
        """Identity of the calibration data (list, preprocessing, image content)."""

    def describe(self) -> dict[str, Any] | None:
        """Source, count, seed and hash, as results.json records them."""


class Backend(ABC):
    """A framework at a precision: load once, warm up, predict batches, describe what ran.

    Built by its registry entry's factory, ``create(name, SutOptions, ModelSpec, Calibration)``.
    The runner reads the members below and nothing else."""

    #: the data layout the backend wants its input in ("NCHW" or "NHWC")
    layout: str = "NCHW"
    #: the model file it runs and where that came from (set by the constructor)
    artifact: Artifact
    #: the model's class index minus this is the dataset's label (1 for TF-slim's 1001 classes)
    label_offset: int = 0
    #: requests in flight the framework wants (OpenVINO's throughput streams; known after load)
    preferred_workers: int = 1
    #: an asynchronous batch path (``sut.base.Submit``: OpenVINO's AsyncInferQueue) that
    #: LoadGenSUT uses instead of worker threads calling ``predict``; None: threads
    submit: Any = None

    @abstractmethod
    def load(self) -> None:
        """Create the session/interpreter. Called once before any predict."""

    def warmup(self, batch: np.ndarray, iterations: int = 3) -> None:
        """Run a few predictions so lazy init and JIT costs stay out of the measurement."""
        for _ in range(iterations):
            self.predict(batch)

    @abstractmethod
    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Return scores (N, classes) or class indices (N,) for a float32 batch.

        Must be safe to call from several threads at once (one call per worker thread).
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What actually executed: framework version, providers, executed precision evidence."""

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        """The settings that decide speed (API path, threads, streams, requests, input
        handling) and, where the framework ships a benchmark tool, ``vendor_command``: the
        command that reruns this figure in it. results.json records them, so two tools that
        disagree can be compared like for like. Called after ``load``."""
        return {"threads": getattr(self, "threads", 0)}

    def encode_samples(self, samples: np.ndarray) -> np.ndarray:
        """Samples as the model's input tensor wants them (e.g. a full-integer model's int8),
        applied by the QSL when LoadGen loads samples, outside the timed path (MLPerf's
        untimed "convert to whitelisted format" step). ``predict`` then gets encoded batches;
        the default keeps float32."""
        return samples

    def arm(self, on_fatal: Callable[[str], None]) -> None:  # noqa: B027 - optional hook
        """Called before the warm-up and again just before LoadGen starts: a backend that can
        tell a hang (an ensemble's member watchdog) ends the run with ``on_fatal(message)``.
        The default watches nothing."""

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release the session; default does nothing."""
