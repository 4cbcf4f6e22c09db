"""LoadGen plumbing written once for every framework.

``LoadGenSUT`` turns LoadGen's issue callbacks into ``Backend.predict`` calls:

* SingleStream queries (one sample, ``inline_single=True``) are predicted inline on LoadGen's
  issue thread: no hand-off, so the harness adds only microseconds to the measured latency.
  Never for Server: a busy issue thread would delay LoadGen's own arrival schedule.
* Every other query is split into chunks of ``batch_size`` and queued; worker threads take a
  chunk, top it up from the queue to ``batch_size`` (dynamic batching for Server), gather the
  samples from the QSL into a buffer they reuse, predict, and complete the ids.
* The predicted class is returned as one float32 per sample (the MLPerf convention). The
  response buffer is a local numpy array that lives until ``QuerySamplesComplete`` returns;
  LoadGen copies the bytes during that call. A task that answers with more than a class (a
  detector's boxes after NMS) passes ``respond``: it turns each batch's outputs into one
  float32 array per sample, on the worker's thread, inside the timed work.
* A backend that runs batches asynchronously (OpenVINO's ``AsyncInferQueue``) passes
  ``submit``: then one feeder thread takes the chunks, the backend gathers each into an idle
  request's own input buffer, and the framework's completion callback completes the ids.
* Every id is completed exactly once. If ``predict`` raises, that chunk and everything issued
  afterwards are completed at once with class -1 so LoadGen can finish; the error is kept and
  reported by the runner. LoadGen may keep issuing for a long time after that (Server keeps to
  its arrival schedule until the minimum duration), so ``on_fatal`` is called after a short
  grace period and may end the process.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

_STOP = object()
FAILED_CLASS = -1.0


class SampleSource(Protocol):
    """What the SUT needs from a QSL: gather loaded samples into a batch (into ``out``)."""

    def batch(self, indices: Sequence[int] | np.ndarray,
              out: np.ndarray | None = None) -> np.ndarray: ...

    def sample(self, index: int) -> np.ndarray: ...


#: ``respond(outputs, qsl_indices)``: a batch's outputs -> one float32 response per sample
Respond = Callable[[np.ndarray, Sequence[int]], list[np.ndarray]]

#: ``submit(count, fill, done)``: wait for an idle request, call ``fill(buffer)`` to gather the
#: batch into that request's input buffer (it returns the filled batch), start it, and call
#: ``done(outputs, error)`` from the framework's completion callback
Submit = Callable[[int, Callable[[np.ndarray | None], np.ndarray],
                   Callable[[np.ndarray | None, BaseException | None], None]], None]


class LoadGenSUT:
    """Adapts a ``Backend`` to LoadGen's fast SUT callbacks."""

    def __init__(
        self,
        predict: Callable[[np.ndarray], np.ndarray],
        samples: SampleSource,
        *,
        batch_size: int = 1,
        workers: int = 1,
        label_offset: int = 0,
        inline_single: bool = False,
        on_fatal: Callable[[BaseException], None] | None = None,
        fatal_grace_s: float = 3.0,
        submit: Submit | None = None,
        respond: Respond | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._predict = predict
        self._submit = submit
        self._respond = respond
        self._samples = samples
        self.batch_size = batch_size
        self.workers = max(1, workers)
        self.label_offset = label_offset
        self.inline_single = inline_single
        self._on_fatal = on_fatal
        self._fatal_grace_s = fatal_grace_s
        self._queue: queue.Queue[Any] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.issued = 0
        self.completed = 0
        self.error: BaseException | None = None
        self.error_traceback: str | None = None
        self._lg: Any = None
        self._handle: Any = None
        self._fatal_timer: threading.Timer | None = None
        self._local = threading.local()  # per-thread gather buffers, reused batch after batch
        # The inline path's response buffer: SingleStream has one query in flight at a time and
        # LoadGen copies the bytes inside QuerySamplesComplete, so one float32 is reused.
        self._single = np.zeros(1, dtype=np.float32)
        self._single_address = self._single.__array_interface__["data"][0]

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Any:
        """Start worker threads and construct the LoadGen SUT; returns its handle."""
        import mlperf_loadgen as lg

        self._start_workers(lg)
        self._handle = lg.ConstructFastSUT(self._issue, self._flush)
        return self._handle

    def _start_workers(self, completer: Any) -> None:
        """Worker threads completing through ``completer`` (LoadGen, or a stand-in when the
        query path is timed before the test)."""
        self._lg = completer
        # an asynchronous backend needs one feeder: its requests, not threads, run in parallel
        for number in range(1 if self._submit is not None else self.workers):
            thread = threading.Thread(target=self._worker, name=f"sut-worker-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop workers and destroy the LoadGen SUT. Safe to call twice.

        The test ended by itself, so a pending fatal timer is no longer needed.
        """
        if self._fatal_timer is not None:
            self._fatal_timer.cancel()
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        if self._handle is not None:
            self._lg.DestroyFastSUT(self._handle)
            self._handle = None

    # ----------------------------------------------------------------- callbacks
    def _issue(self, ids: list[int], indices: list[int]) -> None:
        count = len(ids)
        with self._lock:
            self.issued += count
        if count == 1 and self.inline_single and self.workers == 1:
            self._run_inline(ids[0], indices[0])
            return
        step = self.batch_size
        for start in range(0, count, step):
            self._queue.put((ids[start : start + step], indices[start : start + step]))

    def _flush(self) -> None:
        """Nothing is ever held back waiting for more samples, so there is nothing to flush."""

    # ----------------------------------------------------------------- workers
    def _take(self) -> tuple[list[int], list[int]] | None:
        """Next chunk, topped up from the queue to ``batch_size`` (dynamic batching); None once
        this worker's stop marker arrives. A marker met while topping up goes back in the queue
        (after the chunk is done, the next take ends this worker)."""
        item = self._queue.get()
        if item is _STOP:
            return None
        ids, indices = list(item[0]), list(item[1])
        while len(ids) < self.batch_size:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is _STOP:
                self._queue.put(_STOP)
                break
            room = self.batch_size - len(ids)
            ids.extend(more[0][:room])
            indices.extend(more[1][:room])
            if len(more[0]) > room:  # put the rest back for the next round
                self._queue.put((more[0][room:], more[1][room:]))
        return ids, indices

    def _worker(self) -> None:
        run = self._run_chunk if self._submit is None else self._submit_chunk
        while (chunk := self._take()) is not None:
            run(*chunk)

    def _run_inline(self, sample_id: int, index: int) -> None:
        """One sample on LoadGen's thread with as few Python/numpy calls as possible: caches are
        cold after inference, and each call then costs ~10 us of measured latency."""
        if self._respond is not None:
            self._run_chunk([sample_id], [index])
            return
        value = FAILED_CLASS
        if self.error is None:
            try:
                scores = self._predict(self._samples.sample(index))
                if len(scores) != 1:
                    raise ValueError(f"predict returned {len(scores)} results for 1 sample")
                value = (scores[0] if scores.ndim == 1 else scores.argmax()) - self.label_offset
            except BaseException as exc:  # noqa: BLE001 - the id must still be completed
                self._record_failure(exc)
                value = FAILED_CLASS
        self._single[0] = value
        lg = self._lg
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample_id, self._single_address, 4)])
        with self._lock:
            self.completed += 1

    def _run_chunk(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        if self.error is None:
            try:
                if self._respond is not None:
                    outputs = self._predict(self._gather(indices))
                    self._complete_each(ids, self._answers(outputs, indices))
                    return
                classes = self._classify(self._gather(indices), len(indices))
            except BaseException as exc:  # noqa: BLE001 - any failure must still complete ids
                self._record_failure(exc)
                classes = np.full(len(ids), FAILED_CLASS, dtype=np.float32)
        else:
            classes = np.full(len(ids), FAILED_CLASS, dtype=np.float32)
        self._complete(ids, classes)

    def _answers(self, outputs: Any, indices: Sequence[int]) -> list[np.ndarray]:
        """The task's per-sample responses for a batch's outputs (``respond``), checked."""
        assert self._respond is not None
        answers = self._respond(outputs, indices)
        if len(answers) != len(indices):
            raise ValueError(f"respond returned {len(answers)} answers for {len(indices)} "
                             "samples")
        return answers

    def _complete_each(self, ids: Sequence[int], answers: list[np.ndarray]) -> None:
        """Complete ``ids`` with one float32 array each (kept alive until LoadGen copied)."""
        lg = self._lg
        buffers = [np.ascontiguousarray(answer, dtype=np.float32) for answer in answers]
        responses = [lg.QuerySampleResponse(sample_id, buffer.__array_interface__["data"][0],
                                            buffer.nbytes)
                     for sample_id, buffer in zip(ids, buffers, strict=True)]
        lg.QuerySamplesComplete(responses)
        with self._lock:
            self.completed += len(ids)
        del buffers

    def _submit_chunk(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Start the chunk on an idle request; its completion callback completes the ids."""
        if self.error is not None:
            self._complete(ids, np.full(len(ids), FAILED_CLASS, dtype=np.float32))
            return

        def fill(buffer: np.ndarray | None) -> np.ndarray:
            return self._samples.batch(indices, out=buffer)

        def done(outputs: np.ndarray | None, error: BaseException | None) -> None:
            try:
                if error is not None:
                    raise error
                if self._respond is not None:
                    self._complete_each(ids, self._answers(outputs, indices))
                    return
                classes = self._to_classes(np.asarray(outputs), len(ids))
            except BaseException as exc:  # noqa: BLE001 - the ids must still be completed
                self._record_failure(exc)
                classes = np.full(len(ids), FAILED_CLASS, dtype=np.float32)
            self._complete(ids, classes)

        assert self._submit is not None
        try:
            self._submit(len(ids), fill, done)
        except BaseException as exc:  # noqa: BLE001 - not started: complete the ids here
            self._record_failure(exc)
            self._complete(ids, np.full(len(ids), FAILED_CLASS, dtype=np.float32))

    def _gather(self, indices: Sequence[int]) -> np.ndarray:
        """The batch's samples. Multi-sample batches reuse this thread's buffer of that size:
        a fresh multi-MB array per batch pays page faults on every call. (Gathering the next
        batch on a helper thread during predict was tried: on 2 cores the copy slowed predict
        more than it saved.)"""
        if len(indices) == 1:
            return self._samples.sample(indices[0])  # a view of the QSL's buffer: no copy
        buffers = self._local.__dict__.setdefault("buffers", {})
        buffer = buffers.get(len(indices))
        if buffer is None:
            buffer = buffers[len(indices)] = self._samples.batch(indices)
            return buffer
        return self._samples.batch(indices, out=buffer)

    def _classify(self, batch: np.ndarray, count: int) -> np.ndarray:
        return self._to_classes(np.asarray(self._predict(batch)), count)

    def _to_classes(self, outputs: np.ndarray, count: int) -> np.ndarray:
        """Scores (N, C) or classes (N,) -> the dataset's class per sample, as float32."""
        if outputs.ndim == 2:
            classes = outputs.argmax(axis=1)
        elif outputs.ndim == 1:
            classes = outputs
        else:
            raise ValueError(f"predict returned shape {outputs.shape}; expected (N, C) or (N,)")
        if len(classes) != count:
            raise ValueError(f"predict returned {len(classes)} results for {count} samples")
        return (classes - self.label_offset).astype(np.float32)

    def _complete(self, ids: Sequence[int], classes: np.ndarray) -> None:
        """Complete ``ids``; ``classes`` (float32) stays referenced until LoadGen has copied it."""
        lg = self._lg
        buffer = np.ascontiguousarray(classes, dtype=np.float32)
        address = buffer.__array_interface__["data"][0]
        item = buffer.itemsize
        responses = [
            lg.QuerySampleResponse(sample_id, address + item * k, item)
            for k, sample_id in enumerate(ids)
        ]
        lg.QuerySamplesComplete(responses)
        with self._lock:
            self.completed += len(ids)
        del buffer

    # ----------------------------------------------------------------- failures
    def _record_failure(self, exc: BaseException) -> None:
        with self._lock:
            if self.error is not None:
                return
            self.error = exc
            self.error_traceback = traceback.format_exc()
        if self._on_fatal is not None:
            self._fatal_timer = threading.Timer(self._fatal_grace_s, self._on_fatal, args=(exc,))
            self._fatal_timer.daemon = True
            self._fatal_timer.start()

    @property
    def all_completed(self) -> bool:
        """True when every issued sample was completed (exactly once: ids are never re-queued)."""
        with self._lock:
            return self.issued == self.completed
