"""The verbs' jobs called with their parsed flags: what ``quantmark.run(...)`` and the other
calls do after their keyword arguments are parsed, and what ``run.py VERB`` does after its
command line is (``quantmark.api.command_line``). One path for both, so a flag can never
mean one thing in a script and another at the prompt. ``show`` prints the verb's tables, as
the command line does; the answers are typed (``quantmark.api.results``)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.markup import escape

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
#: run.py's modes that are not one test or a repeat set (run.py itself runs them)
OTHER_RUN_MODES = ("list_suts", "ensemble", "audit", "all_tests")


@contextlib.contextmanager
def printing(console: Any, show: bool) -> Iterator[None]:
    """The verb's console silenced unless ``show``."""
    before = console.quiet
    console.quiet = not show
    try:
        yield
    finally:
        console.quiet = before


def one_test(args: argparse.Namespace) -> bool:
    """The flags ask for one LoadGen test or a repeat set (what ``run`` answers)."""
    return (not any(getattr(args, name) for name in OTHER_RUN_MODES)
            and bool(args.scenario or args.sut or args.model))


def run(args: argparse.Namespace, show: bool) -> RunResult:
    """One test (``repeats``: a set of them) in its own process; the runs as LoadGen's logs
    tell them."""
    from quantmark.commands import run as verb

    if not one_test(args):
        mode = next((name for name in OTHER_RUN_MODES if getattr(args, name)), None)
        if mode is None:
            raise UserError("quantmark.run() runs one test or a repeat set: give scenario, sut "
                            "or model (the built-in default job is python run.py)")
        flag = f"--{mode.replace('_', '-')}"
        raise UserError(f"quantmark.run() runs one test or a repeat set; {flag} is run.py's "
                        f"(python run.py {flag} ...)")
    with printing(verb.console, show):
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


def compare(args: argparse.Namespace, show: bool) -> Comparison:
    """B's runs against A's, from LoadGen's logs: the ratio, its interval and verdict."""
    from quantmark.commands import compare as verb
    from quantmark.run import comparison

    side_a, side_b, ratio = comparison.compare(args.a, args.b, args.paired)
    if show:
        comparison.show(verb.console, side_a, side_b, ratio)
    sides = (("A", side_a), ("B", side_b))
    left_out = tuple(f"{name}: left out {run}: {why}" for name, side in sides
                     for run, why in side.left_out)
    flagged = tuple(f"{name}: {why}" for name, side in sides for _, why in side.flagged)
    return Comparison(ratio, tuple(map(Path, side_a.runs)), tuple(map(Path, side_b.runs)),
                      left_out + flagged, flagged)


def sweep(args: argparse.Namespace, show: bool) -> SweepResult:
    """Run (or resume) the sweep, cells in their own processes, and write its report."""
    from quantmark.commands import report as report_verb
    from quantmark.commands import sweep as verb

    with printing(verb.console, show), printing(report_verb.console, show):
        outcome = verb.sweep(args)
    return SweepResult(Path(outcome.root), dict(outcome.counts), int(outcome.ran))


def history(args: argparse.Namespace, show: bool) -> History:
    """Each matching series' jobs from the store (and ``plot``: their trend drawn)."""
    from quantmark.commands import history as verb

    points, qualities, nothing = verb.matching(args)
    if nothing:
        if show:
            verb.console.print(nothing, soft_wrap=True)
        return History((), nothing=nothing)
    note = verb.unchecked_note(points)
    with printing(verb.console, show):
        verb.show(points)
        verb.show_quality(qualities)
        if note:
            verb.console.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
        plot = verb.plot(args.plot, points, qualities) if args.plot else None
    return History(tuple(points), note, tuple(qualities), plot)


def regress(args: argparse.Namespace, show: bool) -> Regression:
    """The verdict of each selected series (``json``: also written there)."""
    from quantmark.commands import regress as verb

    verdicts = verb.judge(args)
    with printing(verb.console, show):
        verb.show(verdicts, args.fdr)
        if args.json:
            verb.write_json(args.json, verdicts, args)
    return Regression(tuple(verdicts))


def recommend(args: argparse.Namespace, show: bool) -> Recommendation:
    """The search on this machine and its answer (a fleet's is ``run.py recommend
    --cluster``)."""
    from quantmark.commands import recommend as verb

    if args.cluster:
        raise UserError("quantmark.recommend() searches this machine; a fleet's search is "
                        "run.py recommend --cluster (one answer per node)")
    with printing(verb.console, show):
        model = verb.check_args(args)
        record = verb.answer_here(args, model, verb.search_config(args))
    return Recommendation(record, verb.folder_of(args, model))


def profile(args: argparse.Namespace, show: bool) -> ProfileRecord:
    """Where the SUT's time goes, layer by layer; the record its folder holds."""
    from quantmark.commands import profile as verb
    from quantmark.ground.records import ProfileRecord

    with printing(verb.console, show):
        folder = verb.profile(args)
    return _written(folder, ProfileRecord)


def diagnose(args: argparse.Namespace, show: bool) -> DiagnosisRecord:
    """Where the INT8 SUT loses precision, and the way back; the record its folder holds."""
    from quantmark.commands import diagnose as verb
    from quantmark.ground.records import DiagnosisRecord

    with printing(verb.console, show):
        folder = verb.diagnose(args)
    return _written(folder, DiagnosisRecord)


def _written(folder: Path, kind: type[JobRecordT]) -> JobRecordT:
    """The record of ``kind`` a verb wrote in ``folder``, read the one way records are."""
    from quantmark.ground.records import RESULTS, load_record

    found = load_record(folder / RESULTS, kind.KIND)
    assert isinstance(found, kind)
    return found
