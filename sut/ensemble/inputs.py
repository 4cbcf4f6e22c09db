"""One loaded tensor per distinct member input, gathered together for every batch.

Members whose preprocessing differs (Lite1 at 240 px, Lite2 at 260, NHWC for TFLite, int8 for a
full-integer model) each need their own input. The ensemble's QSL holds one
``QuerySampleLibrary`` per distinct input (members with the same recipe and no encoding share
one) and loads and unloads them together on LoadGen's request. Everything is preprocessed and
encoded at load, outside the timed path; the price is memory (one buffer per input) and a gather per
input per batch, both measured by ``quantmark.bench.ensemble_inputs`` (BENCHMARKS.md at ab1032b,
"Ensembles of co-located models").
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class EnsembleInputs(tuple):
    """One batch for every distinct input (a tuple of arrays) and the QSL indices it holds,
    which the ensemble's accuracy run uses to log each member's output per sample."""

    indices: tuple[int, ...]

    def __new__(cls, arrays: Iterable[np.ndarray], indices: Sequence[int]) -> EnsembleInputs:
        inputs = super().__new__(cls, arrays)
        inputs.indices = tuple(int(i) for i in indices)
        return inputs

    def __len__(self) -> int:  # the batch's sample count, as an array's len would be
        return len(self.indices)

    @property
    def tensors(self) -> tuple[np.ndarray, ...]:
        return tuple(iter(self))


class EnsembleSamples:
    """The QSL of an ensemble: several ``QuerySampleLibrary`` (one per input) behaving as one."""

    def __init__(self, libraries: list[Any]) -> None:
        if not libraries:
            raise ValueError("an ensemble needs at least one input")
        first = libraries[0]
        if any(lib.total_count != first.total_count for lib in libraries):
            raise ValueError("every input of an ensemble must hold the same samples")
        self.libraries = libraries
        self.labels = first.labels
        self.total_count = first.total_count
        self.performance_count = min(lib.performance_count for lib in libraries)
        self.load_s = 0.0  # time spent preprocessing samples into the inputs
        self.sample_bytes: list[int] = []  # one sample's resident bytes in each input
        self._handle: Any = None

    @property
    def loaded_bytes(self) -> int:
        return sum(lib.loaded_bytes for lib in self.libraries)

    def load(self, indices: Iterable[int]) -> None:
        started = time.perf_counter()
        indices = list(indices)
        for lib in self.libraries:
            lib.load(indices)
        self.load_s += time.perf_counter() - started
        if not self.sample_bytes and indices:  # after encoding: int8 inputs take a quarter
            self.sample_bytes = [lib.loaded_bytes // lib.loaded_count for lib in self.libraries]

    def unload(self, indices: Iterable[int]) -> None:
        indices = list(indices)
        for lib in self.libraries:
            lib.unload(indices)

    def unload_all(self) -> None:
        for lib in self.libraries:
            lib.unload_all()

    def batch(self, indices: Iterable[int] | np.ndarray, out: EnsembleInputs | None = None
              ) -> EnsembleInputs:
        """Every input's batch; ``out`` (an earlier batch of the same size) is reused."""
        indices = list(indices) if not isinstance(indices, np.ndarray) else indices.tolist()
        buffers = out.tensors if out is not None else [None] * len(self.libraries)
        pairs = zip(self.libraries, buffers, strict=True)
        return EnsembleInputs((lib.batch(indices, out=buffer) for lib, buffer in pairs), indices)

    def sample(self, index: int) -> EnsembleInputs:
        """One sample as a read-only view of each input's buffer: no copy."""
        return EnsembleInputs((lib.sample(index) for lib in self.libraries), (index,))

    def label(self, index: int) -> int:
        return int(self.labels[index])

    def construct(self) -> Any:
        import mlperf_loadgen as lg

        if self._handle is None:
            self._handle = lg.ConstructQSL(self.total_count, self.performance_count,
                                           lambda ids: self.load(list(ids)),
                                           lambda ids: self.unload(list(ids)))
        return self._handle

    def destroy(self) -> None:
        if self._handle is not None:
            import mlperf_loadgen as lg

            lg.DestroyQSL(self._handle)
            self._handle = None
        self.unload_all()
