"""The characterization report's Ensembles section: is running several models per sample worth
what it costs?

An ensemble SUT (``ensemble-sequential``, ``ensemble-concurrent``; ``-vote`` when its members
vote) runs like any other SUT. Its results.json names its members (``model@sut``), and each
member usually ran alone in the same folders. Per machine, ensemble and scenario the speed
table compares the ensemble with its members alone and with those members run one after another
("members alone, combined"). Per machine and ensemble the accuracy table compares its top-1 with
its members'. The intervals, ratios and "no measurable difference" come from ``report.intervals``
(repeats paired by index); the paired top-1 change comes from its ``AccuracyLogs``.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from quantmark.ground.records import RunRecord
from quantmark.report.accuracy import ACCURACY_LOG, paired_change
from quantmark.report.characterize import Config, Run, Study, is_ensemble
from quantmark.report.current_set import read_results
from quantmark.report.intervals import AccuracyLogs, interval, ratio, repeat_index
from quantmark.report.stats import AccuracyChange, Ratio

log = logging.getLogger(__name__)

COMBINED = "members alone, combined"
BASELINE = "baseline"  # the row a ratio column compares with


@dataclass(frozen=True)
class Member:
    """One model at one SUT inside an ensemble: ``efficientnet-lite0@ort-int8``."""

    name: str
    model: str
    sut: str


def _member(entry: Any) -> Member | None:
    """A member as results.json names it: an ``ensemble.members`` record or ``model@sut``."""
    record = entry if isinstance(entry, dict) else {"member": entry}
    name = str(record.get("member") or "").strip()
    model, _, sut = name.rpartition("@")
    model, sut = str(record.get("model") or model), str(record.get("sut") or sut)
    return Member(name, model, sut) if name and model and sut else None


def members(results: RunRecord) -> list[Member]:
    """The ensemble's members in its order: from its ``ensemble`` record, else the model's
    ``members``, else the run's ``ensemble`` setting (comma-separated)."""
    entries = ((results.ensemble or {}).get("members") or results.model.get("members")
               or str(results.config.get("ensemble") or "").split(","))
    return [m for m in map(_member, entries) if m is not None]


def mode(results: RunRecord, sut: str) -> tuple[str, str]:
    """(how the members run, how their answers combine), e.g. ("sequential", "mean"); from the
    SUT's name where the run did not record it."""
    record, settings = results.ensemble or {}, results.config
    run = record.get("mode") or settings.get("ensemble_mode") or (
        "concurrent" if "concurrent" in sut else "sequential")
    combine = record.get("combine") or settings.get("ensemble_combine") or (
        "vote" if sut.endswith("-vote") else "mean")
    return str(run), str(combine)


def _order(results: RunRecord, sut: str) -> tuple[bool, str, bool, str]:
    """Mean before vote, sequential before concurrent: the order of an ensemble's rows."""
    run, combine = mode(results, sut)
    return combine != "mean", combine, run != "sequential", sut


def peak_rss(config: Config | None) -> float | None:
    """The test process's peak RSS (results.json ``memory``), the largest of the repeats: what
    the machine must hold."""
    found = [float(v) for run in (config.runs if config else [])
             if isinstance(v := run.results.memory.get("peak_rss_mb"), int | float)]
    return max(found) if found else None


def time_shares(config: Config) -> dict[str, float]:
    """Each member's share of the ensemble's busy time in LoadGen's window, median over repeats:
    which member the ensemble waits for."""
    shares: dict[str, list[float]] = {}
    for run in config.runs:
        for entry in (run.results.ensemble or {}).get("members") or []:
            share = entry.get("time_share") if isinstance(entry, dict) else None
            if isinstance(share, int | float):
                shares.setdefault(str(entry.get("member")), []).append(float(share))
    return {name: statistics.median(values) for name, values in shares.items()}


def combine(values: list[float], latency: bool) -> float:
    """The members run one after another: their latencies add, and so do their times per sample,
    so throughputs combine as 1 / sum(1 / throughput)."""
    return sum(values) if latency else 1.0 / sum(1.0 / v for v in values)


def _by_repeat(config: Config) -> dict[int, float] | None:
    """The metric per repeat index; None when a run has no index, or two runs share one."""
    found = {repeat_index(run): run.summary.metric_value for run in config.runs}
    if None in found or None in found.values() or len(found) != len(config.runs):
        return None
    return found  # type: ignore[return-value]


def combined(parts: list[Config]) -> Config | None:
    """A stand-in configuration for the members run one after another. Computed per repeat index
    when every member ran the same repeats, so a ratio against it pairs them; otherwise one value
    from their medians. None when a member has no metric, or their units differ."""
    if not parts or any(p.metric is None for p in parts) or len(
            {p.latency_metric for p in parts}) != 1:
        return None
    latency = parts[0].latency_metric
    repeats = [_by_repeat(p) for p in parts]
    first = repeats[0]
    if first and all(r and r.keys() == first.keys() for r in repeats):
        values = {k: combine([r[k] for r in repeats if r], latency) for k in sorted(first)}
    else:
        values = {None: combine([float(p.metric or 0) for p in parts], latency)}
    summary = parts[0].runs[0].summary
    runs = [Run(Path(COMBINED), replace(summary, metric_value=value, samples_per_second=None),
                RunRecord(repeat={"index": index} if index is not None else None))
            for index, value in values.items()]
    made = Config(parts[0].system, "+".join(p.model for p in parts), COMBINED, parts[0].scenario,
                  parts[0].batch_size, runs)
    valid = all(p.derived.get("validity") == "VALID" for p in parts)
    made.derived = {"metric_interval": interval(made.metric_values()), "n": len(runs),
                    "metric_unit": summary.metric_unit, "paired": None not in values,
                    "validity": "VALID" if valid else "INVALID (a member)"}
    return made


@dataclass
class SpeedRow:
    """One row of a speed table. A ratio column holds a Ratio, BASELINE or None."""

    label: str
    kind: str  # "member" | "combined" | "ensemble"
    config: Config | None  # None: not measured
    vs_combined: Ratio | str | None = None
    vs_sequential: Ratio | str | None = None
    peak_rss_mb: float | None = None
    rss_vs_members: float | None = None
    time_share: dict[str, float] = field(default_factory=dict)  # ensemble SUT -> share


@dataclass
class SpeedTable:
    """One (machine, ensemble, scenario, batch size): the members alone, combined, ensembles."""

    system: str
    name: str
    scenario: str
    batch_size: int
    rows: list[SpeedRow]

    @property
    def title(self) -> str:
        batch = f", batch {self.batch_size}" if self.batch_size != 1 else ""
        return f"{self.name} — {self.scenario}{batch} — {self.system}"

    @property
    def metric_name(self) -> str:
        return next((r.config.runs[0].summary.metric_name for r in self.rows if r.config), "")


def speed_tables(study: Study) -> list[SpeedTable]:
    """One speed table per (machine, ensemble, scenario, batch size) the study ran."""
    groups: dict[tuple[str, str, str, int], list[Config]] = {}
    for c in study.configs:
        if is_ensemble(c.first):
            groups.setdefault((c.system, c.model, c.scenario, c.batch_size), []).append(c)
    by_key = {(c.system, c.model, c.sut, c.scenario, c.batch_size): c for c in study.configs}
    return [_speed_table(key, sorted(found, key=lambda c: _order(c.first, c.sut)), by_key)
            for key, found in sorted(groups.items())]


def _speed_table(key: tuple[str, str, str, int], ensembles: list[Config],
                 by_key: dict[tuple, Config]) -> SpeedTable:
    system, name, scenario, batch = key
    parts = members(ensembles[0].first)
    alone = {m.name: by_key.get((system, m.model, m.sut, scenario, batch)) for m in parts}
    missing = [member for member, found in alone.items() if found is None]
    if missing:
        log.info("%s, %s on %s: not measured alone: %s", name, scenario, system, missing)
    reference = None if missing else combined([c for c in alone.values() if c])
    shares = {c.sut: time_shares(c) for c in ensembles}
    rows = [SpeedRow(f"{m.name} alone", "member", alone[m.name], peak_rss_mb=peak_rss(
        alone[m.name]), time_share={sut: s[m.name] for sut, s in shares.items() if m.name in s})
        for m in parts]
    member_rss = [r.peak_rss_mb for r in rows]
    rss_sum = sum(v for v in member_rss if v) if member_rss and None not in member_rss else None
    medians = reference is not None and not reference.derived["paired"]
    rows.append(SpeedRow(COMBINED + (" (of medians)" if medians else ""), "combined", reference,
                         BASELINE if reference else None, peak_rss_mb=rss_sum))
    for c in ensembles:
        _, how = mode(c.first, c.sut)
        sequential = next((s for s in ensembles if mode(s.first, s.sut) == ("sequential", how)),
                          None)
        peers = any(mode(s.first, s.sut)[1] == how for s in ensembles if s is not c)
        rss = peak_rss(c)
        rows.append(SpeedRow(c.sut, "ensemble", c, ratio(c, reference),
                             (BASELINE if peers else None) if sequential is c else
                             ratio(c, sequential), rss, rss / rss_sum if rss and rss_sum else None))
    return SpeedTable(system, name, scenario, batch, rows)


@dataclass
class EnsembleAccuracy:
    """One ensemble SUT's accuracy run: its results.json ``ensemble.accuracy`` record."""

    sut: str
    record: dict[str, Any]
    top1: float | None
    change: AccuracyChange | None = None  # paired per sample, vs the best member
    paired_with: str = ""  # whose answers: the best member's in this run, or its own run's


@dataclass
class AccuracyTable:
    """One (machine, ensemble): the members' top-1 and the ensemble's, with its gain."""

    system: str
    name: str
    members: list[Member]
    own: dict[str, float | None]  # member -> top-1 of its own accuracy run
    runs: list[EnsembleAccuracy]

    def member_top1(self, member: Member, run: EnsembleAccuracy | None = None) -> float | None:
        """The member's top-1 on the ensemble's samples (``run``'s, else any ensemble run's),
        else in its own accuracy run."""
        for found in ([run] if run else []) + self.runs:
            value = ((found.record.get("members") or {}).get(member.name) or {}).get("top1")
            if isinstance(value, int | float):
                return float(value)
        return self.own.get(member.name)

    def best(self, run: EnsembleAccuracy | None = None) -> Member | None:
        scored = [(top1, m) for m in self.members
                  if (top1 := self.member_top1(m, run)) is not None]
        return max(scored, key=lambda s: s[0])[1] if scored else None

    def gain(self, run: EnsembleAccuracy) -> float | None:
        """The ensemble's top-1 minus its best member's, in points, on the same samples."""
        best = self.best(run)
        top1 = self.member_top1(best, run) if best else None
        return run.top1 - top1 if run.top1 is not None and top1 is not None else None

    def agreement(self) -> list[tuple[str, float]]:
        """(members, % of samples on which they give the same class): all, then each pair."""
        record = next((r.record["agreement"] for r in self.runs
                       if isinstance(r.record.get("agreement"), dict)), {})
        found = [("all members", record.get("all"))] + list((record.get("pairs") or {}).items())
        return [(str(k), float(v)) for k, v in found if isinstance(v, int | float)]


def accuracy_tables(study: Study) -> list[AccuracyTable]:
    """One accuracy table per (machine, ensemble) with an ensemble accuracy run."""
    logs = AccuracyLogs(study.accuracy)
    found: dict[tuple[str, str], list[tuple[str, RunRecord]]] = {}
    for (system, model, sut), record in study.accuracy.items():
        results = read_results(Path(record["folder"]))
        if results and is_ensemble(results):
            found.setdefault((system, model), []).append((sut, results))
    tables = []
    for (system, name), runs in sorted(found.items()):
        runs.sort(key=lambda r: _order(r[1], r[0]))
        parts = members(runs[0][1])
        own = {m.name: study.accuracy.get((system, m.model, m.sut), {}).get("top1") for m in parts}
        table = AccuracyTable(system, name, parts, own, [])
        for sut, results in runs:
            record = (results.ensemble or {}).get("accuracy") or {}
            top1 = (record.get("ensemble") or {}).get(
                "top1", study.accuracy[(system, name, sut)].get("top1"))
            table.runs.append(EnsembleAccuracy(sut, record, top1))
        for run in table.runs:
            _pair(study, logs, table, run)
        tables.append(table)
    return tables


def _pair(study: Study, logs: AccuracyLogs, table: AccuracyTable, run: EnsembleAccuracy) -> None:
    """The ensemble's paired top-1 change over its best member: against that member's answers
    in the same run (``members/<member>/``: the very same samples), else its own accuracy run."""
    best = table.best(run)
    if best is None:
        return
    key = (table.system, table.name, run.sut)
    record = study.accuracy[key]
    inside = Path(record["folder"]) / "members" / best.name
    if (inside / ACCURACY_LOG).is_file():
        run.change = paired_change(inside, record["folder"],
                                   by_source_image=bool(record.get("dataset_builtin")))
        run.paired_with = "its answers in this run"
    if run.change is None:
        run.change = logs.change(key, (table.system, best.model, best.sut))
        run.paired_with = "its own accuracy run" if run.change else ""


@dataclass
class Section:
    """Everything the Ensembles section shows; built once per report (the paired top-1 change
    reads the accuracy logs)."""

    speed: list[SpeedTable]
    accuracy: list[AccuracyTable]

    def keys(self) -> list[tuple[str, str]]:
        """(machine, ensemble) pairs, sorted: one subsection and one figure each."""
        return sorted({(t.system, t.name) for t in [*self.speed, *self.accuracy]})


def build(study: Study) -> Section:
    return Section(speed_tables(study), accuracy_tables(study))

