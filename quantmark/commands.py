"""What run.py dispatches to: list SUTs, run one test, audits, the default job, the report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError
from quantmark.run.checks import check_output_writable, validate, validate_inputs
from quantmark.run.launch import LaunchResult, launch_or_raise
from quantmark.run.validity import invalid_text

# Piped output (CI, files) gets a wide console instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)


def list_suts() -> list[dict[str, Any]]:
    """Every known SUT with whether it can run here (and why not)."""
    from quantmark.sut.registry import SUTS, availability

    rows = []
    table = Table(title="quantmark SUTs")
    for column in ("SUT", "framework", "precision", "device", "runs here", "why not"):
        table.add_column(column)
    for info in SUTS.values():
        ok, reason = availability(info)
        rows.append({"name": info.name, "framework": info.framework,
                     "precision": info.precision, "device": info.device, "available": ok,
                     "reason": reason})
        table.add_row(info.name, info.framework, info.precision, info.device,
                      "[green]yes[/]" if ok else "[red]no[/]", escape(reason))
    console.print(table)
    return rows


def run_one(config: RunConfig) -> LaunchResult:
    """Validate, run one test in its own process, print its summary line."""
    validate(config)
    result = launch_or_raise(config)
    _print_run(result)
    return result


def run_audit(config: RunConfig) -> bool:
    """Run one compliance test in its own process and working folder, then judge it against
    the normal runs already in the results folder. True when every check passed."""
    from quantmark.audit.verify import require_references, verify
    from quantmark.ground.layout import scenario_dir, system_id

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
    from quantmark.audit.configs import AUDIT_TESTS

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


def submission(args: Any) -> Path:
    """Check the runs and write the submission tree; list what the submitter must still fill."""
    from quantmark.submission.package import package

    packaged = package(args.results, submitter=args.submitter, division=args.division,
                       output=args.output, system_file=args.system_file, status=args.status,
                       system_type=args.system_type)
    for name in packaged.scenarios:
        console.print(f"packaged {escape(name)}")
    for system, fields in packaged.systems.items():
        if fields:
            console.print(f"[yellow]systems/{escape(system)}.json: fill in {', '.join(fields)} "
                          "(pass --system-file FILE with them)[/]")
    console.print(f"submission tree written to {escape(str(packaged.root))}")
    return packaged.root


def sweep(args: Any) -> int:
    """Run (or resume) a sweep, then write its report. Exit 0 when every cell ran or was
    explained as unavailable; 1 when some failed (they are rows in the report)."""
    from quantmark.sweep.driver import run_sweep
    from quantmark.sweep.plan import build_spec, load_sweep_file

    settings = load_sweep_file(args.file) if args.file else {}
    flags = {k: v for k, v in vars(args).items()
             if v is not None and k not in ("file", "retry_failed")}
    spec = build_spec({**settings, **flags})
    validate_inputs(spec.dataset_path, spec.calibration_list, spec.user_conf)
    check_output_writable(spec.output)
    outcome = run_sweep(spec, retry_failed=args.retry_failed, console=console)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(outcome.counts.items()))
    console.print(f"sweep {escape(str(outcome.root))}: {counts} ({outcome.ran} ran now)")
    report([str(outcome.root)], None)
    failed = sum(n for status, n in outcome.counts.items() if status not in ("ok", "unavailable"))
    return 1 if failed else 0


def export(args: Any) -> list[Path]:
    """Export .tflite artifacts for a device, then say how to run them there."""
    from quantmark.models.exported import record_path
    from quantmark.models.zoo import DEFAULT_MODEL
    from quantmark.run import tflite_export as exporting

    suts = exporting.parse_suts(args.sut)
    model = args.model or DEFAULT_MODEL
    validate_inputs(args.dataset_path, args.calibration_list, None)
    check_output_writable(args.output)
    written = exporting.export(suts, model, args.output, args.model_path, args.dataset_path,
                               args.calibration_list)
    for path in written:
        console.print(f"exported {escape(str(path))} (+ {escape(record_path(path).name)})",
                      soft_wrap=True)
    out = Path(args.output)
    dataset = out / exporting.DATASET_DIR
    dataset_flag = (f"--dataset-path {dataset}" if dataset.is_dir() and not args.dataset_path
                    else "--dataset-path YOUR_IMAGENET_FOLDER")
    console.print(f"copy {escape(str(out))} to the device, then run there, e.g.:\n  python run.py "
                  f"--scenario SingleStream --sut {suts[-1]} --model-path "
                  f"{escape(str(written[-1]))} {escape(dataset_flag)}", soft_wrap=True)
    return written


def train_bench(args: Any) -> list[Path]:
    """Train FP32 and AMP (each in its own process), then the summary of the output folder."""
    from quantmark.train import step_bench as bench

    frameworks = bench.parse_list(args.framework, bench.FRAMEWORKS, "--framework")
    precisions = bench.parse_list(args.precision, bench.PRECISIONS, "--precision")
    if args.device not in bench.DEVICES:
        raise UserError(f"--device {args.device!r}: choose auto, cpu or gpu")
    bench.check(frameworks, args.model, args.steps, args.warmup, args.batch_size,
                args.image_size, args.threads)
    check_output_writable(args.output)

    def done(r: dict[str, Any]) -> None:
        s = r["step_time_s"]
        console.print(f"{r['framework']} {escape(r['model'])} {r['precision']} "
                      f"({escape(r['executed_precision'])}, {r['device']}, batch "
                      f"{r['batch_size']}): step {s['median'] * 1e3:.1f} ms median, "
                      f"{r['images_per_s']:.2f} images/s, peak {r['memory']['peak_mb']:.0f} MB "
                      f"({r['memory']['kind']}), loss {r['loss_first']:.3f} -> "
                      f"{r['loss_last']:.3f}  ->  {escape(r['path'])}", soft_wrap=True)

    written = bench.run(frameworks, args.model, precisions, args.steps, args.warmup,
                        args.batch_size, args.image_size, args.device, args.output,
                        args.threads, done)
    table, files = bench.write_summary(args.output)
    _print_training(table, f"train-bench summary of {args.output}")
    console.print(f"written {', '.join(escape(str(p)) for p in files)}", soft_wrap=True)
    return written


def _print_training(rows: list[dict[str, Any]], title: str) -> None:
    from quantmark.report import training

    table = Table(title=escape(title))
    for column in training.HEADER:
        table.add_column(column, overflow="fold")
    for cells in training.cells(rows):
        table.add_row(*map(escape, cells))
    console.print(table)


def _print_run(result: LaunchResult) -> None:
    results = result.results
    summary = results.get("summary", {})
    audit = results["config"].get("audit")
    text = f"{results['config']['sut']} {summary.get('scenario')} {audit + ' ' if audit else ''}"
    accuracy = results.get("accuracy")
    if accuracy:
        text += (f"accuracy: {accuracy['top1']:.3f}% top-1 "
                 f"({accuracy['good']}/{accuracy['total']})")
    else:
        text += f"performance: {summary.get('validity')}"
        value, unit = summary.get("metric_value"), summary.get("metric_unit")
        if value is not None:
            text += f", {value / 1e6:.3f} ms" if unit == "ns" else f", {value:.2f} samples/s"
        if summary.get("validity") == "INVALID":
            text += f" ({invalid_text(results)})"
    repeat = results.get("repeat") or {}
    if (repeat.get("of") or 1) > 1:
        text += f" (repeat {repeat.get('index')} of {repeat.get('of')})"
    if results["config"].get("rerun"):
        text += f" (rerun: {results['config']['rerun'].get('why')})"
    console.print(f"{escape(text)}  ->  {result.run_dir}")
    from quantmark.run.interference import describe

    disturbed = describe(results.get("interference"))
    if disturbed:
        console.print(f"[bold red]{escape(disturbed)}[/]: this run's figures are not the "
                      "SUT's quiet speed; rerun on a quiet machine or read the median of "
                      "--repeats")
    thermal = results.get("machine", {}).get("thermal") or {}
    if thermal.get("throttled"):
        console.print(f"[yellow]the board throttled during this run "
                      f"({escape('; '.join(thermal.get('why') or []))}): its numbers are not its "
                      "steady speed; cool it and run again[/]")


def default_job(output: str, repeats: int | None = None) -> list[Any]:
    """Offline and SingleStream for ort-fp32 and ort-int8 on the pretrained default model,
    repeated and interleaved (``quantmark.run.default_job``)."""
    from quantmark.models.zoo import DEFAULT_MODEL
    from quantmark.run import default_job as job

    check_output_writable(output)
    base = RunConfig(scenario="Offline", sut=job.BASELINE, model=DEFAULT_MODEL, output=output)
    validate(base)
    return job.run(base, run_one, console, job.REPEATS if repeats is None else repeats)


def run_repeated(config: RunConfig, repeats: int, until_stable: float | None,
                 max_repeats: int) -> Any:
    """``--repeats N`` / ``--until-stable``: the test N times in fresh processes, then its
    median and interval over the VALID runs, the others named; none VALID: no figure, exit 3
    (the runs did not measure what was asked)."""
    from quantmark.run.repeated import check_repeats, run_set

    check_repeats(repeats, until_stable, max_repeats)
    if config.mode != "performance" or config.audit:
        raise UserError("--repeats and --until-stable repeat performance runs; drop --mode "
                        "accuracy / --audit")
    validate(config)
    done = run_set(config, run_one, repeats, until_stable, max_repeats)
    for result, why in done.left_out():
        console.print(f"[yellow]left out: repeat {result.results.get('repeat', {}).get('index')}"
                      f" ({escape(str(result.run_dir))}): {escape(why)}[/]", soft_wrap=True)
    interval, note = done.interval(), done.left_out_note()
    if interval is None:
        raise SutError(f"{config.sut} {config.scenario}: {note}: no run measured what was asked, "
                       "so there is no figure (see the lines above)")
    unit, scale, fmt = ((" ms", 1e6, "{:.3f}") if done.latency else (" samples/s", 1.0, "{:.2f}"))
    shown = replace(interval, point=interval.point / scale,
                    low=None if interval.low is None else interval.low / scale,
                    high=None if interval.high is None else interval.high / scale)
    disturbed = done.disturbed()
    console.print(f"{escape(config.sut)} {config.scenario}: median of {interval.n} "
                  f"{'VALID ' if note else ''}runs {shown.text(fmt)}{unit} (95% interval, "
                  f"{interval.method})" + (f"; [bold red]{escape(note)}[/]" if note else "")
                  + (f"; [bold red]{len(disturbed)} disturbed[/]" if disturbed else ""))
    return done


def run_ensemble(args: Any, base: RunConfig) -> int:
    """``--ensemble``: performance runs each member alone and the ensemble in each mode,
    repeated and interleaved, then the table; accuracy runs the ensemble once and shows every
    member's top-1 beside its own."""
    from quantmark.run import ensemble_runs as ensemble_job

    ensemble_job.run(args, base, run_one, console)
    return 0


def compare(a: str, b: str, paired: bool = False) -> Any:
    """Print the ratio of two sets of repeated runs with its interval and verdict."""
    from quantmark.run import comparison as comparing

    side_a, side_b, ratio = comparing.compare(a, b, paired)
    comparing.show(console, side_a, side_b, ratio)
    return ratio


def report(folders: list[str], output: str | None = None) -> None:
    """A sweep folder, several folders (merged) or any folder with ``--output``: the
    characterization report (Markdown, CSV, HTML with figures), as is a folder holding
    train-bench results (their "Training" section). One plain results folder: its percentile
    table (CSV, Markdown)."""
    for folder in folders:
        if not Path(folder).is_dir():
            raise UserError(f"report folder {folder} does not exist; pass a results or sweep "
                            "folder")
    from quantmark.report import diagnosis_section as diagnosis
    from quantmark.report import training

    is_sweep = any((Path(f) / "sweep.json").is_file() for f in folders)
    if len(folders) > 1 and output is None:
        raise UserError("several folders merge into one report: say where with --output DIR")
    diagnoses = diagnosis.load(folders)
    if is_sweep or len(folders) > 1 or output is not None or training.load(folders):
        _characterization(folders, Path(output or folders[0]))
    elif not diagnoses or any(Path(folders[0]).rglob("mlperf_log_detail.txt")):
        _percentile_table(folders[0])
    from quantmark.diagnosis.command import show, show_agreement

    for record in diagnoses:  # run.py diagnose's folders: their tables (and in the report)
        show(record)
    show_agreement(diagnoses)


def _characterization(folders: list[str], output: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # the lean Raspberry Pi install
        raise UserError("the characterization report draws its figures with matplotlib, which is "
                        "not installed: pip install 'quantmark[data]', or copy the folders to a "
                        "machine that has it and run python run.py report there")
    from quantmark.report.ensemble_tables import SPEED_HEADER, speed_cells
    from quantmark.report.ensembles import speed_tables
    from quantmark.report.intervals import (
        disturbed_lines,
        disturbed_text,
        speedup_text,
        verdicts_note,
    )
    from quantmark.report.sweep_report import metric_text, write
    from quantmark.report.table_formats import number

    check_output_writable(str(output))
    written = write(folders, output)
    study = written.study
    if not (study.configs or study.explained or study.training or written.diagnoses):
        raise UserError(f"no LoadGen runs (mlperf_log_detail.txt), train-bench results or "
                        f"diagnoses under {', '.join(folders)}")
    columns: dict[str, Callable[[Any], str]] = {  # header -> the named field it shows
        "system": lambda c: c.system, "model": lambda c: c.model,
        "scenario": lambda c: c.scenario,
        "SUT": lambda c: f"{c.sut} ⚠" if c.derived["disturbed"] else c.sut,
        "batch": lambda c: str(c.batch_size), "validity": lambda c: c.derived["validity"],
        "disturbed": disturbed_text, "official metric [95%]": metric_text,
        "x fw FP32": lambda c: speedup_text(c, "speedup_vs_fp32"),
        "top-1 %": lambda c: number(c.derived["top1"]),
        "agree FP32 %": lambda c: number(c.derived["agreement_with_fp32"], 1)}
    table = Table(title=f"characterization of {', '.join(folders)}")
    for header in columns:
        table.add_column(header)
    for config in study.configs:
        table.add_row(*(escape(cell(config)) for cell in columns.values()))
    if study.configs or study.explained:
        console.print(table)
    if study.verdicts:
        console.print(escape(verdicts_note(study.verdicts)))
    for line in disturbed_lines(study.configs):
        console.print(f"[yellow]disturbed:[/] {escape(line)}")
    for found in speed_tables(study):  # the Ensembles section's speed tables
        ensemble = Table(title=escape(f"ensemble {found.title}: {found.metric_name}"))
        for header in SPEED_HEADER:
            ensemble.add_column(header)
        for row in found.rows:
            ensemble.add_row(*map(escape, speed_cells(row)))
        console.print(ensemble)
    if study.training:
        from quantmark.report.training import rows

        _print_training(rows(study.training), "training (train-bench)")
    for e in study.explained:
        console.print(f"[yellow]{escape(e.sut)} {escape(e.model)} "
                      f"{escape(e.scenario if e.mode != 'accuracy' else 'accuracy')}: "
                      f"{escape(e.status)}[/] {escape(e.message)}")
    names = ", ".join(p.name for p in written.files if p.parent == output)
    console.print(f"written to {escape(str(output))}: {names} and "
                  f"{sum(p.suffix == '.png' for p in written.files)} figures")


def _percentile_table(folder: str) -> None:
    """Print and write (CSV, Markdown) the percentile table of every run under ``folder``.
    Cells are taken by column name (``report.run_table.CONSOLE_COLUMNS``), never by position."""
    from quantmark.report.run_table import (
        CONSOLE_COLUMNS,
        console_cells,
        disturbed_warnings,
        incomplete_warnings,
        write_report,
    )

    root = Path(folder)
    rows, csv_path, md_path = write_report(root)
    if not rows:
        raise UserError(f"no LoadGen runs (mlperf_log_detail.txt) under {folder}")
    table = Table(title=f"runs under {escape(folder)}")
    for label, _ in CONSOLE_COLUMNS:
        table.add_column(label)
    for row in rows:
        table.add_row(*(escape(cell) for cell in console_cells(row, root)))
    console.print(table)
    for line in incomplete_warnings(rows, root) + disturbed_warnings(rows, root):
        console.print(f"[yellow]warning:[/] {escape(line)}")
    console.print("latencies in ms (LoadGen's nearest-rank); Offline runs are one query of every "
                  "sample, so their percentiles (n/a here, in the CSV as logged) are not a "
                  f"sample's latency; written {escape(str(csv_path))} "
                  f"and {escape(str(md_path))}")
