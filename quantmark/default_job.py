"""The built-in default job: what ``python run.py`` runs and prints.

Offline and SingleStream for ``ort-fp32`` and ``ort-int8`` on the pretrained default model,
each test repeated in fresh processes and interleaved (fp32, int8, fp32, int8 ...) so that a
machine that gets busier or quieter hits both sides, plus one accuracy run of each. Every
figure is the median over the repeats with its 95% interval; the INT8 speedup is a paired
ratio with its interval, and reads "no measurable difference" when that interval holds 1.0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.config import RunConfig
from quantmark.launcher import LaunchResult
from quantmark.repeats import RepeatSet, check_repeats, interleaved, remove_stale
from quantmark.report.stats import AccuracyChange, Ratio, speedup

SUTS = ("ort-fp32", "ort-int8")
BASELINE = "ort-fp32"
SCENARIOS = ("Offline", "SingleStream")
REPEATS = 3
# each repeat's quick-run minimum duration: three 2-second draws per test cost about what one
# 5-second run did, and the job stays near two minutes on two cores
REPEAT_DURATION_MS = 2_000
PERCENTILES = ("50.00", "90.00", "99.00")


@dataclass
class Row:
    """One SUT in one scenario: its repeat set, accuracy, and what it is compared with."""

    sut: str
    scenario: str
    runs: RepeatSet
    top1: float | None = None
    accuracy_dir: str | None = None
    speedup: Ratio | None = None
    accuracy_change: AccuracyChange | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run(base: RunConfig, run_one: Callable[[RunConfig], LaunchResult], console: Console,
        repeats: int = REPEATS) -> list[Row]:
    """Accuracy of each SUT first (it builds and caches the artifacts, so no timed run follows
    a conversion), then every performance test ``repeats`` times, interleaved."""
    check_repeats(repeats, None, repeats)
    accuracy = {sut: run_one(replace(base, sut=sut, scenario="Offline", mode="accuracy",
                                     batch_size=8)) for sut in SUTS}
    configs = [replace(base, sut=sut, scenario=scenario,
                       batch_size=8 if scenario == "Offline" else 1,
                       quick_duration_ms=REPEAT_DURATION_MS)
               for scenario in SCENARIOS for sut in SUTS]
    rows = {(c.sut, c.scenario): Row(c.sut, c.scenario, RepeatSet(c)) for c in configs}
    for config in interleaved(configs, repeats):
        rows[(config.sut, config.scenario)].runs.results.append(run_one(config))
    for config in configs:
        remove_stale(config, repeats)
    for row in rows.values():
        result = accuracy[row.sut]
        row.top1 = result.results["accuracy"]["top1"]
        row.accuracy_dir = result.run_dir
    compare(list(rows.values()), builtin=bool(accuracy[BASELINE].results.get("dataset", {})
                                              .get("builtin")))
    print_table(list(rows.values()), base.model, repeats, console)
    return list(rows.values())


def compare(rows: list[Row], builtin: bool) -> None:
    """Each row's speedup over the baseline in its scenario (paired: the runs were interleaved,
    repeat k of each side beside the other) and its paired accuracy change."""
    from quantmark.report.accuracy import paired_change

    for row in rows:
        reference = next((r for r in rows if r.sut == BASELINE and r.scenario == row.scenario),
                         None)
        if reference is None or row.sut == BASELINE:
            continue
        mine, theirs = row.runs.metric_values(), reference.runs.metric_values()
        if mine and theirs:
            row.speedup = speedup(theirs, mine, higher_is_better=not row.runs.latency,
                                  paired=len(mine) == len(theirs))
        if row.accuracy_dir and reference.accuracy_dir:
            row.accuracy_change = paired_change(reference.accuracy_dir, row.accuracy_dir,
                                                by_source_image=builtin)


def _metric(row: Row) -> str:
    interval = row.runs.interval()
    if interval is None:
        return "-"
    if row.runs.latency:
        scaled = replace(interval, point=interval.point / 1e6,
                         low=None if interval.low is None else interval.low / 1e6,
                         high=None if interval.high is None else interval.high / 1e6)
        return scaled.text("{:.3f}") + " ms"
    return interval.text("{:.1f}") + " samples/s"


def _percentile(key: str) -> Callable[[Row], str]:
    def cell(row: Row) -> str:
        if row.scenario == "Offline":  # one query of every sample: not a sample's latency
            return "n/a"
        values = sorted(r.results["summary"]["percentiles_ns"][key] / 1e6
                        for r in row.runs.results)
        return f"{values[len(values) // 2]:.2f}"
    return cell


def _disturbed(row: Row) -> str:
    hit = row.runs.disturbed()
    return f"[bold red]{len(hit)} of {len(row.runs.results)}[/]" if hit else "no"


def _top1(row: Row) -> str:
    text = "-" if row.top1 is None else f"{row.top1:.2f}"
    if row.accuracy_change is not None:
        text += f" ({escape(row.accuracy_change.text())})"
    return text


COLUMNS: dict[str, Callable[[Row], str]] = {  # header -> the cell it shows (rich markup)
    "SUT": lambda row: escape(row.sut),
    "executed": lambda row: escape(str(row.runs.results[0].results["sut"]
                                       .get("executed_precision") or "-")),
    "scenario": lambda row: row.scenario,
    "validity": lambda row: escape(", ".join(sorted({r.results["summary"]["validity"]
                                                     for r in row.runs.results}))),
    "official metric, median [95% interval]": lambda row: escape(_metric(row)),
    "p50 ms": _percentile(PERCENTILES[0]), "p90 ms": _percentile(PERCENTILES[1]),
    "p99 ms": _percentile(PERCENTILES[2]),
    "speedup vs fp32 [95% interval]": lambda row: (
        "1.00x (baseline)" if row.sut == BASELINE else
        escape(row.speedup.text()) if row.speedup else "-"),
    "top-1 % (change vs fp32)": _top1,
    "disturbed runs": _disturbed,
}


def print_table(rows: list[Row], model: str, repeats: int, console: Console) -> None:
    table = Table(title=f"quantmark default job: {model} on the built-in dataset, {repeats} "
                        "interleaved quick runs per test")
    for header in COLUMNS:
        table.add_column(header)
    for row in rows:
        table.add_row(*(cell(row) for cell in COLUMNS.values()))
    console.print(table)
    console.print("Figures are medians over the repeats with 95% intervals; a speedup whose "
                  "interval holds 1.00x reads 'no measurable difference'. Offline runs are one "
                  "query of every sample, so they have no per-sample percentiles (n/a). Quick "
                  "runs: short and not valid for submission; use --official for that.")
    for row in rows:
        for result in row.runs.disturbed():
            why = "; ".join(result.results["interference"].get("why") or [])
            console.print(f"[yellow]disturbed: {escape(row.sut)} {row.scenario} repeat "
                          f"{result.results.get('repeat', {}).get('index', '?')}: "
                          f"{escape(why)}[/]")
