"""``run.py compare A B``: the ratio of two sets of repeated runs, with its interval and verdict.

What a user runs before and after changing a flag, a version or a machine. A and B are each a
results folder (every performance run under it; a folder written with ``--repeats`` counts its
newest repeat set), one run folder, or a sweep cell ``SWEEP/runs/<model>/<sut>/<scenario>-b<N>``
(its repeats ``-r1``, ``-r2`` ...). Both sides must measure the same kind of figure.

A side is repeats of ONE test: runs of different SUTs, models or model files, batch sizes,
threads, options, modes, datasets, machines or software are refused, not pooled into one
median. Only VALID runs with whole logs make a figure; every other run is left out and named in
one line. A side with no run left is an error (exit 2): its folder holds nothing to compare, and
the fix is to rerun it.

Each run's figure, validity and scenario are LoadGen's, from its logs (``report.logged_run``),
never results.json's: a run whose results.json says otherwise is flagged in one line (and
compare exits 1), a run LoadGen calls INVALID is left out as INVALID whatever results.json
says, and a run that is a copy of another on its side (the same LoadGen test) is left out and
flagged: it would count one measurement twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import system_name
from quantmark.ground.records import RunRecord
from quantmark.report.current_set import current_set, read_results
from quantmark.report.logged_run import LoggedRun, verify
from quantmark.report.stats import Interval, Ratio, bound_text, figure_interval, speedup
from quantmark.run.validity import left_out_why

DETAIL_LOG = "mlperf_log_detail.txt"
AUDITS = ("TEST01", "TEST04", "TEST05")
SWEEP_REPEAT = re.compile(r"-b\d+-r(\d+)$")  # a sweep cell's folder: <scenario>-b<N>-r<K>
# What two runs of one test share, by results.json section and key; the label names it
IDENTITY: dict[str, tuple[str, ...]] = {
    "scenario": ("summary", "scenario"), "metric": ("summary", "metric_name"),
    "unit": ("summary", "metric_unit"), "model": ("config", "model"),
    "SUT": ("config", "sut"), "mode": ("config", "mode"), "quick": ("config", "quick"),
    "quick duration (ms)": ("config", "quick_duration_ms"), "audit": ("config", "audit"),
    "batch size": ("config", "batch_size"), "threads": ("config", "threads"),
    "workers": ("config", "workers"), "SUT options": ("config", "sut_options"),
    "user.conf": ("config", "user_conf"), "calibration list": ("config", "calibration_list"),
    "ensemble": ("config", "ensemble"), "ensemble mode": ("config", "ensemble_mode"),
    "ensemble combine": ("config", "ensemble_combine"),
    "dataset": ("dataset", "fingerprint"), "software": ("software",),
}


@dataclass
class Side:
    """One side of a comparison: the runs its figure uses, and those it leaves out."""

    label: str
    runs: list[Path]
    records: list[RunRecord]
    left_out: list[tuple[Path, str]] = field(default_factory=list)
    found: list[int | None] = field(default_factory=list)  # repeat index of every run found
    #: runs whose folder is not what LoadGen measured: results.json disagrees with its logs,
    #: or the run is a copy of another (each with why, in one line)
    flagged: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [float(r.summary["metric_value"]) for r in self.records]

    @property
    def unit(self) -> str:
        return str(self.records[0].summary.get("metric_unit"))

    @property
    def suts(self) -> list[str]:
        return sorted({str(r.config.get("sut")) for r in self.records})

    @property
    def kind(self) -> tuple[str, str, str]:
        summary = self.records[0].summary
        return (str(summary.get("scenario")), str(summary.get("metric_name")), self.unit)

    def disturbed(self) -> list[RunRecord]:
        return [r for r in self.records if (r.interference or {}).get("disturbed")]

    def interval(self) -> Interval:
        return figure_interval(self.values)

    def by_repeat(self) -> dict[int | None, tuple[Path, RunRecord]]:
        return {run_index(run, r): (run, r) for run, r in zip(self.runs, self.records,
                                                               strict=True)}


def _is_performance_run(folder: Path) -> bool:
    parts = folder.parts
    return (folder.name.startswith("run_") and not folder.name.endswith(".failed")
            and "accuracy" not in parts and not any(a in parts for a in AUDITS)
            and (folder / "results.json").is_file())


def _runs_under(root: Path) -> list[Path]:
    """Every finished performance run under ``root``: the newest repeat set of each folder."""
    found = sorted({log.parent for log in root.rglob(DETAIL_LOG)} |
                   ({root} if (root / DETAIL_LOG).is_file() else set()))
    by_folder: dict[Path, list[Path]] = {}
    for run in found:
        if _is_performance_run(run):
            by_folder.setdefault(run.parent, []).append(run)
    return [run for runs in by_folder.values() for run in current_set(runs)]


def resolve(spec: str) -> list[Path]:
    """The run folders ``spec`` names (see the module docstring); a one-line error otherwise."""
    path = Path(spec).expanduser()
    if path.is_dir():
        runs = _runs_under(path)
    elif path.parent.is_dir() and (cells := sorted(
            p for p in path.parent.iterdir()
            if p.is_dir() and re.fullmatch(re.escape(path.name) + r"-r\d+", p.name))):
        runs = [run for cell in cells for run in _runs_under(cell)]
    else:
        raise UserError(f"compare: {spec} is neither a folder nor a sweep cell "
                        "(SWEEP/runs/<model>/<sut>/<scenario>-b<batch>); pass a results folder")
    if not runs:
        raise UserError(f"compare: no finished performance run (results.json beside "
                        f"{DETAIL_LOG}) under {spec}")
    return runs


def run_index(run: Path, record: RunRecord | None) -> int | None:
    """Which repeat a run was: its sweep cell's ``-r<K>``, else results.json ``repeat.index``."""
    for part in reversed(run.parts):
        if match := SWEEP_REPEAT.search(part):
            return int(match[1])
    return record.repeat_index if record else None


def identity(record: RunRecord) -> dict[str, str]:
    """What makes runs repeats of one test, as text: the IDENTITY fields, the model artifact
    (its cache key, else its source hash, else the model file) and the machine."""
    found: dict[str, str] = {}
    for label, keys in IDENTITY.items():
        value: Any = getattr(record, keys[0])
        for key in keys[1:]:
            value = value.get(key) if isinstance(value, dict) else None
        found[label] = "-" if value in (None, "", {}) else str(value)
    model = record.model
    found["model artifact"] = str(model.get("key") or model.get("source_hash") or
                                  record.config.get("model_path") or "-")
    found["machine"] = system_name(record.machine)
    return found


def _name(run: Path, spec: str) -> str:
    root = Path(spec).expanduser()
    return str(run.relative_to(root)) if run.is_relative_to(root) and run != root else str(run)


def _check_one_test(spec: str, runs: list[Path], records: list[RunRecord]) -> None:
    """A one-line error naming what differs when the runs are not repeats of one test."""
    seen = [identity(r) for r in records]
    differ = []
    for label in seen[0]:
        first: dict[str, Path] = {}
        for run, found in zip(runs, seen, strict=True):
            first.setdefault(found[label], run)
        if len(first) > 1:
            shown = ", ".join(f"{value[:60]} ({_name(run, spec)})" for value, run in first.items())
            differ.append(f"{label} differs: {shown}")
    if differ:
        raise UserError(f"compare: {spec} holds runs of different tests, not repeats of one "
                        f"({'; '.join(differ)}); pass a folder with one test's runs (one SUT, "
                        "model, scenario, batch size and settings), e.g. <output>/<system>/"
                        "<model>/<scenario>")


def load_side(spec: str) -> Side:
    """The runs ``spec`` names, checked to be repeats of one test, the unusable left out; each
    record carries LoadGen's summary from its logs in place of its own."""
    runs = resolve(spec)
    records = [read_results(run) for run in runs]
    readable = [(run, record) for run, record in zip(runs, records, strict=True) if record]
    if readable:  # the others are left out
        _check_one_test(spec, [run for run, _ in readable], [record for _, record in readable])
    side = Side(spec, [], [], found=[run_index(run, r) for run, r in zip(runs, records,
                                                                         strict=True)])
    seen: dict[tuple[Any, ...], Path] = {}
    for run, record in zip(runs, records, strict=True):
        if record is None:
            side.left_out.append((run, "its results.json does not parse"))
            continue
        logged = verify(run, record)
        if logged.mismatches:
            side.flagged.append((run, logged.disagreement(
                _name(run, spec), "compare used LoadGen's figure and validity")))
        copy_of = seen.setdefault(_test_of(logged), run) if logged.started_at else run
        why = left_out_why(logged.record(record))
        if copy_of != run:
            why = f"a copy of {_name(copy_of, spec)} (the same LoadGen test)"
            side.flagged.append((run, f"{_name(run, spec)} is {why}: one measurement counts "
                                      "once; remove the copy"))
        if why:
            side.left_out.append((run, why))
        else:
            side.runs.append(run)
            side.records.append(logged.record(record))
    if not side.runs:
        named = "; ".join(f"{_name(run, spec)} {why}" for run, why in side.left_out)
        raise UserError(f"compare: no run under {spec} can be used, every one is INVALID or "
                        f"incomplete ({named}); rerun them")
    return side


def _test_of(logged: LoggedRun) -> tuple[Any, ...]:
    """What tells one LoadGen test from another: when it started and what it measured."""
    summary = logged.summary
    return (logged.started_at, summary.scenario, summary.metric_value,
            summary.samples_per_second, summary.query_count)


def _pair(a: Side, b: Side) -> None:
    """Keep only runs with a partner of the same repeat index on the other side; name the
    rest. The sides must have been made side by side: the same repeat indices, once each."""
    if sorted(a.found, key=str) != sorted(b.found, key=str) or None in a.found or \
            len(set(a.found)) != len(a.found):
        raise UserError(f"compare --paired: {a.label} has runs {_indices(a.found)} and "
                        f"{b.label} {_indices(b.found)}; pairing needs runs made side by side, "
                        "one each, with the same repeat indices")
    mine, theirs = a.by_repeat(), b.by_repeat()
    for side, own, other, name in ((a, mine, theirs, "B"), (b, theirs, mine, "A")):
        for index in sorted(set(own) - set(other)):
            run, _ = own[index]
            side.left_out.append((run, f"its partner, repeat {index} of {name}, was left out"))
        kept = sorted(set(own) & set(other))
        side.runs = [own[i][0] for i in kept]
        side.records = [own[i][1] for i in kept]
    if not a.runs:
        raise UserError(f"compare --paired: no repeat has a usable run on both sides "
                        f"({a.label}, {b.label}); rerun them side by side")


def _indices(found: list[int | None]) -> str:
    return "[" + ", ".join("?" if i is None else str(i) for i in found) + "]"


def compare(a_spec: str, b_spec: str, paired: bool = False) -> tuple[Side, Side, Ratio]:
    """How many times faster B is than A (above 1: B is faster)."""
    a, b = load_side(a_spec), load_side(b_spec)
    if a.kind != b.kind:
        raise UserError(f"compare: {a_spec} measured {' '.join(a.kind)} but {b_spec} measured "
                        f"{' '.join(b.kind)}; compare runs of the same scenario")
    if paired:
        _pair(a, b)
    ratio = speedup(a.values, b.values, higher_is_better=a.unit != "ns", paired=paired)
    return a, b, ratio


def metric_text(side: Side) -> str:
    interval = side.interval()
    if side.unit == "ns":
        low = None if interval.low is None else interval.low / 1e6
        high = None if interval.high is None else interval.high / 1e6
        return Interval(interval.point / 1e6, low, high, interval.n, interval.method).text(
            "{:.3f}") + " ms"
    return interval.text("{:.2f}") + " samples/s"


def verdict_line(ratio: Ratio) -> str:
    """B against A in words, with the interval."""
    if ratio.low is None:
        return (f"B is {ratio.point:.2f}x A, from a single run on a side: no interval; run "
                "each side with --repeats 3 or more")
    if not ratio.significant:
        return f"no measurable difference: B is {ratio.point:.2f}x A [{bound_text(ratio.low)}, " \
               f"{bound_text(ratio.high)}]"
    word = "faster" if ratio.point > 1 else "slower"
    return f"B is {word}: {ratio.point:.2f}x A [{bound_text(ratio.low)}, {bound_text(ratio.high)}]"


def show(console: Console, a: Side, b: Side, ratio: Ratio) -> None:
    """The two sides' table, the verdict, then one line per run left out or disturbed."""
    table = Table(title="compare")
    for column in ("side", "folder", "SUT", "runs", "official metric, median [95% interval]",
                   "disturbed"):
        table.add_column(column, overflow="fold")
    for name, side in (("A", a), ("B", b)):
        hit = side.disturbed()
        runs = str(len(side.values)) + (f" ({len(side.left_out)} left out)" if side.left_out
                                        else "")
        table.add_row(name, escape(side.label), escape(", ".join(side.suts)), runs,
                      escape(metric_text(side)), f"[bold red]{len(hit)}[/]" if hit else "no")
    console.print(table)
    console.print(escape(verdict_line(ratio)) + f" ({ratio.method})")
    for name, side in (("A", a), ("B", b)):
        for run, why in side.left_out:
            console.print(f"[yellow]{name}: left out {escape(_name(run, side.label))}: "
                          f"{escape(why)}[/]", soft_wrap=True)
        for record in side.disturbed():
            why = "; ".join((record.interference or {}).get("why") or [])
            console.print(f"[yellow]{name} has a disturbed run: {escape(why)}; rerun it on a "
                          "quiet machine[/]")
    for name, side in (("A", a), ("B", b)):
        for _, why in side.flagged:
            console.print(f"[bold red]{name}: {escape(why)}[/]", soft_wrap=True)
