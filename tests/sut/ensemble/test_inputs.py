"""The ensemble's QSL: one loaded tensor per distinct input, gathered together."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.qsl.library import QuerySampleLibrary
from quantmark.sut.ensemble.inputs import EnsembleInputs, EnsembleSamples


def _samples() -> EnsembleSamples:
    small = np.arange(6 * 3 * 2 * 2, dtype=np.float32).reshape(6, 3, 2, 2)
    large = np.arange(6 * 3 * 4 * 4, dtype=np.float32).reshape(6, 3, 4, 4) * -1
    labels = list(range(6))
    return EnsembleSamples([QuerySampleLibrary.from_arrays(small, labels, 4),
                            QuerySampleLibrary.from_arrays(large, labels, 6)])


def test_a_batch_holds_every_input_and_its_indices() -> None:
    samples = _samples()
    assert samples.total_count == 6 and samples.performance_count == 4
    samples.load([1, 3, 4])
    batch = samples.batch([4, 1])
    assert isinstance(batch, EnsembleInputs)
    assert batch.indices == (4, 1) and len(batch) == 2
    small, large = batch
    assert small.shape == (2, 3, 2, 2) and large.shape == (2, 3, 4, 4)
    assert small[0, 0, 0, 0] == 4 * 12 and large[1, 0, 0, 0] == -1 * 48
    assert samples.sample_bytes == [12 * 4, 48 * 4]


def test_a_reused_batch_writes_into_the_same_buffers() -> None:
    samples = _samples()
    samples.load(range(6))
    first = samples.batch([0, 1])
    second = samples.batch([2, 3], out=first)
    assert second.indices == (2, 3)
    for old, new in zip(first, second, strict=True):
        assert new is old  # np.take(out=) returns the buffer it filled
    assert second[0][0, 0, 0, 0] == 2 * 12


def test_one_sample_is_a_view_of_each_input() -> None:
    samples = _samples()
    samples.load([5])
    one = samples.sample(5)
    assert one.indices == (5,)
    assert all(view.base is not None and not view.flags.writeable for view in one)


def test_unload_drops_the_sample_from_every_input() -> None:
    samples = _samples()
    samples.load([0, 2])
    samples.unload([2])
    samples.batch([0])
    with pytest.raises(KeyError):
        samples.batch([2])
    assert all(lib.loaded_count == 1 for lib in samples.libraries)


def test_inputs_must_hold_the_same_samples() -> None:
    a = QuerySampleLibrary.from_arrays(np.zeros((3, 1), np.float32), [0, 1, 2], 3)
    b = QuerySampleLibrary.from_arrays(np.zeros((4, 1), np.float32), [0, 1, 2, 3], 4)
    with pytest.raises(ValueError, match="same samples"):
        EnsembleSamples([a, b])
