"""The one small interface every framework implements.

A framework SUT only loads its artifact, predicts a batch and says what executed. Everything
LoadGen needs (batching, threads, response buffers, exactly-once completion) lives once in
``sut.base`` and is shared by every framework.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class SutOptions:
    """Knobs a run hands to a framework SUT (plain data, built by the harness)."""

    model: str
    scenario: str
    batch_size: int = 1
    threads: int = 0  # 0: the framework's default (all cores)
    model_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    """A framework at a precision: load once, warm up, predict batches, describe what ran."""

    #: the data layout the backend wants its input in ("NCHW" or "NHWC")
    layout: str = "NCHW"

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

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release the session; default does nothing."""
