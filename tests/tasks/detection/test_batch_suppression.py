"""A batch's suppression in one op call keeps, per sample, exactly what numpy's NMS keeps of
that sample alone: the padding (proved inert in tasks/detection/suppression.py) is checked
against numpy's own ``nms``, the batch cases can tell a batched op that mixes samples up or
padding that comes first, and the postprocessing's batched and per-sample paths answer LoadGen
the same bytes, as the profile times the batched call the SUT makes. Here on numpy posing as a
batched op; tests/sut/{openvino,onnxruntime}/test_nms.py run the same checks on the real ops."""

from __future__ import annotations

import numpy as np
import pytest

from quantmark.diagnosis import postprocess_times
from quantmark.tasks.detection import suppression
from quantmark.tasks.detection.postprocess import (
    NativeSuppressor,
    NumpySuppressor,
    Postprocess,
    decode,
    nms,
)
from quantmark.tasks.detection.suppression import batch_suppression, pad_batch
from tests.tasks.detection.nms_cases import (
    Counted,
    PerSample,
    batch_differences,
    cases,
    decode_paths,
    raw_heads,
)
from tests.tasks.detection.tiny_cases import FixedHeadBackend


class _NumpyPaddedOp:
    """numpy's NMS posing as an op that takes padded batches: each row suppressed on its own,
    padding and all, as NMS-9 and ONNX's op do, answered as (sample, class, box) triples."""

    name = "numpy posing as a batched op"

    def __call__(self, boxes, scores, iou_threshold, max_keep):
        return nms(boxes, scores, iou_threshold, max_keep)

    def suppress_padded(self, boxes, scores, iou_threshold, max_keep):
        assert boxes.dtype == scores.dtype == np.float32 and boxes.shape[:2] == scores.shape
        rows = [np.stack([np.full(len(kept), b), np.zeros(len(kept), int), kept], axis=1)
                for b, kept in ((b, nms(boxes[b], scores[b], iou_threshold, max_keep))
                                for b in range(len(boxes)))]
        return np.concatenate(rows[::-1])  # samples last to first: the task must not mind


class _OneSample(_NumpyPaddedOp):
    """A batched op that suppresses the whole batch as one sample (samples not kept apart)."""

    def suppress_padded(self, boxes, scores, iou_threshold, max_keep):
        width = boxes.shape[1]
        kept = nms(boxes.reshape(-1, 4), scores.reshape(-1), iou_threshold, max_keep)
        return np.stack([kept // width, np.zeros_like(kept), kept % width], axis=1)


def test_padding_never_changes_what_numpy_keeps() -> None:
    """The proof's claim on the reference itself: each case padded beside a longer sample,
    numpy's NMS of the padded row, padding dropped by index, keeps what it keeps unpadded."""
    longest = max(len(case.scores) for case in cases()) + 5
    for case in cases():
        long = (np.zeros((longest, 4)), np.ones(longest, np.float32))
        boxes, scores, counts = pad_batch([(case.boxes, case.scores), long])
        assert counts.tolist() == [len(case.scores), longest]
        assert (scores[0, counts[0]:] == -np.inf).all()
        kept = nms(boxes[0], scores[0], case.iou_threshold, case.max_keep)
        want = nms(case.boxes, case.scores, case.iou_threshold, case.max_keep)
        assert kept[kept < counts[0]].tolist() == want.tolist(), case.name


def test_a_batch_keeps_per_sample_what_numpy_keeps() -> None:
    op = Counted(_NumpyPaddedOp())
    suppressor = NativeSuppressor(op)
    assert suppressor.batched and batch_suppression(suppressor) == suppressor.suppress_batch
    assert batch_differences(suppressor.suppress_batch) == []
    assert op.singles == 0 and op.batches > 150  # one call a batch (but the all-empty one)


def test_the_batch_cases_tell_a_batch_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = batch_differences(NativeSuppressor(_OneSample()).suppress_batch)
    assert any(" alone" not in line for line in mixed)
    assert not any(" alone" in line for line in mixed)  # a batch of one is one sample
    monkeypatch.setattr(suppression, "PAD_SCORE", np.float32(np.inf))  # padding first
    first = batch_differences(NativeSuppressor(_NumpyPaddedOp()).suppress_batch)
    assert any("cap 1," in line for line in first)


def test_ops_without_batches_and_numpy_keep_one_call_a_sample() -> None:
    op = Counted(_NumpyPaddedOp())
    suppressor = NativeSuppressor(PerSample(op))
    assert not suppressor.batched and batch_suppression(suppressor) is None
    assert batch_suppression(NumpySuppressor()) is None
    head = raw_heads()[0]
    decode(head, "raw", 3, 0.25, suppressor=suppressor)
    assert op.singles == 7 and op.batches == 0  # one sample has no candidate
    assert batch_differences(suppressor.suppress_batch) == []  # still right if asked


def test_the_batched_and_per_sample_paths_answer_the_same_bytes() -> None:
    assert decode_paths(_NumpyPaddedOp()) == []
    numpy = Postprocess("raw", 3, conf_threshold=0.25)
    batched = numpy.with_suppressor(NativeSuppressor(_NumpyPaddedOp()))
    for head in raw_heads():
        for a, b in zip(batched(head, range(len(head))), numpy(head, range(len(head))),
                        strict=True):
            assert a.tobytes() == b.tobytes() and a.shape == b.shape


def test_the_decode_check_tells_paths_that_differ() -> None:
    """An op whose batched answer drops each sample's last box: the bytes differ."""

    class _Short(_NumpyPaddedOp):
        def suppress_padded(self, boxes, scores, iou_threshold, max_keep):
            rows = super().suppress_padded(boxes, scores, iou_threshold, max_keep)
            last = np.r_[rows[1:, 0] != rows[:-1, 0], True]
            return rows[~last]

    assert any("not the same bytes" in line for line in decode_paths(_Short()))


def test_the_profile_times_the_batched_call_the_sut_makes() -> None:
    op = Counted(_NumpyPaddedOp())
    respond = Postprocess("raw", 3, suppressor=NativeSuppressor(op))
    steps = postprocess_times.time_respond(respond, FixedHeadBackend(), np.zeros((2, 1)), 3, 1)
    assert op.batches == 4 and op.singles == 0  # warmup 1 + 3 timed, one call each
    assert steps[0].kernel == _NumpyPaddedOp.name and steps[0].median_ms > 0
