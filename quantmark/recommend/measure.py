"""The real measurements of ``run.py recommend``: each short run of a candidate is one LoadGen
test in a child process, run exactly as a sweep cell runs one (``sweep.cell.run_cell``), and
each artifact's accuracy is one accuracy run, paired sample by sample with the best FP32 of
any framework here (``report.accuracy.paired_change``, the report's own pairing).

Folders under the measurer's output, each a sweep's (``runs/`` and ``logs/`` below it):
``threads-<N|auto>/`` holds the short runs, a candidate's k-th run as repeat ``k`` of its cell
(``runs/model/sut+options/Scenario-bB-rK``), so no run overwrites another, also across a
resumed search; ``accuracy/`` holds one accuracy run per artifact. A fault of one SUT is that
candidate's ``why`` (one line), never an exception: the others' results are kept.
"""

from __future__ import annotations

import logging
import math
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from quantmark.ground.metric import TOP1, Metric
from quantmark.ground.records import RunRecord
from quantmark.recommend.candidates import (
    ARTIFACT_OPTIONS,
    AccuracyResult,
    Candidate,
    Measurement,
)
from quantmark.sut.registry import KEEP_FLOAT_OPTION
from quantmark.sweep.plan import ACCURACY_BATCH, Cell, SweepSpec

log = logging.getLogger(__name__)

#: the latency percentile each scenario is judged by (Offline: one query, none)
LATENCY_PERCENTILE = {"SingleStream": "90.00", "MultiStream": "99.00", "Server": "99.00"}
#: SUT options that change the model the SUT runs, so its accuracy (an artifact's accuracy
#: is otherwise its SUT's: batch, threads and the other options never change an answer); a
#: mixed-precision point's layers kept in float among them
MODEL_OPTIONS = (*ARTIFACT_OPTIONS, KEEP_FLOAT_OPTION)
#: a failure's one line is cut to this many characters
WHY_CHARS = 300
MIB = 2 ** 20


@dataclass(frozen=True)
class AccuracyRun:
    """One accuracy run's folder and figures, or why it has none."""

    run_dir: str = ""
    figure: float = math.nan  # in ``metric``, the task's (its record names it)
    size_mb: float | None = None
    builtin: bool = False  # the built-in dataset (pairs by source image)
    why: str = ""
    metric: Metric = TOP1


def one_line(text: str) -> str:
    """A failure's message as one line: its last non-empty line, cut short."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[-1] if lines else "failed")[:WHY_CHARS]


def read_record(run_dir: str | Path) -> RunRecord | None:
    """A run folder's results.json (None when it has none or it cannot be read)."""
    from quantmark.report.current_set import read_results

    return read_results(Path(run_dir))


class LoadGenMeasurer:
    """``candidates.Measurer`` with real LoadGen runs of one model in one scenario.

    ``run_settings`` are the settings every run shares: ``input_size`` (a cell's, as
    ``options.shape_fields`` gives it, or ``image_sizes=[size]``) and ``SweepSpec`` fields
    (``num_classes``, ``preprocess``, ``labels``, ``calibration_list``, ``user_conf``,
    ``workers``);
    ``references`` the FP32 SUTs the accuracy change is measured against
    (default: every framework's FP32 that runs here, CPU and GPU; the best in the task's
    metric is the reference)."""

    def __init__(self, scenario: str, model: str, output: str | Path, *,
                 model_path: str | None = None, dataset_path: str | None = None,
                 timeout_s: float = 1800.0, references: tuple[str, ...] | None = None,
                 **run_settings: Any) -> None:
        self.scenario = scenario
        self.model = model
        self.output = Path(output)
        self.timeout_s = timeout_s
        sizes = run_settings.pop("image_sizes", None) or [""]  # a sweep's spelling of it
        self.input_size = str(run_settings.pop("input_size", "") or sizes[0] or "")
        self.seq_len = int(run_settings.pop("seq_len", 0) or 0)  # a text model's (0: default)
        self.template = SweepSpec(models=[model], suts=[], model_path=model_path,
                                  dataset_path=dataset_path, timeout=timeout_s, **run_settings)
        self.references = references
        self._runs: dict[tuple[str, tuple[tuple[str, str], ...]], AccuracyRun] = {}
        self._accuracy: dict[tuple[str, tuple[tuple[str, str], ...]], AccuracyResult] = {}
        self._reference: tuple[str, AccuracyRun] | None = None

    # ------------------------------------------------------------------ short runs
    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        """One quick LoadGen run of ``candidate`` lasting at least ``seconds``."""
        from quantmark.sweep.cell import run_cell

        started = time.monotonic()
        root = self.output / f"threads-{candidate.threads or 'auto'}"
        try:
            cell = next_cell(root, self._cell(candidate))
            spec = replace(self.template, suts=[candidate.sut], scenarios=[self.scenario],
                           batch_sizes=[candidate.batch_size], seconds=seconds,
                           threads=candidate.threads)
            entry = run_cell(root, spec, cell)
            return measurement_of(entry, root, self.scenario, time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - one candidate's fault never ends the search
            log.warning("%s: %s", candidate.key, exc)
            return Measurement(None, None, False, False, seconds=time.monotonic() - started,
                               why=one_line(f"{type(exc).__name__}: {exc}"))

    def _cell(self, candidate: Candidate, repeat: int = 1) -> Cell:
        return Cell(self.model, candidate.sut, self.scenario, candidate.batch_size, repeat,
                    sut_options=sut_options(candidate), input_size=self.input_size,
                    seq_len=self.seq_len)

    # ------------------------------------------------------------------ accuracy
    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        """The artifact's figure in its task's metric, its paired change against the best
        FP32 here (with its interval) and its size on disk; run once per artifact, then from
        the cache (its ``seconds``: what this call spent, the reference's runs included)."""
        key = accuracy_key(candidate)
        if key in self._accuracy:  # nothing spent this time
            return replace(self._accuracy[key], seconds=0.0)
        started = time.monotonic()
        try:
            result = self._paired(key)
        except Exception as exc:  # noqa: BLE001 - a damaged log is this artifact's fault
            log.warning("%s accuracy: %s", candidate.artifact, exc)
            result = failed_accuracy(f"{type(exc).__name__}: {exc}", "")
        result = replace(result, seconds=time.monotonic() - started)
        self._accuracy[key] = result
        return result

    def accuracy_suts_due(self, candidate: Candidate) -> tuple[str, ...]:
        """The SUTs whose accuracy runs ``accuracy(candidate)`` would make now: its own, and
        the FP32 references' not run yet while the reference is not chosen (the first call)."""
        key = accuracy_key(candidate)
        if key in self._accuracy:
            return ()
        due = [key] if key not in self._runs else []
        if self._reference is None:
            due += [(name, ()) for name in self.reference_suts()
                    if (name, ()) not in self._runs and (name, ()) != key]
        return tuple(name for name, _ in due)

    def _paired(self, key: tuple[str, tuple[tuple[str, str], ...]]) -> AccuracyResult:
        from quantmark.report.accuracy import paired_agreement, paired_change

        own = self._accuracy_run(*key)
        if own.why:
            return failed_accuracy(own.why, "", own.size_mb)
        reference = self.reference()
        if reference is None:
            return replace(failed_accuracy("no FP32 reference ran here: "
                                           + self._reference_why(), "", own.size_mb),
                           top1=own.figure, metric=own.metric.key)
        name, base = reference
        change = paired_change(base.run_dir, own.run_dir, by_source_image=own.builtin)
        if change is None:
            return replace(failed_accuracy(f"no sample in common with {name}'s accuracy run "
                                           "(another dataset?)", name, own.size_mb),
                           top1=own.figure, metric=own.metric.key)
        itself = own.run_dir == base.run_dir  # the reference: no change, by definition
        agrees = None if itself else paired_agreement(base.run_dir, own.run_dir,
                                                      by_source_image=own.builtin)
        return AccuracyResult(own.figure, change.delta_points, change.low, change.high, name,
                              own.size_mb, metric=own.metric.key, units=change.n_groups,
                              decides=itself or not getattr(change, "too_few_groups", False),
                              agreement=agrees.text(name) if agrees else "")

    def reference(self) -> tuple[str, AccuracyRun] | None:
        """(SUT, its accuracy run) of the FP32 best in the task's metric, each FP32 run once;
        None when none ran."""
        if self._reference is None:
            done = [(name, self._accuracy_run(name, ())) for name in self.reference_suts()]
            ok = [(name, run) for name, run in done if not run.why]
            if ok:  # the first of equal figures: the registry's order
                sign = 1.0 if ok[0][1].metric.higher_is_better else -1.0
                self._reference = max(ok, key=lambda item: sign * item[1].figure)
        return self._reference

    def _reference_why(self) -> str:
        whys = [f"{name}: {run.why}" for (name, _), run in self._runs.items()
                if name in self.reference_suts() and run.why]
        return one_line("; ".join(whys) or "no FP32 SUT is available")

    def reference_suts(self) -> tuple[str, ...]:
        """The FP32 SUTs the reference is chosen among."""
        if self.references is not None:
            return self.references
        from quantmark.sut.registry import FP32_BASELINE, GPU_FP32_BASELINE, SUTS, availability

        names = [*FP32_BASELINE.values(), *GPU_FP32_BASELINE.values()]
        return tuple(name for name in names if name in SUTS and availability(SUTS[name])[0])

    def _accuracy_run(self, sut: str, options: tuple[tuple[str, str], ...]) -> AccuracyRun:
        """One accuracy run of ``sut`` with the options that change its model, cached."""
        from quantmark.sweep.cell import run_cell

        key = (sut, options)
        if key not in self._runs:
            root = self.output / "accuracy"
            cell = Cell(self.model, sut, "Offline", ACCURACY_BATCH, mode="accuracy",
                        sut_options=options, input_size=self.input_size,
                        seq_len=self.seq_len)
            try:
                entry = run_cell(root, replace(self.template, suts=[sut]), cell)
                self._runs[key] = accuracy_of(entry, root)
            except Exception as exc:  # noqa: BLE001 - one SUT's fault never ends the search
                log.warning("%s accuracy: %s", sut, exc)
                self._runs[key] = AccuracyRun(why=one_line(f"{type(exc).__name__}: {exc}"))
        return self._runs[key]

    def run_command(self, candidate: Candidate) -> str:
        """``run_command`` with this measurer's model file and dataset."""
        return run_command(candidate, self.scenario, self.model,
                           model_path=self.template.model_path,
                           dataset_path=self.template.dataset_path)


def sut_options(candidate: Candidate) -> tuple[tuple[str, str], ...]:
    """The candidate's ``--sut-option`` pairs, sorted by key: its settings and, for a
    mixed-precision point, the layers it keeps in float (``keep_float``: run.py builds it)."""
    kept = ((KEEP_FLOAT_OPTION, ",".join(candidate.keep_float)),) if candidate.keep_float else ()
    return tuple(sorted((*candidate.settings, *kept)))


def accuracy_key(candidate: Candidate) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What an accuracy run depends on: the SUT and the options that change its model."""
    return (candidate.sut,
            tuple((key, value) for key, value in sut_options(candidate) if key in MODEL_OPTIONS))


def failed_accuracy(why: str, reference: str, size_mb: float | None = None) -> AccuracyResult:
    nan = math.nan
    return AccuracyResult(nan, nan, nan, nan, reference, size_mb, why=one_line(why))


def next_cell(root: Path, cell: Cell) -> Cell:
    """The cell's first repeat whose folder is not there yet (earlier runs are kept)."""
    from quantmark.sweep.cell import cell_dir

    repeat = cell.repeat
    while cell_dir(root, replace(cell, repeat=repeat)).exists():
        repeat += 1
    return replace(cell, repeat=repeat)


def entry_why(entry: dict[str, Any]) -> str:
    """A failed cell's status and the last line of its message."""
    return one_line(f"{entry.get('status', 'failed')}: "
                    f"{one_line(entry.get('message') or 'no message')}")


def measurement_of(entry: dict[str, Any], root: Path, scenario: str,
                   seconds: float) -> Measurement:
    """A sweep manifest entry of a short run as the search's Measurement."""
    from quantmark.run.validity import left_out_why

    memory = entry.get("peak_rss_mb")
    if entry.get("status") != "ok" or not entry.get("run_dir"):
        return Measurement(None, None, False, False, memory, seconds, why=entry_why(entry))
    run_dir = root / entry["run_dir"]
    record = read_record(run_dir)
    if record is None:
        return Measurement(None, None, False, False, memory, seconds, str(run_dir),
                           why=f"no readable results.json in {run_dir}")
    summary = record.summary
    percentile = LATENCY_PERCENTILE.get(scenario)
    latency_ns = (summary.get("percentiles_ns") or {}).get(percentile) if percentile else None
    rate = summary.get("samples_per_second")
    left_out = left_out_why(record)
    if left_out:
        log.info("%s: left out of figures: %s", run_dir, left_out)
    count = (record.dataset or {}).get("evaluation_count")
    return Measurement(latency_ms=None if latency_ns is None else float(latency_ns) / 1e6,
                       samples_per_s=None if rate is None else float(rate),
                       valid=left_out is None, disturbed=bool(entry.get("disturbed")),
                       memory_mb=memory, seconds=seconds, run_dir=str(run_dir),
                       samples=int(count) if count else None)


def accuracy_of(entry: dict[str, Any], root: Path) -> AccuracyRun:
    """A sweep manifest entry of an accuracy run as its folder, its figure in the metric its
    record's task names (top-1 for a record of before tasks) and its size."""
    from quantmark.report.quality import figure, metric_of

    if entry.get("status") != "ok" or not entry.get("run_dir"):
        return AccuracyRun(why=entry_why(entry))
    run_dir = root / entry["run_dir"]
    record = read_record(run_dir)
    metric = metric_of(record) if record else TOP1
    found = figure(record.accuracy, metric) if record else None
    if record is None or found is None:
        return AccuracyRun(str(run_dir), why=f"no {metric.name} in {run_dir}/results.json",
                           metric=metric)
    size = record.model.get("size_bytes")
    return AccuracyRun(str(run_dir), float(found), size / MIB if size else None,
                       bool(record.dataset.get("builtin")), metric=metric)


def vendor_command(run_dir: str | Path) -> str | None:
    """The framework's own tool's command line (``benchmark_app``, ``litert-benchmark``) that
    reruns this run's figure, where its results.json records one."""
    record = read_record(run_dir)
    command = record.speed_settings.get("vendor_command") if record else None
    return str(command) if command else None


def run_command(candidate: Candidate, scenario: str, model: str, *,
                model_path: str | None = None, dataset_path: str | None = None,
                extra: Sequence[str] = ()) -> str:
    """The ``python run.py`` line that runs ``candidate`` as the search measured it;
    ``extra``: more flags every run had (``--input-size 384`` ...)."""
    args = ["python", "run.py", "--scenario", scenario, "--sut", candidate.sut,
            "--model", model]
    if model_path:
        args += ["--model-path", model_path]
    if dataset_path:
        args += ["--dataset-path", dataset_path]
    args += ["--batch-size", str(candidate.batch_size)]
    if candidate.threads:
        args += ["--threads", str(candidate.threads)]
    for key, value in sut_options(candidate):
        args += ["--sut-option", f"{key}={value}"]
    return shlex.join([*args, *extra])
