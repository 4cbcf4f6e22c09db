"""The ensemble backend: what it answers, how it runs its members, and how it fails.

Members here are small fakes whose scores depend on the input, so every check is exact; the
LoadGen side is ``LoadGenSUT`` with a stand-in completer, as in tests/sut/test_base.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from quantmark.qsl.library import QuerySampleLibrary
from quantmark.sut.base import FAILED_CLASS, LoadGenSUT
from quantmark.sut.ensemble.backend import EnsembleBackend, EnsembleMemberError, MemberRun
from quantmark.sut.ensemble.combine import combine_mean, probabilities
from quantmark.sut.ensemble.inputs import EnsembleSamples
from quantmark.sut.ensemble.members import Member
from quantmark.sut.interface import Backend

CLASSES = 1000


class Fake(Backend):
    """Logits from the input: class ``(first pixel * scale) % 1000`` scores highest."""

    def __init__(self, scale: int, label_offset: int = 0, barrier: threading.Barrier | None
                 = None, fail: bool = False, hang: threading.Event | None = None) -> None:
        self.scale, self.label_offset = scale, label_offset
        self.barrier, self.fail, self.hang = barrier, fail, hang
        self.artifact = None  # type: ignore[assignment]

    def load(self) -> None:
        pass

    def predict(self, batch: np.ndarray) -> np.ndarray:
        if self.fail:
            raise RuntimeError("injected fault")
        if self.hang is not None:
            self.hang.wait()
        if self.barrier is not None:  # passes only when the other member runs at the same time
            self.barrier.wait(timeout=5)
        firsts = batch.reshape(len(batch), -1)[:, 0].astype(np.int64)
        scores = np.zeros((len(batch), CLASSES + self.label_offset), np.float32)
        scores[np.arange(len(batch)), self.label_offset + (firsts * self.scale) % CLASSES] = 5.0
        scores[:, self.label_offset + 7] = 4.0  # a runner-up every member shares
        return scores

    def describe(self) -> dict[str, Any]:
        return {"executed_precision": f"fake x{self.scale}"}


def _ensemble(members: list[Fake], mode: str = "sequential", timeout_s: float = 60,
              inputs: list[int] | None = None) -> EnsembleBackend:
    runs = [MemberRun(Member(f"m{k}", "fake"), fake, (inputs or [0] * len(members))[k], 1)
            for k, fake in enumerate(members)]
    backend = EnsembleBackend(runs, mode, "mean", timeout_s, record_outputs=True)
    backend.load()
    return backend


def _samples(count: int = 16) -> EnsembleSamples:
    small = np.arange(count, dtype=np.float32).reshape(count, 1, 1, 1).repeat(2, axis=1)
    large = (np.arange(count, dtype=np.float32) * 3).reshape(count, 1, 1, 1).repeat(4, axis=1)
    libraries = [QuerySampleLibrary.from_arrays(a, list(range(count)), count)
                 for a in (small, large)]
    samples = EnsembleSamples(libraries)
    samples.load(range(count))
    return samples


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_the_answer_is_the_argmax_of_the_mean_probabilities(mode: str) -> None:
    members = [Fake(1), Fake(2, label_offset=1), Fake(3)]
    backend = _ensemble(members, mode, inputs=[0, 1, 0])
    samples = _samples()
    batch = samples.batch(range(16))
    found = backend.predict(batch)
    expected = combine_mean([probabilities(m.predict(batch[i]), m.label_offset)
                             for m, i in zip(members, [0, 1, 0], strict=True)])
    np.testing.assert_array_equal(found, expected)
    assert set(backend.members[0].outputs) == set(range(16))  # every sample's output logged
    backend.close()


def test_concurrent_members_run_at_the_same_time() -> None:
    barrier = threading.Barrier(2)
    backend = _ensemble([Fake(1, barrier=barrier), Fake(2, barrier=barrier)], "concurrent")
    backend.predict(_samples().batch([0, 1]))  # sequential would break the barrier (timeout)
    backend.close()
    with pytest.raises(EnsembleMemberError, match="m0@fake"):
        sequential = _ensemble([Fake(1, barrier=threading.Barrier(2)), Fake(2)], "sequential")
        sequential.predict(_samples().batch([0]))


def test_time_shares_count_from_arm_and_sum_to_one() -> None:
    backend = _ensemble([Fake(1), Fake(2)])
    samples = _samples()
    backend.predict(samples.batch([0]))
    backend.arm(lambda message: None)
    assert [run.calls for run in backend.members] == [0, 0]
    for k in range(4):
        backend.predict(samples.batch([k]))
    assert [run.calls for run in backend.members] == [4, 4]
    assert sum(backend.time_shares()) == pytest.approx(1.0)


class _Completer:
    """Stands in for LoadGen: records every completed id and the class it got."""

    def __init__(self) -> None:
        self.answers: dict[int, float] = {}
        self.lock = threading.Lock()

    def QuerySampleResponse(self, sample_id: int, address: int, size: int) -> Any:  # noqa: N802
        return sample_id, np.frombuffer((np.ctypeslib.as_array(
            (np.ctypeslib.ctypes.c_float * 1).from_address(address))).tobytes(), np.float32)[0]

    def QuerySamplesComplete(self, responses: list[Any]) -> None:  # noqa: N802
        with self.lock:
            for sample_id, value in responses:
                assert sample_id not in self.answers, f"id {sample_id} completed twice"
                self.answers[sample_id] = float(value)


def _drive(backend: EnsembleBackend, samples: EnsembleSamples, count: int
           ) -> tuple[LoadGenSUT, _Completer]:
    completer = _Completer()
    sut = LoadGenSUT(backend.predict, samples, batch_size=4)
    sut._start_workers(completer)
    sut._issue(list(range(count)), list(range(count)))
    deadline = time.monotonic() + 10
    while len(completer.answers) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    sut.stop()
    return sut, completer


def test_every_sample_gets_exactly_one_response_with_the_combined_class() -> None:
    samples = _samples()
    backend = _ensemble([Fake(1), Fake(5)], "concurrent")
    sut, completer = _drive(backend, samples, 16)
    assert sut.all_completed and sorted(completer.answers) == list(range(16))
    batch = samples.batch(range(16))
    expected = backend.combined([probabilities(run.backend.predict(batch[0]))
                                 for run in backend.members])
    assert [completer.answers[i] for i in range(16)] == expected.astype(np.float32).tolist()


def test_a_failing_member_is_named_and_every_id_still_completes() -> None:
    backend = _ensemble([Fake(1), Fake(2, fail=True)])
    sut, completer = _drive(backend, _samples(), 16)
    assert sut.all_completed and len(completer.answers) == 16
    assert set(completer.answers.values()) == {FAILED_CLASS}
    assert isinstance(sut.error, EnsembleMemberError)
    assert repr(sut.error) == "ensemble member m1@fake failed: RuntimeError('injected fault')"


def test_a_hung_member_ends_the_run_naming_it() -> None:
    release = threading.Event()
    ended: list[str] = []
    backend = _ensemble([Fake(1), Fake(2, hang=release)], "sequential", timeout_s=0.3)
    backend.arm(ended.append)
    caller = threading.Thread(target=backend.predict, args=(_samples().batch([0]),),
                              daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.05)
    release.set()
    caller.join(5)
    backend.close()
    assert ended and ended[0].startswith("ensemble member m1@fake did not answer within 0.3 s")
