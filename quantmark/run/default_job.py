"""The built-in default job: what ``python run.py`` runs and prints.

Offline and SingleStream for ``ort-fp32`` and ``ort-int8`` on the pretrained default model,
each test repeated in fresh processes and interleaved (fp32, int8, fp32, int8 ...) so that a
machine that gets busier or quieter hits both sides, plus one accuracy run of each. Every
figure is the median over the VALID repeats with its 95% interval (each INVALID run is named
and left out; a test with no VALID run has no figure and the job exits 3). The INT8 speedup is
a ratio paired by repeat index, with its interval, and reads "no measurable difference" when
that interval holds 1.0; where it does after the first repeats, the pre-stated second stage
of ``quantmark.run.two_stage`` runs more and looks once more. The job judges a speedup in
each scenario, so each look's level is corrected over the looks and the scenarios together
(``look_confidence``): an INT8 as fast as FP32 is called faster or slower in at most 5% of
jobs, not of scenarios (at 97.5% per look, 7.9-9.8% of jobs said one or the other).
A scenario whose runs drift in the order they ran is named below the table (``drift``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError
from quantmark.report.drift import Trend, trend
from quantmark.report.stats import AccuracyChange, Ratio
from quantmark.run import two_stage
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import RepeatSet, check_repeats, interleaved, remove_stale

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
    a conversion), then every performance test ``repeats`` times, interleaved, and the second
    stage where a speedup is undecided. Exit 3 (SutError) after the table when a test has no
    VALID run."""
    check_repeats(repeats, None, repeats)
    accuracy = {sut: run_one(replace(base, sut=sut, scenario="Offline", mode="accuracy",
                                     batch_size=8)) for sut in SUTS}
    configs = [replace(base, sut=sut, scenario=scenario,
                       batch_size=8 if scenario == "Offline" else 1,
                       quick_duration_ms=REPEAT_DURATION_MS)
               for scenario in SCENARIOS for sut in SUTS]
    rows = {(c.sut, c.scenario): Row(c.sut, c.scenario, RepeatSet(c)) for c in configs}
    run_stages(rows, configs, run_one, repeats, console)
    for row in rows.values():
        result = accuracy[row.sut]
        row.top1 = result.results["accuracy"]["top1"]
        row.accuracy_dir = result.run_dir
    compare(list(rows.values()), builtin=bool(accuracy[BASELINE].results.get("dataset", {})
                                              .get("builtin")))
    print_table(list(rows.values()), base.model, repeats, console)
    without = [row for row in rows.values() if not row.runs.valid()]
    if without:
        raise SutError("default job: " + "; ".join(
            f"{row.sut} {row.scenario}: {row.runs.left_out_note()}" for row in without)
            + ": no figure, the runs did not measure what was asked (see the lines above)")
    return list(rows.values())


def run_stages(rows: dict[tuple[str, str], Row], configs: list[RunConfig],
               run_one: Callable[[RunConfig], LaunchResult], repeats: int,
               console: Console) -> None:
    """``repeats`` interleaved repeats of every test; then, in each scenario whose speedup is
    undecided (and where both SUTs have a VALID run), more interleaved repeats of both up to
    ``two_stage.MAX_REPEATS`` each, in the same repeat sets. Speedups are left in the rows."""
    set_ids: dict[tuple[str, str], str] = {}
    for config in interleaved(configs, repeats):
        set_ids[(config.sut, config.scenario)] = config.repeat_set
        rows[(config.sut, config.scenario)].runs.results.append(run_one(config))
    speedups(list(rows.values()), repeats)
    if two_stage.looks(repeats) > 1:
        again = [s for s in SCENARIOS if _needs_second_stage(rows, s)]
        more = [c for c in configs if c.scenario in again]
        if more:
            console.print(f"INT8 speedup undecided after {repeats} repeats in "
                          f"{', '.join(again)}: running repeats {repeats + 1}-"
                          f"{two_stage.MAX_REPEATS} of both SUTs there, interleaved (the "
                          "job's second stage, stated in its plan)")
        for config in interleaved(more, two_stage.MAX_REPEATS, start=repeats + 1,
                                  set_ids=[set_ids[(c.sut, c.scenario)] for c in more]):
            rows[(config.sut, config.scenario)].runs.results.append(run_one(config))
        speedups(list(rows.values()), repeats)
    for config in configs:
        remove_stale(config, len(rows[(config.sut, config.scenario)].runs.results))


def _needs_second_stage(rows: dict[tuple[str, str], Row], scenario: str) -> bool:
    found = [row for row in rows.values() if row.scenario == scenario]
    return all(row.runs.valid() for row in found) and any(
        two_stage.undecided(row.speedup) for row in found if row.sut != BASELINE)


def look_confidence(first: int) -> float:
    """Each look's interval level: Bonferroni over the plan's looks (``two_stage``) and the
    scenarios whose speedup the job judges, so that the chance of any false "faster" or
    "slower" in a job is at most ``two_stage.ALPHA``."""
    return 1 - two_stage.ALPHA / (two_stage.looks(first) * len(SCENARIOS))


def speedups(rows: list[Row], first: int) -> None:
    """Each row's speedup over the baseline in its scenario, paired by repeat index (the runs
    were interleaved: repeat k of each side ran beside the other), over VALID runs only, at
    the job's per-look level (``look_confidence``)."""
    for row in rows:
        reference = next((r for r in rows if r.sut == BASELINE and r.scenario == row.scenario),
                         None)
        if reference is None or row.sut == BASELINE:
            continue
        row.speedup = two_stage.paired_by_index(
            reference.runs.by_repeat(), row.runs.by_repeat(), reference.runs.metric_values(),
            row.runs.metric_values(), higher_is_better=not row.runs.latency,
            level=look_confidence(first))


def compare(rows: list[Row], builtin: bool) -> None:
    """Each row's paired accuracy change over the baseline in its scenario (its speedup comes
    from ``speedups``)."""
    from quantmark.report.accuracy import paired_change

    for row in rows:
        reference = next((r for r in rows if r.sut == BASELINE and r.scenario == row.scenario),
                         None)
        if reference is None or row.sut == BASELINE:
            continue
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
    """The percentile over the VALID repeats as the reports show it (``report.percentiles``):
    the median with its interval from 3 runs on, ``n/a`` for Offline (one query of every
    sample), ``n/a (k queries)`` where it would be the slowest query."""
    from quantmark.report.percentiles import over_results

    def cell(row: Row) -> str:
        summaries = [r.results["summary"] for r in row.runs.valid()]
        return escape(over_results(row.scenario, summaries, key).text()) if summaries else "-"
    return cell


def _validity(row: Row) -> str:
    """VALID when every run is; else how many were left out (each named below the table)."""
    note = row.runs.left_out_note()
    if not note:
        return "VALID"
    return f"[bold red]{escape(note)}[/]" if not row.runs.valid() else f"[yellow]{escape(note)}[/]"


def _speedup(row: Row) -> str:
    if row.sut == BASELINE:
        return "1.00x (baseline)"
    return escape(row.speedup.text()) if row.speedup else "-"


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
    "validity": _validity,
    "official metric, median [95% interval]": lambda row: escape(_metric(row)),
    "p50 ms": _percentile(PERCENTILES[0]), "p90 ms": _percentile(PERCENTILES[1]),
    "p99 ms": _percentile(PERCENTILES[2]),
    "speedup vs fp32 [interval]": _speedup,
    "top-1 % (change vs fp32)": _top1,
    "disturbed runs": _disturbed,
}


def plan_text(repeats: int) -> str:
    """The speedup verdicts' plan, as the table's note states it."""
    level = f"{look_confidence(repeats):.2%}"
    over = f"the {len(SCENARIOS)} scenarios' speedups"
    if two_stage.looks(repeats) == 1:
        return (f"Speedups are paired by repeat index, with {level} intervals over "
                f"{repeats} repeats (one look; Bonferroni over {over}: 95% for the job).")
    return (f"Speedups are paired by repeat index. The plan: {repeats} interleaved repeats, "
            f"then, where the speedup's interval holds 1.00x, more up to "
            f"{two_stage.MAX_REPEATS} per side and a second look; each look's interval is "
            f"{level} (Bonferroni over the two looks and {over}: 95% for the job).")


def drift(rows: list[Row]) -> dict[str, Trend]:
    """Each scenario whose runs trend in the order they ran: every SUT's VALID runs in repeat
    order, one sequence each (``report.drift``). A drift shared by both SUTs cancels in the
    paired speedup, not in each figure: its interval then describes this job's window of the
    machine. With 3 repeats a side no order is significant; the second stage's 7 can be."""
    found = {}
    for scenario in SCENARIOS:
        sequences = [[v for _, v in sorted(row.runs.by_repeat().items())]
                     for row in rows if row.scenario == scenario]
        checked = trend(*sequences)
        if checked is not None and checked.drifting:
            found[scenario] = checked
    return found


def print_table(rows: list[Row], model: str, repeats: int, console: Console) -> None:
    most = max((len(row.runs.results) for row in rows), default=repeats)
    runs = f"{repeats}" + (f" (up to {most} where undecided)" if most > repeats else "")
    table = Table(title=f"quantmark default job: {model} on the built-in dataset, {runs} "
                        "interleaved quick runs per test")
    for header in COLUMNS:
        table.add_column(escape(header))
    for row in rows:
        table.add_row(*(cell(row) for cell in COLUMNS.values()))
    console.print(table)
    console.print("Figures are medians over the VALID repeats with 95% intervals (INVALID runs "
                  "are left out and named below); a speedup whose interval holds 1.00x reads "
                  f"'no measurable difference'. {plan_text(repeats)} Offline runs are one "
                  "query of every sample, so they have no per-sample percentiles (n/a); a "
                  "percentile p needs more than 1/(1-p) queries, else it would be the slowest "
                  "query (n/a (k queries)). Quick runs: short and not valid for submission; "
                  "use --official for that.")
    for row in rows:
        for result, why in row.runs.left_out():
            console.print(f"[yellow]left out: {escape(row.sut)} {row.scenario} repeat "
                          f"{result.results.get('repeat', {}).get('index', '?')}: "
                          f"{escape(why)}[/]", soft_wrap=True)
    for scenario, found in drift(rows).items():
        console.print(f"[yellow]drift: {scenario}: {escape(found.text())}: each figure's "
                      "interval describes this job's window, not the machine's long-run "
                      "figure (the paired speedup cancels a drift both SUTs shared)[/]",
                      soft_wrap=True)
    for row in rows:
        for result in row.runs.disturbed():
            why = "; ".join(result.results["interference"].get("why") or [])
            console.print(f"[yellow]disturbed: {escape(row.sut)} {row.scenario} repeat "
                          f"{result.results.get('repeat', {}).get('index', '?')}: "
                          f"{escape(why)}[/]")
