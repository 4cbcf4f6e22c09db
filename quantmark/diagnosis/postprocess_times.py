"""The task's postprocessing (``Task.respond``: a detector's threshold, NMS and top-K), timed
as a SUT runs it, for ``run.py profile``.

MLPerf times the SUT up to its final answers, so a detector's NMS is part of the SUT's work
though no framework profiler sees it: it runs after ``predict``, on the SUT's framework's NMS op
or quantmark's shared numpy one. It is timed here on the same batch the profiler ran, over each
SUT's own outputs (an INT8 model's scores let another number of candidates through, so its NMS
may cost more or less), and becomes rows beside the layers (``rows``). NMS is split out by
timing the suppressor the SUT's respond uses (wrapped, the same op with a clock around it),
whose name its row carries; the rest (threshold, boxes, top-K, LoadGen arrays) is its own row,
so a slow NMS is never mistaken for slow decoding.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantmark.diagnosis.layer_times import Layer, Row
from quantmark.tasks.detection.postprocess import SHARED_NMS

KERNEL = "quantmark numpy"
NMS_ROW = f"postprocess: NMS ({KERNEL})"  # the shared numpy NMS's row, named as it always was
REST_ROW = f"postprocess: decode and responses ({KERNEL})"
WHOLE_ROW = f"postprocess: task respond ({KERNEL})"
MATCHED_BY = "postprocess"


def nms_row(suppressor: str) -> str:
    """The NMS row of a SUT whose NMS is ``suppressor`` (its name): a framework's op is named
    in its row ("postprocess: NMS (OpenVINO NMS-9 op)"), so two SUTs' rows pair only where
    the same NMS ran."""
    return NMS_ROW if suppressor == SHARED_NMS else f"postprocess: NMS ({suppressor})"


@dataclass(frozen=True)
class Step:
    """One part of the postprocessing: its row name, op type and median ms per batch."""

    name: str
    op_type: str
    median_ms: float
    kernel: str = KERNEL  # what ran it: an NMS step names the op


class _TimedSuppressor:
    """The SUT's suppressor with a clock around it: the NMS share of each respond call. One
    whose op takes a whole batch (``batched``) is timed on that one call, as the SUT makes it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.batched = bool(getattr(inner, "batched", False))
        self.spent: list[float] = []

    def _timed(self, call: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.spent.append(time.perf_counter() - start)

    def __call__(self, *args: Any) -> Any:
        return self._timed(self.inner, *args)

    def suppress_batch(self, *args: Any) -> Any:
        return self._timed(self.inner.suppress_batch, *args)


def _timed_calls(respond: Callable[..., Any], outputs: np.ndarray, indices: list[int],
                 iterations: int, warmup: int) -> tuple[list[float], list[float], str]:
    """Wall ms of each ``respond`` call, of the NMS inside it (0 where none ran), and the
    NMS's name ("" where the respond has no suppressor: another task's, or NMS in the
    model). A respond with a suppression step has it as ``suppressor`` and can be rebuilt
    with another (``with_suppressor``)."""
    inner = getattr(respond, "suppressor", None)
    timer = _TimedSuppressor(inner) if inner is not None else None
    if timer is not None:
        respond = respond.with_suppressor(timer)
    whole, nms = [], []
    for i in range(warmup + iterations):
        if timer is not None:
            timer.spent.clear()
        start = time.perf_counter()
        respond(outputs, indices)
        if i >= warmup:
            whole.append(1000.0 * (time.perf_counter() - start))
            nms.append(1000.0 * sum(timer.spent) if timer is not None else 0.0)
    return whole, nms, timer.name if timer is not None else ""


def time_respond(respond: Callable[..., Any] | None, backend: Any, samples: np.ndarray,
                 iterations: int, warmup: int) -> list[Step]:
    """The postprocessing's steps on ``backend``'s outputs for ``samples`` (one batch), each
    the median over ``iterations`` calls; none for a task without postprocessing."""
    if respond is None:
        return []
    outputs = backend.predict(backend.encode_samples(samples))
    whole, nms, name = _timed_calls(respond, outputs, list(range(len(samples))), iterations,
                                    warmup)
    whole_ms, nms_ms = statistics.median(whole), statistics.median(nms)
    if not any(nms):  # no NMS ran here (a model with NMS inside, or another task's respond)
        return [Step(WHOLE_ROW, "Postprocess", whole_ms)]
    rest = statistics.median(w - n for w, n in zip(whole, nms, strict=True))
    return [Step(nms_row(name), "NMS", nms_ms, kernel=name),
            Step(REST_ROW, "Postprocess", max(rest, 0.0))]


def _layer(step: Step | None) -> Layer | None:
    if step is None:
        return None
    return Layer(step.name, step.op_type, step.kernel, "fp32", step.median_ms,
                 onnx_layer=step.name)


def rows(test: Sequence[Step], reference: Sequence[Step]) -> list[Row]:
    """The postprocessing's rows beside the layers: each step in both SUTs, by name."""
    theirs = {step.name: step for step in reference}
    names = [step.name for step in test] + [s.name for s in reference
                                            if s.name not in {t.name for t in test}]
    mine = {step.name: step for step in test}
    return [Row(_layer(mine.get(name)), _layer(theirs.get(name)), MATCHED_BY) for name in names]


def record(steps: Sequence[Step], end_to_end_ms: float) -> dict[str, Any]:
    """A side's postprocessing in the record: each step's ms, and the whole's share of the
    SUT's timed work (the profiled inference plus its postprocessing)."""
    total = sum(step.median_ms for step in steps)
    whole = end_to_end_ms + total
    return {"steps": [{"name": s.name, "op_type": s.op_type, "kernel": s.kernel,
                       "median_ms": s.median_ms} for s in steps],
            "total_ms": total, "share_of_sut_ms": total / whole if whole else 0.0}
