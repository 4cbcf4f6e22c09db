"""The ensemble as one ``Backend``: LoadGen drives it like any SUT, it drives its members.

* ``sequential``: the calling worker runs the members one after another, each with every core.
* ``concurrent``: the members run at the same time, one thread each (the caller runs the first),
  with the cores split between them; GPU members each run on their own CUDA stream.

Every sample gets one response, the combined class. A member that raises fails the batch with
an error naming it (``LoadGenSUT`` then completes every id and the runner ends the run); a member
that does not return within the member timeout is named by a watchdog that ends the run, since
a hung call cannot be interrupted from Python. Each member's busy time is counted from ``arm``
(just before LoadGen starts), so its time share covers LoadGen's window only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantmark.sut.ensemble.combine import COMBINERS, probabilities
from quantmark.sut.ensemble.members import Member
from quantmark.sut.interface import Backend

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 0.2


class EnsembleMemberError(RuntimeError):
    """A member's predict raised; the message names the member."""

    def __repr__(self) -> str:  # the runner prints repr(exc): keep it one readable line
        return str(self)


@dataclass
class MemberRun:
    """One loaded member and what the ensemble measured of it."""

    member: Member
    backend: Backend
    input_index: int  # which of the ensemble's inputs it reads
    threads: int  # 0: the framework's default (all cores)
    input: dict[str, Any] = field(default_factory=dict)  # crop, resize, layout, dtype
    busy_s: float = 0.0
    calls: int = 0
    outputs: dict[int, np.ndarray] | None = None  # qsl index -> probabilities (accuracy runs)


class EnsembleBackend(Backend):
    """Several member backends answering as one."""

    label_offset = 0
    preferred_workers = 1

    def __init__(self, members: list[MemberRun], mode: str, combine: str, timeout_s: float,
                 record_outputs: bool = False) -> None:
        self.members = members
        self.mode = mode
        self.combine = combine
        self.timeout_s = timeout_s
        self.artifact = None  # type: ignore[assignment] - results.json records each member's
        self._combine = COMBINERS[combine]
        self._lock = threading.Lock()
        self._running: dict[tuple[int, int], float] = {}  # (member, thread) -> call start
        self._on_fatal: Callable[[str], None] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._watchdog: threading.Thread | None = None
        self._closed = threading.Event()
        if record_outputs:
            for run in members:
                run.outputs = {}

    # ----------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Members are loaded by ``build``; here the side threads and the watchdog start."""
        if self.mode == "concurrent" and len(self.members) > 1:
            self._pool = ThreadPoolExecutor(len(self.members) - 1,
                                            thread_name_prefix="ensemble-member")
        self._watchdog = threading.Thread(target=self._watch, name="ensemble-watchdog",
                                          daemon=True)
        self._watchdog.start()

    def arm(self, on_fatal: Callable[[str], None]) -> None:
        """From now on a hung member ends the run through ``on_fatal``; the time counters
        restart, so time shares cover what follows (LoadGen's window)."""
        self._on_fatal = on_fatal
        with self._lock:
            for run in self.members:
                run.busy_s, run.calls = 0.0, 0

    def close(self) -> None:
        self._closed.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for run in self.members:
            run.backend.close()

    # ----------------------------------------------------------------- predict
    def predict(self, batch: Any) -> np.ndarray:
        """The combined class of every sample in ``batch`` (an ``EnsembleInputs``)."""
        tensors = tuple(batch)
        if self._pool is None:
            found = [self._call(k, tensors) for k in range(len(self.members))]
        else:
            futures = [self._pool.submit(self._call, k, tensors)
                       for k in range(1, len(self.members))]
            first = self._call(0, tensors)
            found = [first] + [future.result() for future in futures]
        indices = getattr(batch, "indices", None)
        if indices is not None and self.members[0].outputs is not None:
            for run, probs in zip(self.members, found, strict=True):
                run.outputs.update(zip(indices, probs, strict=True))  # type: ignore[union-attr]
        return self.combined(found)

    def _call(self, k: int, tensors: tuple[np.ndarray, ...]) -> np.ndarray:
        """Member ``k``'s probabilities, timed, watched, its failure named."""
        run = self.members[k]
        key = (k, threading.get_ident())
        started = time.perf_counter()
        with self._lock:
            self._running[key] = started
        try:
            scores = run.backend.predict(tensors[run.input_index])
            return probabilities(scores, run.backend.label_offset)
        except BaseException as exc:
            raise EnsembleMemberError(f"ensemble member {run.member.label} failed: "
                                      f"{exc!r}") from exc
        finally:
            ended = time.perf_counter()
            with self._lock:
                del self._running[key]
                run.busy_s += ended - started
                run.calls += 1

    def _watch(self) -> None:
        """End the run when a member call outlasts the timeout (it cannot be interrupted)."""
        while not self._closed.wait(WATCH_INTERVAL_S):
            now = time.perf_counter()
            with self._lock:
                late = [k for (k, _), started in self._running.items()
                        if now - started > self.timeout_s]
            if not late:
                continue
            message = (f"ensemble member {self.members[late[0]].member.label} did not answer "
                       f"within {self.timeout_s:g} s (hung?); raise "
                       "--sut-option ensemble_member_timeout_s=SECONDS if it is only slow")
            log.error(message)
            if self._on_fatal is not None:
                self._on_fatal(message)
                return

    def combined(self, member_probabilities: list[np.ndarray]) -> np.ndarray:
        """The ensemble's rule (mean or vote) on the members' probabilities."""
        return self._combine(member_probabilities)

    # ----------------------------------------------------------------- report
    def time_shares(self) -> list[float]:
        """Each member's share of the members' busy time since ``arm``."""
        total = sum(run.busy_s for run in self.members)
        return [run.busy_s / total if total else 0.0 for run in self.members]

    def describe(self) -> dict[str, Any]:
        executed = [str(run.backend.describe().get("executed_precision", "?"))
                    for run in self.members]
        return {"framework": "ensemble", "mode": self.mode, "combine": self.combine,
                "members": [run.member.label for run in self.members],
                "requested_precision": "ensemble",
                "executed_precision": ", ".join(executed)}

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        return {"mode": self.mode, "combine": self.combine,
                "member_timeout_s": self.timeout_s,
                "members": [{"member": run.member.label, "threads": run.threads,
                             **run.backend.speed_settings(scenario, batch_size)}
                            for run in self.members]}
