"""``run.py compare A B``: the ratio of two sets of repeated runs, with its interval and verdict.

What a user runs before and after changing a flag, a version or a machine. A and B are each a
results folder (every performance run under it; a folder written with ``--repeats`` counts its
newest repeat set), one run folder, or a sweep cell ``SWEEP/runs/<model>/<sut>/<scenario>-b<N>``
(its repeats ``-r1``, ``-r2`` ...). Both sides must measure the same kind of figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.report.repeats import current_set, read_results
from quantmark.report.stats import Interval, Ratio, figure_interval, speedup

DETAIL_LOG = "mlperf_log_detail.txt"
AUDITS = ("TEST01", "TEST04", "TEST05")


@dataclass
class Side:
    """One side of a comparison: its runs and what they measured."""

    label: str
    runs: list[Path]
    records: list[dict[str, Any]]

    @property
    def values(self) -> list[float]:
        return [float(r["summary"]["metric_value"]) for r in self.records]

    @property
    def unit(self) -> str:
        return str(self.records[0]["summary"].get("metric_unit"))

    @property
    def suts(self) -> list[str]:
        return sorted({str(r.get("config", {}).get("sut")) for r in self.records})

    @property
    def kind(self) -> tuple[str, str, str]:
        summary = self.records[0]["summary"]
        return (str(summary.get("scenario")), str(summary.get("metric_name")), self.unit)

    def disturbed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if (r.get("interference") or {}).get("disturbed")]

    def interval(self) -> Interval:
        return figure_interval(self.values)


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


def load_side(spec: str) -> Side:
    runs = resolve(spec)
    records = [read_results(run) for run in runs]
    usable = [(run, r) for run, r in zip(runs, records, strict=True)
              if (r.get("summary") or {}).get("metric_value")]
    if not usable:
        raise UserError(f"compare: the runs under {spec} have no official metric in their "
                        "results.json; rerun them")
    side = Side(spec, [run for run, _ in usable], [r for _, r in usable])
    kinds = {(str(r["summary"].get("scenario")), str(r["summary"].get("metric_name")),
              str(r["summary"].get("metric_unit")), str(r.get("config", {}).get("model")))
             for r in side.records}
    if len(kinds) > 1:
        listed = "; ".join(" ".join(k for k in kind if k) for kind in sorted(kinds))
        raise UserError(f"compare: {spec} holds runs of different tests ({listed}); pass a "
                        "folder with one model and scenario, e.g. <output>/<system>/<model>/"
                        "<scenario>")
    return side


def compare(a_spec: str, b_spec: str, paired: bool = False) -> tuple[Side, Side, Ratio]:
    """How many times faster B is than A (above 1: B is faster)."""
    a, b = load_side(a_spec), load_side(b_spec)
    if a.kind != b.kind:
        raise UserError(f"compare: {a_spec} measured {' '.join(a.kind)} but {b_spec} measured "
                        f"{' '.join(b.kind)}; compare runs of the same scenario")
    if paired and len(a.values) != len(b.values):
        raise UserError(f"compare --paired: {a_spec} has {len(a.values)} runs and {b_spec} "
                        f"{len(b.values)}; pairing needs runs made side by side, one each")
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
        return f"no measurable difference: B is {ratio.point:.2f}x A [{ratio.low:.2f}, " \
               f"{ratio.high:.2f}]"
    word = "faster" if ratio.point > 1 else "slower"
    return f"B is {word}: {ratio.point:.2f}x A [{ratio.low:.2f}, {ratio.high:.2f}]"
