"""``run.py recommend --scenario S (--model M | --model-path F) [limits] [--budget MINUTES]``:
what to deploy here. Flags -> the search space (``recommend.space``), the measurer
(``recommend.measure.LoadGenMeasurer``) and ``recommend.search.search`` -> the answer
(``recommend.answer``): one screen, ``recommendation.json`` and ``pareto.png``.

Written as ``<output>/<host>-recommend/<model>/recommend-<scenario>/``: ``evidence.json`` after
every measurement (Ctrl-C loses nothing finished; the same command resumes, another is refused
in one line: ``recommend.journal``), the runs under ``runs/``, then the answer. Exit 0 with an
answer (a winner, a tie or "cannot tell apart within the budget", which names any candidate
the budget never raced: none is recommended over one it never measured), 1 when no candidate
meets the limits (the search finished; the answer is that none fits), 2 for bad flags (a
budget below one run of each SUT's base candidate among them, with the minimum).

With ``--cluster``, every node of a Ray cluster searches for itself, each its own answer in
``<output>/<node>-recommend/...`` (``recommend.cluster``)."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape

from quantmark.commands import options
from quantmark.ground.errors import UserError
from quantmark.ground.layout import system_id
from quantmark.ground.locks import sole_writer
from quantmark.ground.records import RecommendationRecord
from quantmark.recommend.candidates import (
    DEFAULT_RECOVER,
    OBJECTIVE_NAMES,
    OBJECTIVES,
    Candidate,
    Limits,
)
from quantmark.report import console_tables as tables
from quantmark.report.quality import task_section
from quantmark.run.checks import check_output_writable, validate_inputs

NAME = "recommend"
HELP = "what to deploy here: the SUT and settings that meet your limits, with the evidence"
DESCRIPTION = ("Search every SUT that runs here and the settings that change its speed (batch "
               "size, threads, each SUT's own options) with rounds of short interleaved runs, "
               "dropping a candidate only when its interval is clearly worse than the best's or "
               "breaks a limit, and say which to deploy: its figure and accuracy change with "
               "their intervals, what each limit cost, and the commands that reproduce it; or "
               "that the best are tied, or that none meets the limits. Resumable.")
DEFAULT_BUDGET_MIN = 15.0
#: each short run's LoadGen duration: on 2 cores a Lite0 SingleStream run of 5 s holds ~1800
#: queries, and its start (framework, cached artifact, warm-up) adds ~3-5 s of wall time
DEFAULT_RUN_SECONDS = 5.0
#: one accuracy run's expected wall time until a run recorded the dataset's size and a rate
#: (then ``race.Race.accuracy_run_estimate`` prices each SUT's; the built-in 1536 crops:
#: 10-120 s on 2 cores, the FP32 references run with the first)
ACCURACY_SECONDS_GUESS = 60.0
LOCK = ".recommend.lock"
#: flags that do not change what the search measures: a rerun may change them and resume
NOT_SETTINGS = ("output", "budget", "cluster")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, choices=tuple(OBJECTIVES),
                        help="the scenario to deploy for; it sets the objective: latency for "
                             "SingleStream and MultiStream, throughput for Offline and Server")
    limits = parser.add_argument_group("limits (any combination; none: the fastest wins)")
    limits.add_argument("--max-accuracy-drop", type=float, metavar="PTS",
                        help="points of the model's quality metric (top-1 for a classifier, "
                             "mAP for a detector: its task's) the candidate may lose against "
                             "the best FP32 of any framework (its whole interval must not pass "
                             "it)")
    limits.add_argument("--latency", type=float, metavar="MS",
                        help="the scenario's latency percentile bound (p90 SingleStream ...)")
    limits.add_argument("--min-throughput", type=float, metavar="QPS", help="samples/s at least")
    limits.add_argument("--max-memory", type=float, metavar="MB", help="peak RSS of the run")
    limits.add_argument("--max-model-size", type=float, metavar="MB",
                        help="the SUT's model on disk")
    search = parser.add_argument_group("the search")
    search.add_argument("--objective", choices=OBJECTIVE_NAMES,
                        help="what to optimize (default: the scenario's)")
    search.add_argument("--budget", type=float, default=DEFAULT_BUDGET_MIN, metavar="MINUTES",
                        help=f"minutes of runs (default {DEFAULT_BUDGET_MIN:g}); a rerun with "
                             "a larger budget continues the search")
    search.add_argument("--suts", help="comma-separated SUT names, or cpu / gpu / all "
                                       "(default: every SUT that runs here)")
    search.add_argument("--batch-sizes", help="comma-separated, e.g. 1,8,32 (default: the "
                                              "scenario's)")
    search.add_argument("--settings", action="append", metavar="KEY=V1,V2",
                        help="a SUT option's values to try, e.g. ov_api=sync,async (repeatable)")
    search.add_argument("--seconds", type=float, default=DEFAULT_RUN_SECONDS,
                        help=f"each short run's LoadGen duration (default "
                             f"{DEFAULT_RUN_SECONDS:g})")
    search.add_argument("--recover", type=int, default=DEFAULT_RECOVER, metavar="K",
                        help="where an INT8 SUT breaks --max-accuracy-drop, also race it with "
                             "its worst 1, 2, 4 ... K layers (run.py diagnose's ranking) kept "
                             f"in float (default {DEFAULT_RECOVER}; 0: never)")
    options.threads(search, default=None)
    parser.add_argument("--cluster", metavar="auto|HOST:PORT|ray://HOST:PORT",
                        help="search on every node of this Ray cluster, each node for itself "
                             "(start them with run.py node): one answer per node, in "
                             "<output>/<node>-recommend/")
    options.output(parser)
    options.model_and_dataset(parser)
    options.model_shape(parser)


def task_of(args: argparse.Namespace) -> Any:
    """The model's task (``quantmark.tasks``): the owner of a built-in ``--model``, or the
    task the ``--model-path`` file's outputs belong to; classification where none claims it."""
    from quantmark.tasks.catalog import task_for

    return task_for(argparse.Namespace(task="", model=args.model or "",
                                       model_path=args.model_path))


def limits_of(args: argparse.Namespace, metric_name: str = "top-1") -> Limits:
    """The limits the flags give, each checked (a negative or zero bound is a typo)."""
    drop = args.max_accuracy_drop
    if drop is not None and not (math.isfinite(drop) and drop >= 0):
        raise UserError(f"--max-accuracy-drop {drop:g}: give points of {metric_name} at or "
                        "above 0, e.g. 1")
    for flag, value in (("--latency", args.latency), ("--min-throughput", args.min_throughput),
                        ("--max-memory", args.max_memory),
                        ("--max-model-size", args.max_model_size)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"{flag} {value:g}: give a bound above 0 (a finite number; leave "
                            "the flag out for no bound)")
    return Limits(max_accuracy_drop=args.max_accuracy_drop, latency_ms=args.latency,
                  min_throughput=args.min_throughput, max_memory_mb=args.max_memory,
                  max_model_size_mb=args.max_model_size)


def check_args(args: argparse.Namespace) -> str:
    """Every flag checked before a minute is spent (one line each); the model's name."""
    from quantmark.models.workload import file_model_name
    from quantmark.models.zoo import DEFAULT_MODEL
    from quantmark.tasks.catalog import builtin_models

    if not (args.model or args.model_path):
        raise UserError("name the model: --model M (a built-in one) or --model-path F (yours)")
    if args.model and args.model not in builtin_models():  # every task's (minilm's too)
        raise UserError(f"unknown model {args.model!r}: choose one of "
                        f"{', '.join(builtin_models())}")
    # nan, inf and 0 measure nothing (an endless budget would never stop the search)
    if not (math.isfinite(args.budget) and args.budget > 0):
        raise UserError(f"--budget {args.budget:g}: give minutes above 0 (a finite number), "
                        "e.g. 15")
    if not (math.isfinite(args.seconds) and args.seconds > 0):
        raise UserError(f"--seconds {args.seconds:g}: give seconds above 0 (a finite number), "
                        "e.g. 5")
    if args.threads is not None and args.threads < 0:
        raise UserError(f"--threads {args.threads}: give 0 (the framework's default) or more")
    task = task_of(args)
    limits_of(args, task.metric.name)
    shape = options.shape_fields(args)
    # another task's dataset (a detector's COCO or YOLO folder) is its task's to read
    image_folder = task.name == "classification"
    validate_inputs(args.dataset_path if image_folder else None, args.calibration_list, None)
    check_output_writable(args.output)
    model = str(args.model or file_model_name(args.model_path) or DEFAULT_MODEL)
    check_workload(args, task, model, shape)
    return model


def check_workload(args: argparse.Namespace, task: Any, model: str, shape: dict) -> None:
    """The model as every run will resolve it (its size, classes and recipe: a short side
    below the input size ...) and, for a classifier, its images in memory and in the cache:
    what every candidate's run would refuse is one line now, not one failed run per SUT. A
    built-in model of another task is its runs' to build (a detector's export)."""
    from quantmark.ground.config import RunConfig
    from quantmark.qsl.cache import check_set_fits
    from quantmark.qsl.footprint import check_memory
    from quantmark.run.checks import MEMINFO, available_memory

    classifier = task.name == "classification"
    if not classifier and not args.model_path:
        return
    config = RunConfig(scenario=args.scenario, sut="", model=model, model_path=args.model_path,
                       dataset_path=args.dataset_path, **shape)
    spec = task.resolve_spec(config)
    if not classifier or args.cluster:  # a fleet's nodes judge their own memory and disk
        return
    # the images (the user's, or the built-in set) opened once here: their labels checked
    # against the model's classes (a 10-class model cannot score the built-in 1000-class set)
    dataset = task.open_dataset(config, spec)
    if args.dataset_path:  # and fitted to the model
        check_set_fits(spec, dataset, available_memory(MEMINFO))
    else:  # the built-in set holds a performance set at least: its size bounds what loads
        check_memory(spec, spec.performance_sample_count, available_memory(MEMINFO))


def folder_of(args: argparse.Namespace, model: str) -> Path:
    return Path(args.output) / system_id(NAME) / model / f"recommend-{args.scenario}"


def make_space(args: argparse.Namespace, model: str) -> list[Candidate]:
    """The candidates (``recommend.space``, which checks --suts, --batch-sizes and --settings
    against the registry): replaced by the tests' stand-in space."""
    from quantmark.recommend.space import space

    return space(args.scenario, model, **space_settings(args))


def space_settings(args: argparse.Namespace) -> dict[str, Any]:
    """How the flags narrow the space (``recommend.space.space``'s keywords)."""
    return {"suts": args.suts, "batch_sizes": args.batch_sizes,
            "threads": None if args.threads is None else [args.threads],
            "settings": args.settings}


def make_measurer(args: argparse.Namespace, model: str, folder: Path) -> Any:
    """The real runs (``recommend.measure``, under ``folder/runs``): replaced by the tests'
    stand-in measurer."""
    from quantmark.recommend.measure import LoadGenMeasurer

    return LoadGenMeasurer(args.scenario, model, folder, **measurer_settings(args))


def measurer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``LoadGenMeasurer``'s keywords from the flags: the model file, dataset and shape."""
    shape = options.shape_fields(args)
    run_settings: dict[str, Any] = {"model_path": args.model_path,
                                    "dataset_path": args.dataset_path,
                                    "num_classes": shape["num_classes"],
                                    "labels": shape["labels"],
                                    "calibration_list": args.calibration_list}
    if shape["preprocess"]:
        run_settings["preprocess"] = shape["preprocess"]
    if shape["input_size"]:
        run_settings["image_sizes"] = [shape["input_size"]]
    # a text model's sequence length, padding and tokenizer reach every run
    run_settings.update({key: shape[key] for key in ("seq_len", "padding", "tokenizer")
                         if shape[key]})
    return run_settings


def reproduce(candidate: Candidate, args: argparse.Namespace, model: str,
              run_dirs: list[str]) -> dict[str, str | None]:
    """The ``run.py`` line of ``candidate`` and the vendor tool's, where its runs record one."""
    from quantmark.recommend.measure import run_command, vendor_command

    vendor = next((found for run_dir in reversed(run_dirs)
                   if (found := vendor_command(run_dir))), None)
    return {"run": run_command(candidate, args.scenario, model, model_path=args.model_path,
                               dataset_path=args.dataset_path), "vendor": vendor}


def search_config(args: argparse.Namespace) -> Any:
    """The search's objective (the scenario's unless --objective), limits and budget."""
    from quantmark.recommend.search import SearchConfig

    if args.recover < 0:
        raise UserError(f"--recover {args.recover}: give 0 or more layers, e.g. 8")
    return SearchConfig.for_scenario(args.scenario, args.objective, limits=limits_of(args),
                                     budget_s=args.budget * 60, run_seconds=args.seconds,
                                     accuracy_seconds=ACCURACY_SECONDS_GUESS,
                                     recover=args.recover)


@contextmanager
def progress(out: Any) -> Iterator[Callable[[int, int, float, float, str], None]]:
    """``search``'s ``on_progress``: a rich bar with the search's own ETA on a terminal;
    elsewhere (CI, a log file) one flushed line per update."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if out.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("spent {task.fields[spent]} ETA {task.fields[eta]}"),
                      console=out) as bar:
            task = bar.add_task("recommend", total=None, spent="0:00:00", eta="?")

            def update(done: int, planned: int, spent_s: float, eta_s: float,
                       message: str) -> None:
                bar.update(task, completed=done, total=max(planned, done),
                           description=escape(message or "recommend"), spent=tables.clock(spent_s),
                           eta=tables.clock(eta_s))

            yield update
        return

    def line(done: int, planned: int, spent_s: float, eta_s: float, message: str) -> None:
        out.print(f"[{done}/{planned}, spent {tables.clock(spent_s)}, ETA {tables.clock(eta_s)}] "
                  f"{escape(message)}", soft_wrap=True)
        out.file.flush()

    yield line


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the search measures with: every flag but those that only say how long or where."""
    return {key: value for key, value in sorted(vars(args).items()) if key not in NOT_SETTINGS}


def main(args: argparse.Namespace) -> int:
    """``--cluster``: each node's search (on this machine the search is
    ``quantmark.recommend()``'s, and the command line runs it through that:
    ``quantmark.api``)."""
    if not args.cluster:
        raise UserError("a search on this machine runs through quantmark.api "
                        "(quantmark.recommend(), or run.py recommend)")
    return on_cluster(args, check_args(args), search_config(args))


def answer_here(args: argparse.Namespace, model: str, config: Any) -> RecommendationRecord:
    """Search (or resume) on this machine, write the answer and print it; its record."""
    from quantmark.recommend import answer
    from quantmark.recommend.journal import Journal, RecordingMeasurer, resumable
    from quantmark.recommend.search import search

    folder = folder_of(args, model)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with sole_writer(folder, LOCK, "search"):
        journal = Journal(folder, settings_of(args))
        known = journal.load()
        candidates = make_space(args, model)
        if not candidates:
            raise UserError("no candidate can run here for these flags (see python run.py "
                            "--list-suts); widen --suts, --batch-sizes or --settings")
        resumed = resumable(known, candidates)
        measurer = RecordingMeasurer(make_measurer(args, model, folder), journal, resumed)
        if resumed:
            console.print(f"resuming {escape(str(folder))}: {measurer.measured_runs} runs of "
                          f"{len(resumed)} candidates already measured")
        try:
            with progress(console) as on_progress:
                outcome = search(candidates, measurer, config, on_progress=on_progress,
                                 resume=resumed, checkpoint=measurer.checkpoint)
        except KeyboardInterrupt:
            console.print(f"interrupted: {measurer.measured_runs} finished runs are kept in "
                          f"{escape(str(journal.path))}; run the same command to resume",
                          soft_wrap=True)
            raise
        journal.save(outcome.evidence or list(measurer.evidence.values()))
    shown = [outcome.recommended] if outcome.recommended else list(outcome.tied)
    commands = {item.candidate.key: reproduce(item.candidate, args, model,
                                              [run.run_dir for run in item.runs if run.valid])
                for item in shown}
    task = task_of(args)
    record = answer.build_record(outcome, model=model, scenario=args.scenario,
                                 commands=commands, config=settings_of(args), started=started,
                                 min_runs=config.min_runs,
                                 task=task_section(task.metric, task.name))
    record = answer.write(folder, record)
    answer.show(console, record)
    console.print(f"written to {escape(str(folder))}: recommendation.json, evidence.json"
                  + (", pareto.png" if record.figure else ""), soft_wrap=True)
    return record


def on_cluster(args: argparse.Namespace, model: str, config: Any) -> int:
    """``--cluster``: every node of the Ray cluster searches for itself, with these flags
    and this budget (``recommend.cluster``); the answers' commands are made here."""
    import dataclasses

    from quantmark.recommend.cluster import check_address, recommend_on_fleet
    from quantmark.recommend.cluster_node import FleetJob

    job = FleetJob(cluster=check_address(args.cluster), output=str(args.output), model=model,
                   scenario=args.scenario, settings=settings_of(args),
                   config=dataclasses.asdict(config), space=space_settings(args),
                   measurer=measurer_settings(args))
    return recommend_on_fleet(job, console, lambda candidate, run_dirs: reproduce(
        candidate, args, model, run_dirs))
