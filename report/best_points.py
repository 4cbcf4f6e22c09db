"""Which configurations stand out: each SUT's best Offline batch size (the batch-size scan),
and the runs no other beats on latency and accuracy at once (the Pareto front)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from quantmark.report.study import Study


def batch_scan(study: Study) -> list[dict[str, Any]]:
    """Per (system, model, SUT): the Offline batch size with the best throughput, and the
    SingleStream latency at batch 1."""
    rows = []
    for system, model, sut in study.keys("system", "model", "sut"):
        mine = [c for c in study.configs if (c.system, c.model, c.sut) == (system, model, sut)]
        offline = [c for c in mine if c.scenario == "Offline" and c.derived["samples_per_s"]]
        single = next((c for c in mine if c.scenario == "SingleStream" and c.batch_size == 1),
                      None)
        best = max(offline, key=lambda c: c.derived["samples_per_s"]) if offline else None
        rows.append({
            "system": system, "model": model, "sut": sut,
            "batch_sizes": sorted(c.batch_size for c in offline),
            "best_batch": best.batch_size if best else None,
            "best_samples_per_s": best.derived["samples_per_s"] if best else None,
            "single_stream_ms": (single.metric / 1e6 if single and single.metric else None),
        })
    return rows


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower latency (x) and higher accuracy (y)
    at once. Sorted by latency."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best_accuracy = float("-inf")
    for i in order:
        if points[i][1] > best_accuracy:
            front.append(i)
            best_accuracy = points[i][1]
    return front
