"""Two backends called at the same time from two threads, as an ensemble's concurrent members
are: what the GPU SUTs' stream tests compare with their answers called one after another."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


def predict_side_by_side(backends: list[Any], data: np.ndarray, rounds: int = 10
                         ) -> dict[int, list[np.ndarray]]:
    """Each backend's ``rounds`` predictions of ``data``, the threads released together."""
    results: dict[int, list[np.ndarray]] = {}
    barrier = threading.Barrier(len(backends))

    def member(k: int) -> None:
        barrier.wait()
        results[k] = [backends[k].predict(data) for _ in range(rounds)]

    threads = [threading.Thread(target=member, args=(k,)) for k in range(len(backends))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
