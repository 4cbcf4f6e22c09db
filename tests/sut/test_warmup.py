"""The warm-up measurement: the real query paths are timed, harness and all."""

from __future__ import annotations

import numpy as np
import pytest


def test_query_path_timing_covers_predict_and_the_harness():
    import time

    from quantmark.qsl.library import QuerySampleLibrary
    from quantmark.sut.warmup import measure_query_path_s

    qsl = QuerySampleLibrary.from_arrays(np.zeros((4, 1), np.float32), np.zeros(4), 4)
    qsl.load(range(4))

    def predict(batch):
        time.sleep(0.002)
        return np.zeros((len(batch), 10), np.float32)

    durations = measure_query_path_s(predict, qsl, 0, seconds=0.1, min_runs=20)
    assert len(durations) >= 20
    assert min(durations) >= 0.002  # the whole path, predict included, not just a hand-off


class _SlowGather:
    """A QSL whose gather costs 1 ms a sample: the harness, not predict, sets the pace."""

    def __init__(self) -> None:
        import time

        self._sleep = time.sleep

    def batch(self, indices, out=None):
        self._sleep(0.001 * len(indices))
        return np.zeros((len(indices), 1), np.float32)

    def sample(self, index):
        return self.batch([index])


def test_offline_path_rate_is_what_the_harness_sustains_not_predict_alone():
    """A model of 0.1 ms a batch behind a 1 ms-a-sample harness: the rate LoadGen is told must
    be the harness's (~1000/s with one worker), or a 5-second quick run lasts minutes."""
    from quantmark.sut.warmup import measure_batch_path_rate

    def predict(batch):
        return np.zeros((len(batch), 10), np.float32)

    rate = measure_batch_path_rate(predict, _SlowGather(), list(range(8)), batch_size=8,
                                   workers=1, seconds=0.3, batch_latency_s=0.0001)
    assert rate < 1100  # 1 ms a sample cannot go faster; predict alone would say ~80,000/s
    assert rate > 200  # and the harness is timed, not a thread's idle wake-ups


def test_offline_path_rate_reports_a_failing_predict():
    from quantmark.sut.warmup import measure_batch_path_rate

    def predict(batch):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        measure_batch_path_rate(predict, _SlowGather(), [0], batch_size=1, workers=1,
                                seconds=0.05)
