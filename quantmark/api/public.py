"""quantmark's Python API: the CLI's jobs as calls, with the flags as keyword arguments and
typed answers. Each LoadGen test still runs in its own process, as from ``run.py``; bad input
raises ``quantmark.UserError`` with the CLI's one line (``exit_code`` 2), a failed SUT
``quantmark.SutError`` (3).

    import quantmark as qm
    r = qm.run(scenario="Offline", sut="ort-int8", model="digits-cnn")
    print(r.figure, r.unit, r.interval, r.valid)
    qm.sweep(models="digits-cnn", suts="ort-fp32,ort-int8", scenarios="Offline",
             output="sweep").to_frame()

Nothing is printed unless ``show=True`` (then the CLI's tables are).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from quantmark.api.flags import arguments
from quantmark.api.results import (
    Comparison,
    History,
    Recommendation,
    Regression,
    RunResult,
    SweepResult,
    run_result,
)
from quantmark.ground.errors import SutError, UserError

if TYPE_CHECKING:
    from quantmark.ground.records import DiagnosisRecord, JobRecord, ProfileRecord

#: the kind of record ``_written`` reads back
JobRecordT = TypeVar("JobRecordT", bound="JobRecord")


@contextlib.contextmanager
def _printing(console: Any, show: bool) -> Iterator[None]:
    """The verb's console silenced unless ``show``."""
    before = console.quiet
    console.quiet = not show
    try:
        yield
    finally:
        console.quiet = before


def run(*, show: bool = False, **flags: Any) -> RunResult:
    """One LoadGen test in its own process (``repeats=N``: N of them, interleaved by nothing
    else, with the median's interval), as ``run.py --scenario S --sut X ...`` runs it.

    ``flags``: ``run.py``'s, by name (``scenario``, ``sut``, ``model``, ``mode``,
    ``batch_size``, ``repeats``, ``output`` ...). Returns the runs' records and, from LoadGen's
    logs, the figure, its unit, its interval and whether every run was VALID."""
    from quantmark.commands import run as verb

    args = arguments("run", "run", flags)
    others = [name for name in ("list_suts", "ensemble", "audit", "all_tests")
              if getattr(args, name)]
    if others:
        raise UserError(f"quantmark.run() runs one test or a repeat set; {others[0]} is "
                        f"run.py's (python run.py --{others[0].replace('_', '-')} ...)")
    with _printing(verb.console, show):
        config = verb.config_from_args(args)
        if args.repeats is None and args.until_stable is None:
            folders = [verb.run_one(config).run_dir]
        else:
            done = verb.run_repeated(config, 1 if args.repeats is None else args.repeats,
                                     args.until_stable, args.max_repeats)
            folders = [result.run_dir for result in done.results]
    found = [folder for folder in folders if folder]
    if not found:  # the launcher raises first; never an answer without a run behind it
        raise SutError(f"{config.sut} {config.scenario}: no run left its folder")
    return run_result(found)


def compare(a: str | Path, b: str | Path, *, paired: bool = False,
            show: bool = False) -> Comparison:
    """How many times faster the runs under ``b`` are than those under ``a``, from LoadGen's
    logs, with the interval and verdict ``run.py compare A B`` prints."""
    from quantmark.commands import compare as verb
    from quantmark.run import comparison

    args = arguments("compare", "compare", {"a": str(a), "b": str(b), "paired": paired})
    side_a, side_b, ratio = comparison.compare(args.a, args.b, args.paired)
    if show:
        comparison.show(verb.console, side_a, side_b, ratio)
    notes = [f"{name}: left out {run}: {why}" for name, side in (("A", side_a), ("B", side_b))
             for run, why in side.left_out]
    notes += [f"{name}: {why}" for name, side in (("A", side_a), ("B", side_b))
              for _, why in side.flagged]
    return Comparison(ratio, tuple(map(Path, side_a.runs)), tuple(map(Path, side_b.runs)),
                      tuple(notes))


def sweep(*, show: bool = False, **flags: Any) -> SweepResult:
    """Run (or resume) a sweep as ``run.py sweep`` does, cells in their own processes, and
    write its report; ``.to_frame()`` is the report's table."""
    from quantmark.commands import report as report_verb
    from quantmark.commands import sweep as verb

    args = arguments("sweep", "sweep", flags)
    with _printing(verb.console, show), _printing(report_verb.console, show):
        outcome = verb.sweep(args)
    return SweepResult(Path(outcome.root), dict(outcome.counts), int(outcome.ran))


def history(*, show: bool = False, **flags: Any) -> History:
    """Each matching series' figures over time from the results store (``store`` its URL,
    ``model``, ``sut``, ``since`` ... its filters); empty with ``note`` saying why when
    nothing matched."""
    from quantmark.commands import history as verb

    args = arguments("history", "history", flags)
    points, qualities, nothing = verb.matching(args)
    if show and not nothing:
        with _printing(verb.console, True):
            verb.show(points)
            verb.show_quality(qualities)
    return History(tuple(points), nothing or verb.unchecked_note(points))


def regress(*, show: bool = False, **flags: Any) -> Regression:
    """Did the newest job of each selected series regress against its baseline: the verdicts
    ``run.py regress`` prints (``.regressed``: those that did)."""
    from quantmark.commands import regress as verb

    args = arguments("regress", "regress", flags)
    verdicts = verb.judge(args)
    if show:
        verb.show(verdicts, args.fdr)
    return Regression(tuple(verdicts))


def recommend(*, show: bool = False, **flags: Any) -> Recommendation:
    """Search the SUTs and settings as ``run.py recommend`` does (resumable: the same call
    continues a search) and answer which to deploy. Not on a fleet (``cluster``): that is
    ``run.py recommend --cluster``."""
    from quantmark.commands import recommend as verb

    args = arguments("recommend", "recommend", flags)
    if args.cluster:
        raise UserError("quantmark.recommend() searches this machine; a fleet's search is "
                        "run.py recommend --cluster (one answer per node)")
    with _printing(verb.console, show):
        model = verb.check_args(args)
        record = verb.answer_here(args, model, verb.search_config(args))
    return Recommendation(record, verb.folder_of(args, model))


def profile(*, show: bool = False, **flags: Any) -> ProfileRecord:
    """Where a SUT's time goes, layer by layer, against its reference (``run.py profile``);
    the record its folder holds."""
    from quantmark.commands import profile as verb
    from quantmark.ground.records import ProfileRecord

    args = arguments("profile", "profile", flags)
    with _printing(verb.console, show):
        folder = verb.profile(args)
    return _written(folder, ProfileRecord)


def diagnose(*, show: bool = False, **flags: Any) -> DiagnosisRecord:
    """Where an INT8 SUT loses precision against its framework's FP32, layer by layer, and
    (``recover=K``) the way back (``run.py diagnose``); the record its folder holds."""
    from quantmark.commands import diagnose as verb
    from quantmark.ground.records import DiagnosisRecord

    args = arguments("diagnose", "diagnose", flags)
    with _printing(verb.console, show):
        folder = verb.diagnose(args)
    return _written(folder, DiagnosisRecord)


def _written(folder: Path, kind: type[JobRecordT]) -> JobRecordT:
    """The record of ``kind`` a verb wrote in ``folder``, read the one way records are."""
    from quantmark.ground.records import RESULTS, load_record

    found = load_record(folder / RESULTS, kind.KIND)
    assert isinstance(found, kind)
    return found
