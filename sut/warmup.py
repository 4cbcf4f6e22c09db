"""The warm-up measurement a run's LoadGen settings come from, taken in the test's own process
before LoadGen starts: ``predict`` timed at batch 1 and at the run's batch, and the real query
paths (Server's single-sample queries, Offline's busy workers), whose harness costs ``predict``
alone does not show."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.scenarios.settings import Measurement
from quantmark.sut.base import LoadGenSUT, Respond, SampleSource

WARMUP_SECONDS = 1.0  # per measured batch shape


def measure(backend: Any, qsl: Any, batch_size: int, scenario: str, workers: int,
            times: dict[str, float] | None = None, respond: Respond | None = None):
    """Warm up, then time batch 1 and batch ``batch_size`` on real samples; for Offline also
    the rate of the real batch path with ``workers`` busy, and for Server single-sample queries
    through the worker path (with the task's ``respond``, a detector's NMS, as a run does it).
    ``times["warmup_s"]`` gets the warm-up's duration: where a
    framework compiles on first use (torch.compile, XLA), that is its compile time. A predict
    that fails here is the SUT's failure (exit 3), not a crash."""
    indices = list(range(min(qsl.total_count, max(batch_size, 8))))
    qsl.load(indices)
    try:
        return _measure_loaded(backend, qsl, indices, batch_size, scenario, workers,
                               times if times is not None else {}, respond)
    except (UserError, SutError):
        raise
    except Exception as exc:  # noqa: BLE001 - any framework error is the SUT's
        raise SutError(f"predict failed in the warm-up measurement: {exc!r}") from exc
    finally:
        qsl.unload(indices)


def _measure_loaded(backend: Any, qsl: Any, indices: list[int], batch_size: int,
                    scenario: str, workers: int, times: dict[str, float],
                    respond: Respond | None = None):
    one = qsl.batch(indices[:1])
    full = qsl.batch([indices[i % len(indices)] for i in range(batch_size)])
    started = time.perf_counter()
    backend.warmup(full)
    times["warmup_s"] = time.perf_counter() - started
    latency = statistics.median(time_predict(backend.predict, one, WARMUP_SECONDS))
    batch_latency = (latency if batch_size == 1 else
                     statistics.median(time_predict(backend.predict, full, WARMUP_SECONDS)))
    query_path = (statistics.median(measure_query_path_s(backend.predict, qsl, indices[0],
                                                         WARMUP_SECONDS, respond=respond))
                  if scenario == "Server" else 0.0)
    path_rate = (measure_batch_path_rate(backend.predict, qsl, indices, batch_size=batch_size,
                                         workers=workers, seconds=WARMUP_SECONDS,
                                         batch_latency_s=batch_latency, respond=respond)
                 if scenario == "Offline" else 0.0)
    return Measurement(latency_s=latency, batch_latency_s=batch_latency, batch_size=batch_size,
                       query_path_s=query_path, path_throughput=path_rate)


def measure_query_path_s(predict: Callable[[np.ndarray], np.ndarray], samples: SampleSource,
                         index: int, seconds: float, min_runs: int = 20,
                         respond: Respond | None = None) -> list[float]:
    """Durations (s) of single-sample queries through the real worker path, one at a time:
    issue -> queue -> worker -> gather -> predict -> classify -> complete.

    What a Server query really costs. For a fast model the harness part is not negligible
    (thread hand-offs, and small numpy calls that are slow with caches cold after inference),
    so a Server load estimated from ``predict`` alone can overload the SUT.
    """
    done = threading.Event()

    class _Completer:  # stands in for LoadGen: only notices the completion
        @staticmethod
        def QuerySampleResponse(*_args: Any) -> None:  # noqa: N802 - LoadGen's name
            return None

        @staticmethod
        def QuerySamplesComplete(_responses: Any) -> None:  # noqa: N802 - LoadGen's name
            done.set()

    sut = LoadGenSUT(predict, samples, batch_size=1, respond=respond)
    sut._start_workers(_Completer)
    durations: list[float] = []

    def issue_like_loadgen() -> None:
        """Issue from a thread of its own, as LoadGen does: its wake-ups and GIL hand-overs
        are part of what each query costs."""
        deadline = time.perf_counter() + seconds
        while len(durations) < min_runs or time.perf_counter() < deadline:
            done.clear()
            start = time.perf_counter()
            sut._issue([len(durations)], [index])
            done.wait()
            durations.append(time.perf_counter() - start)

    issuer = threading.Thread(target=issue_like_loadgen, name="query-path-issuer")
    try:
        issuer.start()
        issuer.join()
    finally:
        sut.stop()
    return durations


def time_predict(predict: Callable[[np.ndarray], np.ndarray], batch: np.ndarray,
                 seconds: float, min_runs: int = 5) -> list[float]:
    """Call ``predict(batch)`` repeatedly for about ``seconds``; return each call's duration (s).

    Used for the warm-up measurement that sets LoadGen's expected latency / QPS.
    """
    durations: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(durations) < min_runs or time.perf_counter() < deadline:
        start = time.perf_counter()
        predict(batch)
        durations.append(time.perf_counter() - start)
    return durations


def measure_batch_path_rate(predict: Callable[[np.ndarray], np.ndarray], samples: SampleSource,
                            indices: Sequence[int], *, batch_size: int, workers: int,
                            seconds: float, query_seconds: float = 0.25,
                            batch_latency_s: float = 0.0, respond: Respond | None = None
                            ) -> float:
    """Samples per second through the real Offline path: queue -> workers -> gather -> predict
    -> classify -> complete, with every worker busy.

    ``predict`` alone overstates what a run sustains when the harness costs more than the
    model (a model that takes 0.1 ms a batch spends most of its time gathering and
    completing); LoadGen sizes an Offline run from this rate, so an overstated one makes a
    5-second run last minutes. Each query holds enough batches to keep the workers fed for
    about ``query_seconds`` (judged by ``batch_latency_s``), so a thread's wake-up between
    queries is not counted as the SUT's time.
    """
    lock = threading.Lock()
    done = threading.Event()
    left = [0]

    class _Completer:  # stands in for LoadGen: counts completions
        @staticmethod
        def QuerySampleResponse(*_args: Any) -> None:  # noqa: N802 - LoadGen's name
            return None

        @staticmethod
        def QuerySamplesComplete(responses: Any) -> None:  # noqa: N802 - LoadGen's name
            with lock:
                left[0] -= len(responses)
                if left[0] <= 0:
                    done.set()

    per_round = batch_size * max(1, workers)
    rounds = int(min(64, max(1, query_seconds // max(batch_latency_s, 1e-6))))
    count = per_round * rounds
    query = [indices[i % len(indices)] for i in range(count)]
    sut = LoadGenSUT(predict, samples, batch_size=batch_size, workers=workers,
                     respond=respond)
    sut._start_workers(_Completer)
    total = 0
    started = time.perf_counter()
    try:
        while total == 0 or time.perf_counter() - started < seconds:
            done.clear()
            left[0] = count
            sut._issue(list(range(count)), query)
            done.wait()
            total += count
    finally:
        sut.stop()
    if sut.error is not None:
        raise sut.error
    return total / (time.perf_counter() - started)
