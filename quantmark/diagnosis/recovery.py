"""The way back, measured: quality and throughput of the SUT re-quantized with its worst K
layers kept in FP32, for K = 0, 1, 2, 4 ... up to ``--recover``.

Every variant is built with the framework's own exclusion mechanism and loaded once; its
quality is judged in its task's metric (``judges``: top-1 of a classifier, mAP of a detector)
on the same evaluation samples for all (so changes are paired), and throughput is timed
in interleaved rounds (round r times every variant once, in a rotated order) with the machine
watched from this process: a round another process disturbed is flagged, and each figure is the
median over rounds with its 95% interval (``report.stats``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantmark.diagnosis.judges import Judge, change_record
from quantmark.report.stats import figure_interval, speedup
from quantmark.run.interference import Monitor
from quantmark.sut.interface import Backend

log = logging.getLogger(__name__)


def curve_points(recover: int) -> list[int]:
    """K = 0, then powers of two below ``recover``, then ``recover``: 8 -> [0, 1, 2, 4, 8]."""
    points, k = [0], 1
    while k < recover:
        points.append(k)
        k *= 2
    return points + [recover] if recover > 0 else points


@dataclass
class Variant:
    """One measured model: a K of the curve, or the reference."""

    label: str  # "K=2", "reference ort-fp32"
    k: int | None  # None: the reference
    excluded: list[str]
    backend: Backend
    answers: Any = None  # what it answered on the evaluation samples (its judge's form)
    quality: float | None = None  # its figure in the judge's metric, once scored
    rates: list[float] = field(default_factory=list)  # samples/s, one per round
    disturbed: list[list[str]] = field(default_factory=list)  # per round: why, [] if quiet
    describe: dict[str, Any] = field(default_factory=dict)


def score(variant: Variant, judge: Judge) -> None:
    """The variant's answers on the judge's evaluation samples, logged in its metric."""
    variant.answers = judge.answers(variant.backend)
    variant.quality = judge.figure(variant.answers)
    log.info("%s: %s %.2f%s on %d samples", variant.label, judge.metric.name, variant.quality,
             judge.metric.unit, judge.count)


def time_rounds(variants: Sequence[Variant], inputs: dict[int, np.ndarray], rounds: int,
                seconds: float) -> None:
    """``rounds`` interleaved rounds: each times every variant's ``predict`` on its batch for
    about ``seconds``; rotated so no variant always runs first."""
    with Monitor() as monitor:
        for r in range(rounds):
            order = list(variants[r % len(variants):]) + list(variants[:r % len(variants)])
            for variant in order:
                batch = inputs[id(variant)]
                variant.backend.predict(batch)  # settle caches after the previous variant
                started_wall, started, done = time.time(), time.perf_counter(), 0
                while time.perf_counter() - started < seconds or done == 0:
                    variant.backend.predict(batch)
                    done += len(batch)
                variant.rates.append(done / (time.perf_counter() - started))
                ended = time.time()
                monitor.sample()  # the window's end is covered by a sample
                summary = monitor.summary(started_wall, ended)
                variant.disturbed.append(list(summary.get("why") or []))
            log.info("speed round %d of %d done", r + 1, rounds)


def summarize(variants: Sequence[Variant], judge: Judge, batch: int = 0
              ) -> list[dict[str, Any]]:
    """One row per variant: its quality in the judge's metric (the fields named by the
    metric's key: ``top1``, ``map`` ...), its paired change against K=0, throughput with
    interval, the speed ratio against K=0, and points of quality recovered per point of speed
    lost; with the timed ``batch`` size, the latency of one batch (ms, interval) and points
    gained per ms lost."""
    key = judge.metric.key
    base = next(v for v in variants if v.k == 0)
    base_ms = figure_interval(batch_ms(base.rates, batch)).point if batch else 0.0
    rows = []
    for v in variants:
        change = judge.change(base.answers, v.answers) if v is not base else None
        speed = figure_interval(v.rates)
        ratio = speedup(base.rates, v.rates, higher_is_better=True, paired=True)
        gained = change.delta_points if change is not None else 0.0
        speed_lost = (1.0 - ratio.point) * 100.0
        rows.append({
            "label": v.label, "k": v.k, "excluded": v.excluded,
            key: round(v.quality if v.quality is not None else judge.figure(v.answers), 3),
            "samples": judge.count,
            f"{key}_change_vs_k0": None if change is None else change_record(change),
            "samples_per_s": {"median": round(speed.point, 2),
                              "low": _round(speed.low), "high": _round(speed.high),
                              "rounds": speed.n, "method": speed.method,
                              "values": [round(x, 2) for x in v.rates]},
            "speed_vs_k0": {"ratio": round(ratio.point, 4), "low": _round(ratio.low, 4),
                            "high": _round(ratio.high, 4), "verdict": ratio.verdict},
            "speed_lost_pct": round(speed_lost, 2),
            f"{key}_per_speed_point": (round(gained / speed_lost, 3)
                                       if v is not base and speed_lost > 0 else None),
            "disturbed_rounds": sum(bool(why) for why in v.disturbed),
            "disturbed_why": sorted({w for why in v.disturbed for w in why}),
            "executed_precision": v.describe.get("executed_precision"),
        })
        if "detector" in v.describe:  # a detector's head, as its load-time profile saw it run
            rows[-1]["detector_head"] = v.describe["detector"]
        if batch:
            rows[-1].update(latency_fields(v, batch, base_ms, gained if v is not base else None,
                                           key))
    return rows


def batch_ms(rates: Sequence[float], batch: int) -> list[float]:
    """Milliseconds per batch of ``batch`` samples, one per round, from samples/s."""
    return [batch * 1000.0 / rate for rate in rates]


def latency_fields(variant: Variant, batch: int, base_ms: float, gained: float | None,
                   key: str = "top1") -> dict[str, Any]:
    """The measured latency of one batch with its interval, and points of the metric (its
    ``key``) gained per ms lost against K=0 (None for K=0 itself, or where nothing was
    lost)."""
    ms = figure_interval(batch_ms(variant.rates, batch))
    lost = ms.point - base_ms
    return {"ms_per_batch": {"median": round(ms.point, 4), "low": _round(ms.low, 4),
                             "high": _round(ms.high, 4), "batch": batch},
            "ms_lost_vs_k0": round(lost, 4),
            f"{key}_per_ms": (round(gained / lost, 3) if gained is not None and lost > 0
                              else None)}


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
