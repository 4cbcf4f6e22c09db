"""What the API's calls return: typed answers with their figures and intervals as attributes,
read the way the report reads them (a run's figure and validity from LoadGen's own logs), and
``to_frame()`` where the answer is a table (a sweep, the history of a store)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.errors import UserError
from quantmark.ground.records import RESULTS, RecommendationRecord, RunRecord, load_run

if TYPE_CHECKING:
    import pandas

    from quantmark.report.loadgen_log import RunSummary
    from quantmark.report.stats import Interval, Ratio
    from quantmark.store.points import Point
    from quantmark.store.quality_jobs import QualityPoint


def _frame(rows: Sequence[dict[str, Any]], columns: Sequence[str] = ()) -> pandas.DataFrame:
    try:
        import pandas
    except ImportError:  # the lean install
        raise UserError("to_frame() needs pandas: pip install pandas") from None
    return pandas.DataFrame(list(rows), columns=list(columns) or None)


@dataclass(frozen=True)
class RunResult:
    """One LoadGen test (``repeats``: a set of them): the record each run wrote, LoadGen's own
    summary of each, and the figure's interval over the VALID runs (a single run: n=1, no
    bounds)."""

    records: tuple[RunRecord, ...]
    summaries: tuple[RunSummary, ...]
    run_dirs: tuple[Path, ...]
    #: the VALID performance runs' figures (LoadGen's), in run order
    values: tuple[float, ...] = ()

    @property
    def interval(self) -> Interval | None:
        """The figure's interval over the VALID runs; None when no VALID run measured it.
        Computed when asked: its statistics need scipy, which the lean install (a Pi's)
        lacks, and ``run.py`` answers through this object there too."""
        if not self.values:
            return None
        from quantmark.report.stats import figure_interval

        return figure_interval(list(self.values))

    @property
    def record(self) -> RunRecord:
        """The last run's record (the only one of a single run)."""
        return self.records[-1]

    @property
    def run_dir(self) -> Path:
        return self.run_dirs[-1]

    @property
    def figure(self) -> float | None:
        """The official metric: samples/s, or a latency in ns (``unit``); a repeat set's
        median. None when no run was VALID."""
        return None if self.interval is None else self.interval.point

    @property
    def unit(self) -> str:
        return self.summaries[-1].metric_unit

    @property
    def valid(self) -> bool:
        """Every run VALID by LoadGen's own logs."""
        return all(summary.validity == "VALID" for summary in self.summaries)

    @property
    def accuracy(self) -> dict[str, Any] | None:
        """An accuracy run's figures in its task's metric (``{"top1": 98.3, ...}``)."""
        return self.record.accuracy

    @property
    def exit_code(self) -> int:
        """``run.py``'s: 0 (an INVALID run is a figure with its verdict, not a failure)."""
        return 0


def run_result(run_dirs: Sequence[str | Path]) -> RunResult:
    """The runs in ``run_dirs`` as LoadGen's logs tell them (a record that disagrees with its
    logs is one line, as in the report)."""
    from quantmark.report.logged_run import verify

    records, summaries = [], []
    for folder in run_dirs:
        record = load_run(Path(folder) / RESULTS)
        logged = verify(folder, record).check()
        records.append(logged.record(record))
        summaries.append(logged.summary)
    values = [s.metric_value for s in summaries
              if s.validity == "VALID" and s.metric_value is not None and s.mode != "accuracy"]
    return RunResult(tuple(records), tuple(summaries), tuple(Path(d) for d in run_dirs),
                     tuple(values))


@dataclass(frozen=True)
class Comparison:
    """``compare(a, b)``: how many times faster B is than A, with its interval and verdict."""

    ratio: Ratio
    a_runs: tuple[Path, ...]
    b_runs: tuple[Path, ...]
    #: one line per run left out (INVALID, incomplete, a copy) or flagged (its record
    #: disagrees with LoadGen's logs)
    notes: tuple[str, ...] = ()
    #: the flagged ones alone
    flagged: tuple[str, ...] = ()

    @property
    def speedup(self) -> float:
        return self.ratio.point

    @property
    def verdict(self) -> str:
        return self.ratio.verdict

    @property
    def exit_code(self) -> int:
        """``run.py compare``'s: 1 when a run was flagged, else 0."""
        return 1 if self.flagged else 0


@dataclass(frozen=True)
class SweepResult:
    """A finished (or resumed) sweep: its folder, the cells by status, and its report."""

    root: Path
    counts: dict[str, int]
    ran: int  # cells run by this call (the rest were finished before)

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.counts.items() if status not in ("ok", "unavailable"))

    @property
    def exit_code(self) -> int:
        """``run.py sweep``'s: 1 when a cell failed (a row of the report), else 0."""
        return 1 if self.failed else 0

    def to_frame(self) -> pandas.DataFrame:
        """The report's table (``report.csv``): one row per configuration, every figure with
        its interval, speedups, accuracy change and agreement with FP32; numbers as numbers,
        an empty cell as NaN."""
        path = self.root / "report.csv"
        if not path.is_file():
            raise UserError(f"{path} is missing: run quantmark.sweep() on {self.root} again")
        try:
            import pandas
        except ImportError:  # the lean install
            raise UserError("to_frame() needs pandas: pip install pandas") from None
        return pandas.read_csv(path)


@dataclass(frozen=True)
class History:
    """``history(...)``: each job's figure of each matching series, oldest first, and each
    accuracy run's quality."""

    points: tuple[Point, ...]
    #: jobs recorded before the store checked figures against LoadGen's logs
    note: str | None = None
    qualities: tuple[QualityPoint, ...] = ()
    #: where ``plot=`` drew the trend
    plot: Path | None = None
    #: why nothing matched (the filters that match nothing); None when something did
    nothing: str | None = None

    @property
    def exit_code(self) -> int:
        """``run.py history``'s: 1 when nothing matched, else 0."""
        return 1 if self.nothing else 0

    def to_frame(self) -> pandas.DataFrame:
        """One row per job and series: the series' fields, the figure and its interval."""
        rows = []
        for point in self.points:
            row = dataclasses.asdict(point.series)
            row.update({"job_id": point.job_id, "when": point.when, "value": point.value,
                        "low": point.low, "high": point.high, "runs": len(point.runs),
                        "valid": point.valid, "disturbed": point.disturbed,
                        "tags": ",".join(point.tags)})
            rows.append(row)
        return _frame(rows)


@dataclass(frozen=True)
class Regression:
    """``regress(...)``: one verdict per series (``outcome``: regressed, improved, no
    measurable change, too little history ...), with its ratio and interval."""

    verdicts: tuple[Any, ...] = field(default_factory=tuple)

    @property
    def regressed(self) -> tuple[Any, ...]:
        from quantmark.store.verdicts import REGRESSED

        return tuple(v for v in self.verdicts if v.outcome == REGRESSED)

    @property
    def exit_code(self) -> int:
        """``run.py regress``'s: 1 when a series regressed, else 0."""
        return 1 if self.regressed else 0

    def to_frame(self) -> pandas.DataFrame:
        """One row per series: its fields, the verdict, the newest figure against the
        baseline's, the ratio and its interval, and why."""
        rows = []
        for verdict in self.verdicts:
            row = dataclasses.asdict(verdict.series)
            newest = verdict.newest
            row.update({"outcome": verdict.outcome, "reason": verdict.reason,
                        "newest": None if newest is None else newest.value,
                        "baseline": verdict.baseline_figure, "ratio": verdict.ratio,
                        "ratio_low": verdict.low, "ratio_high": verdict.high,
                        "jobs": len(verdict.history)})
            rows.append(row)
        return _frame(rows)


@dataclass(frozen=True)
class Recommendation:
    """``recommend(...)``: which configuration to deploy (``recommended``: its key, figure
    and accuracy change with their intervals), or why none, and every candidate's evidence."""

    record: RecommendationRecord
    folder: Path

    @property
    def verdict(self) -> str:
        """winner | tied | undecided | infeasible | cannot tell."""
        return self.record.verdict

    @property
    def recommended(self) -> str | None:
        """The recommended candidate's key (``ort-int8 b8 t2``), None without one."""
        return (self.record.recommended or {}).get("key")

    @property
    def exit_code(self) -> int:
        """``run.py recommend``'s: 1 when no configuration meets the limits or the evidence
        cannot tell, else 0."""
        return 1 if self.verdict in ("infeasible", "cannot tell") else 0

    @property
    def cannot_tell(self) -> dict[str, list[str]]:
        """Candidates the evidence could not judge against a limit, each with what would."""
        return self.record.cannot_tell

    def to_frame(self) -> pandas.DataFrame:
        """One row per candidate: its key, figure and interval, accuracy change and interval,
        and why it was dropped ("" for those still standing)."""
        rows = []
        for c in self.record.candidates:
            figure, accuracy = c.get("objective") or {}, c.get("accuracy") or {}
            rows.append({"key": c.get("key"), "sut": c.get("sut"), "dropped": c.get("dropped"),
                         "figure": figure.get("point"), "low": figure.get("low"),
                         "high": figure.get("high"), "runs": c.get("runs"),
                         "accuracy_change": accuracy.get("change_points"),
                         "accuracy_low": accuracy.get("low"),
                         "accuracy_high": accuracy.get("high"),
                         "model_size_mb": accuracy.get("model_size_mb")})
        return _frame(rows)
