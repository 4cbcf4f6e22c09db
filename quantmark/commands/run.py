"""``run.py [run] ...``: the verb when none is named. One LoadGen test in its own process, or
around it: ``--repeats`` / ``--until-stable`` (the median and its interval), ``--audit`` (one
compliance test, judged), ``--all-tests`` (what a submitter runs), ``--ensemble``,
``--list-suts``; and with no scenario, SUT or model, the built-in default job.

The repeat sets, the default job and the ensemble runs are imported when asked for: they
need scipy, which the lean Raspberry Pi install, running single tests, does not have."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from rich.markup import escape

from quantmark.audit.configs import AUDIT_TESTS
from quantmark.audit.verify import require_references, verify
from quantmark.commands import options
from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError
from quantmark.ground.layout import scenario_dir, system_id
from quantmark.models.exported import exported_model
from quantmark.models.workload import file_model_name
from quantmark.models.zoo import DEFAULT_MODEL
from quantmark.report import console_tables as tables
from quantmark.run.checks import check_output_writable, validate
from quantmark.run.interference import describe
from quantmark.run.launch import LaunchResult, launch_or_raise
from quantmark.run.validity import invalid_text
from quantmark.store.recording import record as record_in_store
from quantmark.sut.registry import SUTS, availability

NAME = "run"
HELP = "one benchmark (the verb when none is named; no flags: the built-in default job)"
DESCRIPTION = "MLPerf-style inference benchmarks."

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", help="SingleStream, MultiStream, Offline or Server")
    parser.add_argument("--sut", help="system under test, e.g. ort-int8 (see --list-suts)")
    parser.add_argument("--mode", default="performance", help="performance or accuracy")
    group = options.model_and_dataset(parser)
    group.add_argument("--task", default="",
                       help="the model's task (classification, detection ...): read from the "
                            "model file's outputs; given, it must agree")
    options.model_shape(parser)
    options.run_settings(parser)
    options.output(parser)
    options.threads(parser)
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--quick", action="store_true", help="short development run (default)")
    runs.add_argument("--official", action="store_true",
                      help="mlperf.conf untouched (600 s minimum), user.conf as given")
    parser.add_argument("--audit", choices=AUDIT_TESTS,
                        help="run one compliance test and judge it against the normal runs")
    parser.add_argument("--all-tests", action="store_true",
                        help="performance, accuracy, TEST01 and TEST04, each in its own process")
    parser.add_argument("--list-suts", action="store_true", help="list SUTs and exit")
    ensemble = parser.add_argument_group("ensembles")
    ensemble.add_argument("--ensemble", metavar="MODEL@SUT,...",
                          help="an ensemble of co-located models in one process, e.g. "
                               "efficientnet-lite0@ort-int8,efficientnet-lite1@ov-int8; "
                               "performance runs each member alone too (the baseline)")
    ensemble.add_argument("--ensemble-mode", default="both",
                          help="sequential (one worker runs the members in turn), concurrent "
                               "(one thread per member, cores split) or both (default)")
    ensemble.add_argument("--combine", default="mean",
                          help="mean of the members' softmax probabilities (default) or vote")
    ensemble.add_argument("--no-baselines", action="store_true",
                          help="with --ensemble: skip the runs of each member alone")
    repeats = parser.add_argument_group("repeats")
    repeats.add_argument("--repeats", type=int, default=None,
                         help="run the performance test N times, each in a fresh process, and "
                              "print the median with its 95%% interval (default 1; the default "
                              "job: 3, interleaved)")
    repeats.add_argument("--until-stable", type=float, default=None, metavar="PCT",
                         help="repeat (at least 3 runs) until the interval's half-width is "
                              "under PCT percent of the median, or --max-repeats runs were made")
    repeats.add_argument("--max-repeats", type=int, default=10,
                         help="cap on --until-stable's runs (default 10)")


def main(args: argparse.Namespace) -> int:
    """The modes the Python API does not answer (one test or a repeat set is
    ``quantmark.run()``'s, and the command line runs it through that: ``quantmark.api``);
    exit 1 when a compliance check failed."""
    if args.list_suts:
        list_suts()
    elif args.ensemble:
        return run_ensemble(args, config_from_args(args, ensemble=True))
    elif args.all_tests:
        return 0 if all_tests(config_from_args(args)) else 1
    elif args.audit:
        return 0 if run_audit(config_from_args(args)) else 1
    elif not args.scenario and not args.sut and not args.model:
        default_job(args.output, args.repeats)
    else:
        raise UserError("one test or a repeat set runs through quantmark.api "
                        "(quantmark.run(), or run.py)")
    return 0


def config_from_args(args: argparse.Namespace, ensemble: bool = False) -> RunConfig:
    """The run the flags ask for; with ``ensemble`` the base the ensemble's runs start from
    (``--ensemble`` names the models and SUTs)."""
    if ensemble:
        if args.sut or args.model or args.model_path:
            raise UserError("--ensemble names each member's model and SUT (MODEL@SUT,...): "
                            "drop --sut, --model and --model-path")
        if not args.scenario:
            raise UserError("give --scenario with --ensemble, e.g. --scenario Offline")
        args.sut, args.model = "ensemble", DEFAULT_MODEL  # replaced by the ensemble's runs
    elif not args.scenario or not args.sut:
        raise UserError("give both --scenario and --sut (or no flags for the default job)")
    batch = args.batch_size
    if batch is None:
        batch = 8 if args.scenario in ("Offline", "MultiStream") else 1
    return RunConfig(
        scenario=args.scenario, sut=args.sut,
        model=(args.model or exported_model(args.model_path)
               or file_model_name(args.model_path) or DEFAULT_MODEL),
        mode=args.mode, quick=not args.official, model_path=args.model_path,
        dataset_path=args.dataset_path, calibration_list=args.calibration_list,
        user_conf=args.user_conf, output=args.output, batch_size=batch,
        threads=args.threads, workers=args.workers, audit=args.audit or "",
        sut_options=options.key_values(args.sut_option), task=args.task or "",
        **options.shape_fields(args),
    )


def list_suts() -> list[dict[str, Any]]:
    """Every known SUT with whether it can run here (and why not)."""
    rows = []
    for info in SUTS.values():
        ok, reason = availability(info)
        rows.append({"name": info.name, "framework": info.framework,
                     "precision": info.precision, "device": info.device, "available": ok,
                     "reason": reason})
    console.print(tables.suts_table(rows))
    return rows


def run_one(config: RunConfig) -> LaunchResult:
    """Validate, run one test in its own process, print its summary line."""
    validate(config)
    result = launch_or_raise(config)
    record_in_store(result.run_dir)  # after the launcher added the run's interference
    print_run(result)
    return result


def print_run(result: LaunchResult) -> None:
    """A finished run's summary line, why it is INVALID and whether it was disturbed."""
    results = result.results
    invalid = (invalid_text(results)
               if results.get("summary", {}).get("validity") == "INVALID" else "")
    tables.print_run(console, results, result.run_dir, invalid,
                     describe(results.get("interference")))


def run_audit(config: RunConfig) -> bool:
    """Run one compliance test in its own process and working folder, then judge it against
    the normal runs already in the results folder. True when every check passed."""
    if config.mode != "performance":
        raise UserError("--audit runs in performance mode (its audit.config sets the mode); "
                        "drop --mode accuracy")
    validate(config)
    base = scenario_dir(config.output, config.system_id or system_id(config.sut), config.model,
                        config.scenario)
    require_references(base, config.audit)  # before minutes of running, not after
    run_one(config)
    outcome = verify(base, config.audit)
    for check, passed in outcome.items():
        verdict = "[green]TEST PASS[/]" if passed else "[red]TEST FAIL[/]"
        console.print(f"{config.audit} {check}: {verdict}  "
                      f"({escape(str(base / config.audit / f'verify_{check}.txt'))})")
    return all(outcome.values())


def all_tests(config: RunConfig) -> bool:
    """What a submitter runs: accuracy, performance, TEST01 and TEST04, each in its own process.

    A failing audit does not stop the others; every finished run stays on disk.
    """
    if config.audit or config.mode != "performance":
        raise UserError("--all-tests runs every mode and audit itself; drop --mode and --audit")
    validate(config)
    # accuracy first: it builds (and caches) the artifact, so the three timed runs that are
    # compared with each other all start from the cache, none of them after a conversion
    run_one(replace(config, mode="accuracy"))
    run_one(replace(config, mode="performance"))
    passed = [run_audit(replace(config, audit=test)) for test in AUDIT_TESTS]
    console.print("all tests finished: " + ("every compliance check passed" if all(passed) else
                                             "[red]a compliance check FAILED[/]"))
    return all(passed)


def default_job(output: str, repeats: int | None = None) -> list[Any]:
    """Offline and SingleStream for ort-fp32 and ort-int8 on the pretrained default model,
    repeated and interleaved (``quantmark.run.default_job``)."""
    from quantmark.run import default_job as job  # scipy: see the module's docstring

    check_output_writable(output)
    base = RunConfig(scenario="Offline", sut=job.BASELINE, model=DEFAULT_MODEL, output=output)
    validate(base)
    return job.run(base, run_one, console, job.REPEATS if repeats is None else repeats)


def run_repeated(config: RunConfig, repeats: int, until_stable: float | None,
                 max_repeats: int) -> Any:
    """``--repeats N`` / ``--until-stable``: the test N times in fresh processes, then its
    median and interval over the VALID runs, the others named; none VALID: no figure, exit 3
    (the runs did not measure what was asked)."""
    from quantmark.run.repeated import check_repeats, run_set  # scipy: the module docstring

    check_repeats(repeats, until_stable, max_repeats)
    if config.mode != "performance" or config.audit:
        raise UserError("--repeats and --until-stable repeat performance runs; drop --mode "
                        "accuracy / --audit")
    validate(config)
    done = run_set(config, run_one, repeats, until_stable, max_repeats)
    for result, why in done.left_out():
        console.print(f"[yellow]left out: repeat {result.results.get('repeat', {}).get('index')}"
                      f" ({escape(str(result.run_dir))}): {escape(why)}[/]",
                      soft_wrap=True)
    interval, note = done.interval(), done.left_out_note()
    if interval is None:
        raise SutError(f"{config.sut} {config.scenario}: {note}: no run measured what was asked, "
                       "so there is no figure (see the lines above)")
    console.print(tables.repeat_set_line(config.sut, config.scenario, interval, done.latency,
                                         note, len(done.disturbed())))
    return done


def run_ensemble(args: argparse.Namespace, base: RunConfig) -> int:
    """``--ensemble``: performance runs each member alone and the ensemble in each mode,
    repeated and interleaved, then the table; accuracy runs the ensemble once and shows every
    member's top-1 beside its own."""
    from quantmark.run import ensemble_runs  # scipy: see the module's docstring

    ensemble_runs.run(args, base, run_one, console)
    return 0
