"""``run.py --ensemble MODEL@SUT,... --scenario S``: an ensemble against its members alone.

Performance: every member alone (the baseline) and the ensemble in each mode asked for
(sequential, concurrent), each test in a fresh process, repeated and interleaved so drift hits
every side alike. "Members alone, combined" is what running them one after another would
give, from the runs of the same repeat: the sum of their latencies, or for a throughput the
reciprocal of the sum of their reciprocals. Accuracy: the ensemble's accuracy run, whose
member logs give every member's top-1 on the same samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.report.stats import Ratio, figure_interval, speedup
from quantmark.run.launch import LaunchResult
from quantmark.run.repeated import RepeatSet, interleaved, remove_stale

COMBINED = "members alone, combined"


@dataclass
class Side:
    """One row of the table: a member alone, an ensemble mode, or the members combined."""

    label: str
    values: list[float]  # the official metric of each repeat
    runs: RepeatSet | None = None
    versus_combined: Ratio | None = None


def ensemble_configs(base: RunConfig, members: tuple[Any, ...], modes: list[str],
                     combine: str, baselines: bool) -> tuple[list[RunConfig], list[RunConfig]]:
    """(each member alone, the ensemble in each mode) as run configs."""
    from quantmark.sut.ensemble.build import member_options
    from quantmark.sut.ensemble.members import canonical, ensemble_name, sut_name
    from quantmark.sut.registry import get_sut

    alone = [replace(base, sut=m.sut, model=m.model, ensemble="",
                     sut_options=member_options(base, get_sut(m.sut)))
             for m in members] if baselines else []
    together = [replace(base, sut=sut_name(mode, combine), model=ensemble_name(members),
                        ensemble=canonical(members), ensemble_mode=mode,
                        ensemble_combine=combine) for mode in modes]
    return alone, together


def run(args: Any, base: RunConfig, run_one: Callable[[RunConfig], LaunchResult],
        console: Console) -> None:
    """What ``run.py --ensemble`` does: checks every run first, then the performance tests or
    the accuracy run."""
    from quantmark.run.checks import check_output_writable, validate
    from quantmark.sut.ensemble.members import MODES, parse_members

    if args.until_stable is not None:
        raise UserError("--until-stable is for one test; give the ensemble --repeats N")
    if base.audit:
        raise UserError("--audit runs on a single SUT; drop --ensemble")
    modes = list(MODES) if args.ensemble_mode == "both" else [args.ensemble_mode]
    members = parse_members(args.ensemble)
    alone, together = ensemble_configs(base, members, modes, args.combine,
                                       baselines=not args.no_baselines)
    for config in together + alone:
        validate(config)
    check_output_writable(base.output)
    if base.mode == "accuracy":
        run_accuracy(together, run_one, console)
    else:
        run_performance(alone, together, run_one, args.repeats or 1, console)


def combined_values(member_sets: list[RepeatSet]) -> list[float]:
    """Per repeat, the members run one after another: latencies add, throughputs combine as
    1 / sum(1 / throughput). Over the repeat indices where every member has a VALID run."""
    series = [s.by_repeat() for s in member_sets]
    shared = sorted(set.intersection(*(set(v) for v in series))) if series else []
    latency = any(s.latency for s in member_sets)
    return [sum(v[k] for v in series) if latency else 1.0 / sum(1.0 / v[k] for v in series)
            for k in shared]


def run_performance(alone: list[RunConfig], together: list[RunConfig],
                    run_one: Callable[[RunConfig], LaunchResult], repeats: int,
                    console: Console) -> list[Side]:
    """Every test ``repeats`` times, interleaved; the table of them printed."""
    configs = alone + together
    sets = {(c.sut, c.model): RepeatSet(c) for c in configs}  # a test's SUT and model name it
    for config in interleaved(configs, repeats):
        sets[(config.sut, config.model)].results.append(run_one(config))
    for config in configs:
        remove_stale(config, repeats)
    member_sets = [sets[(c.sut, c.model)] for c in alone]
    sides = [Side(f"{c.model}@{c.sut} alone", s.metric_values(), s)
             for c, s in zip(alone, member_sets, strict=True)]
    combined = Side(COMBINED, combined_values(member_sets)) if member_sets else None
    if combined is not None:
        sides.append(combined)
    latency = any(found.latency for found in sets.values())
    for config in together:
        found = sets[(config.sut, config.model)]
        side = Side(f"ensemble, {config.ensemble_mode}", found.metric_values(), found)
        if combined is not None and side.values and combined.values:
            side.versus_combined = speedup(combined.values, side.values,
                                           higher_is_better=not latency,
                                           paired=len(side.values) == len(combined.values))
        sides.append(side)
    print_speed(sides, together, latency, repeats, console)
    return sides


def _metric(values: list[float], latency: bool) -> str:
    if not values:
        return "-"
    interval = figure_interval(values)
    scale, fmt, unit = (1e6, "{:.3f}", " ms") if latency else (1.0, "{:.1f}", " samples/s")
    shown = replace(interval, point=interval.point / scale,
                    low=None if interval.low is None else interval.low / scale,
                    high=None if interval.high is None else interval.high / scale)
    return shown.text(fmt) + unit


def _details(side: Side) -> tuple[str, str, str, str]:
    """validity, peak RSS, time shares and disturbed count of a side's runs."""
    if side.runs is None:
        return "-", "-", "-", "-"
    results = [r.results for r in side.runs.results]
    validity = ", ".join(sorted({r.get("summary", {}).get("validity", "?") for r in results}))
    rss = max((r.get("memory", {}).get("peak_rss_mb") or 0 for r in results), default=0)
    members = (results[-1].get("ensemble") or {}).get("members") or [] if results else []
    shares = ", ".join(f"{m['model']}@{m['sut']} {100 * m['time_share']:.0f}%" for m in members)
    hit = side.runs.disturbed()
    return validity, f"{rss:.0f}" if rss else "-", shares or "-", \
        f"[bold red]{len(hit)} of {len(results)}[/]" if hit else "no"


def print_speed(sides: list[Side], together: list[RunConfig], latency: bool, repeats: int,
                console: Console) -> None:
    scenario = together[0].scenario if together else "?"
    table = Table(title=f"ensemble {together[0].model if together else ''}: {scenario}, "
                        f"{repeats} interleaved quick run(s) per test")
    for header in ("test", "validity", "official metric, median [95% interval]",
                   f"vs {COMBINED} [95% interval]", "peak RSS MB", "member time shares",
                   "disturbed"):
        table.add_column(header, overflow="fold")
    for side in sides:
        validity, rss, shares, disturbed = _details(side)
        table.add_row(escape(side.label), escape(validity), escape(_metric(side.values, latency)),
                      escape(side.versus_combined.text()) if side.versus_combined else "-",
                      rss, escape(shares), disturbed)
    console.print(table)
    modes = {s.label: s for s in sides if s.label.startswith("ensemble, ")}
    sequential, concurrent = modes.get("ensemble, sequential"), modes.get("ensemble, concurrent")
    if sequential and concurrent and sequential.values and concurrent.values:
        ratio = speedup(sequential.values, concurrent.values, higher_is_better=not latency,
                        paired=len(sequential.values) == len(concurrent.values))
        console.print(f"concurrent against sequential: {escape(ratio.text())}")
    console.print("A ratio above 1.00x: the ensemble beats running its members one after "
                  "another; the interval says whether that is measurable.")


def run_accuracy(together: list[RunConfig], run_one: Callable[[RunConfig], LaunchResult],
                 console: Console) -> LaunchResult:
    """The ensemble's accuracy run (the first mode: every mode answers the same classes),
    and the top-1 of each member and of the ensemble on the same samples."""
    from pathlib import Path

    from quantmark.report.accuracy import paired_change

    result = run_one(together[0])
    record = (result.results.get("ensemble") or {}).get("accuracy") or {}
    builtin = bool(result.results.get("dataset", {}).get("builtin"))
    members = record.get("members", {})
    best = max(members, key=lambda m: members[m]["top1"] or 0, default=None)
    table = Table(title=f"ensemble accuracy: {together[0].model}")
    for header in ("", "top-1 %", "samples"):
        table.add_column(header, overflow="fold")
    for label, found in members.items():
        table.add_row(escape(label), f"{found['top1']:.2f}", str(found["total"]))
    ensemble = result.results.get("accuracy") or {}
    change = (paired_change(Path(result.run_dir) / "members" / best, result.run_dir,
                            by_source_image=builtin) if best and result.run_dir else None)
    table.add_row(f"ensemble ({together[0].ensemble_combine})",
                  f"{ensemble.get('top1', 0):.2f}" +
                  (f" ({escape(change.text())} vs {escape(best)})" if change else ""),
                  str(ensemble.get("total", "-")))
    console.print(table)
    agreement = record.get("agreement") or {}
    check = record.get("combined_check") or {}
    console.print(f"all members agree on {agreement.get('all', 0):.1f}% of samples; the "
                  f"ensemble's class matched its combination rule on "
                  f"{check.get('checked', 0) - check.get('mismatches', 0)} of "
                  f"{check.get('checked', 0)} samples")
    return result
