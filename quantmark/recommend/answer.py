"""The search's answer as the user meets it: ``recommendation.json`` (a ``recommendation``
record), the Pareto figure ``pareto.png`` and the one screen.

Each candidate's evidence becomes a plain summary here, once, with its figures' texts: the
objective's median and 95% interval (``report.stats.figure_interval``) over the runs the search
judged it by (``judging.decision_runs``: its VALID runs, the disturbed ones left out once it has
``min_runs`` quiet ones; an INVALID run never enters a figure), the latency, throughput and
peak memory likewise, how many of its runs other processes disturbed, its paired accuracy
change with its interval and the executed precision its run's ``results.json`` proved. The
report section (``report.recommend_section``) and the figure (``report.recommend_figure``) read
only these summaries, so ``run.py report`` shows what the search saw without scipy or a search.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from quantmark.ground import fingerprint
from quantmark.ground.hashing import atomic_write_bytes
from quantmark.ground.records import RecommendationRecord, write_record
from quantmark.recommend.candidates import Evidence, Measurement, Outcome
from quantmark.recommend.judging import decision_runs
from quantmark.recommend.pooling import Pool, pool, pooled_interval, quiet_runs
from quantmark.report.current_set import read_results
from quantmark.report.recommend_section import RECOMMENDATION, print_recommendations
from quantmark.report.stats import CONFIDENCE, figure_interval
from quantmark.store.recording import record as record_in_store

FIGURE = "pareto.png"


def _finite(value: float | None) -> float | None:
    """JSON holds no NaN: a figure that is not a number is "not measured" (None)."""
    return None if value is None or not math.isfinite(value) else float(value)


def decimals(value: float, significant: int = 3) -> str:
    """A format with ``significant`` digits before the decimals run out: 9.97, 10.2, 1234,
    and 0.0253 ms for a model that takes 25 µs (two decimals would say 0.03)."""
    if not value or not math.isfinite(value):
        return "{:.2f}"
    places = significant - 1 - math.floor(math.log10(abs(value)))
    return f"{{:.{min(max(places, 0), 6)}f}}"


def interval(values: list[float], pooled: Pool | None = None) -> dict[str, Any] | None:
    """A figure's median, 95% interval and its text; None without a value. ``pooled``: the
    run-to-run spread pooled across candidates, for a figure of fewer runs than the search's
    ``min_runs`` (the interval the search judged it by, ``pooling``)."""
    if not values:
        return None
    found = pooled_interval(values, pooled, CONFIDENCE) if pooled else figure_interval(values)
    return {"point": found.point, "low": found.low, "high": found.high, "n": found.n,
            "method": found.method, "text": found.text(decimals(found.point))}


def _values(runs: list[Measurement], name: str) -> list[float]:
    """``name``'s figures of ``runs`` (VALID ones: ``judging.decision_runs``), where measured."""
    return [value for run in runs if (value := getattr(run, name)) is not None
            and math.isfinite(value) and value > 0]


def _accuracy(evidence: Evidence) -> dict[str, Any] | None:
    found = evidence.accuracy
    if found is None:
        return None
    change, low, high = (_finite(found.change_points), _finite(found.low), _finite(found.high))
    text = (f"{change:+.2f} [{low:+.2f}, {high:+.2f}]" if None not in (change, low, high)
            else "-")
    return {found.metric: _finite(found.figure), "change_points": change, "low": low, "high": high,
            "reference": found.reference, "model_size_mb": _finite(found.model_size_mb),
            "seconds": found.seconds, "why": found.why, "text": text, "units": found.units,
            "decides": found.decides, "agreement": found.agreement}


def executed_precision(runs: list[Measurement]) -> str:
    """What the SUT proved it ran (``results.json`` ``sut.executed_precision``), from the first
    valid run whose record says; "" where none does."""
    for run in runs:
        record = read_results(Path(run.run_dir)) if run.valid and run.run_dir else None
        found = record.sut.get("executed_precision") if record else None
        if found:
            return str(found)
    return ""


def summarize(evidence: Evidence, objective: str, min_runs: int = 3,
              pooled: Pool | None = None) -> dict[str, Any]:
    """One candidate's plain summary (what the record, the figure and the report read);
    ``min_runs``: the search's, for which runs its figures come from; ``pooled``: the
    objective's pooled spread, which gives a candidate of fewer quiet runs its interval."""
    candidate, runs = evidence.candidate, evidence.runs
    judged, enough = decision_runs(evidence, min_runs)
    quiet = _values(quiet_runs(evidence), objective)
    on_pool = pooled is not None and not enough and bool(quiet)
    memory = interval(_values(judged, "memory_mb"))
    failed = [run.why for run in runs if run.why]
    return {
        "key": candidate.key, "sut": candidate.sut, "batch_size": candidate.batch_size,
        "threads": candidate.threads, "settings": dict(candidate.settings),
        "keep_float": list(candidate.keep_float), "artifact": candidate.artifact,
        "objective": (interval(quiet, pooled) if on_pool
                      else interval(_values(judged, objective))),
        "latency_ms": interval(_values(judged, "latency_ms")),
        "samples_per_s": interval(_values(judged, "samples_per_s")),
        "memory_mb": memory["point"] if memory else None, "runs": len(runs),
        "valid_runs": sum(run.valid for run in runs),
        "disturbed_runs": sum(run.disturbed for run in runs),
        "accuracy": _accuracy(evidence), "executed_precision": executed_precision(runs),
        "dropped": evidence.dropped, "dropped_round": evidence.dropped_round,
        "run_dirs": [run.run_dir for run in runs if run.run_dir],
        "why": failed[-1] if failed else "",
    }


def _excluded(outcome: Outcome) -> list[dict[str, Any]]:
    return [{"limit": item.limit, "candidate": item.evidence.candidate.key,
             "value": item.value, "bound": item.bound, "margin": item.margin,
             "objective_ratio": item.objective_ratio} for item in outcome.excluded]


def build_record(outcome: Outcome, *, model: str, scenario: str,
                 commands: dict[str, dict[str, str | None]], config: dict[str, Any],
                 started: float, min_runs: int = 3,
                 task: dict[str, Any] | None = None) -> RecommendationRecord:
    """The ``recommendation`` record of ``outcome`` (its figure named once drawn); ``task``:
    the model's task as a run's results.json names it (name, metric), so the report labels
    the accuracy change and the limit in its metric."""
    evidence = outcome.evidence or ([outcome.recommended] if outcome.recommended else [])
    spread = pool(evidence, outcome.objective)
    summaries = [summarize(item, outcome.objective, min_runs, spread) for item in evidence]
    by_key = {s["key"]: s for s in summaries}
    recommended = outcome.recommended
    return RecommendationRecord(
        model=model, scenario=scenario, verdict=outcome.verdict, objective=outcome.objective,
        higher_is_better=outcome.higher_is_better, limits=dataclasses.asdict(outcome.limits),
        recommended=by_key.get(recommended.candidate.key) if recommended else None,
        tied=[item.candidate.key for item in outcome.tied], excluded=_excluded(outcome),
        binding=outcome.binding,
        closest=outcome.closest.candidate.key if outcome.closest else None,
        candidates=summaries, commands=commands,
        search={"rounds": outcome.rounds, "spent_s": outcome.spent_s,
                "budget_s": outcome.budget_s, "notes": list(outcome.notes)},
        config=config, machine=fingerprint.machine(),
        times={"started_at": started, "ended_at": time.time()},
        task=task or None, cannot_tell=dict(outcome.cannot_tell_why))


def plotted(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the Pareto figure draws it: the candidates never measured for accuracy
    left out (the search measures it only where it decides, and the notes say how many and
    why); a failed accuracy run stays, hollow on the zero line."""
    return {**record, "candidates": [candidate for candidate in record.get("candidates", [])
                                     if candidate.get("accuracy") is not None]}


def write(folder: Path, record: RecommendationRecord) -> RecommendationRecord:
    """``pareto.png`` (where a candidate measured for accuracy has a valid run) then
    ``recommendation.json``, written last and atomically: a folder with a record has its
    figure."""
    from quantmark.report.recommend_figure import pareto_png

    png = pareto_png(plotted(record.to_dict()))
    if png is not None:
        atomic_write_bytes(folder / FIGURE, png)
        record.figure = FIGURE
    write_record(folder / RECOMMENDATION, record)
    record.source = folder / RECOMMENDATION
    record_in_store(folder / RECOMMENDATION)
    return record


def show(console: Any, record: RecommendationRecord) -> None:
    """The one screen: the answer, what each limit cost, the commands, every candidate."""
    print_recommendations(console, [record])
