"""``run.py diagnose``: flags -> ``DiagnoseConfig`` -> diagnosis -> folder and console tables."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from quantmark.diagnosis.steps import DiagnoseConfig, run
from quantmark.ground.errors import SutError, UserError
from quantmark.report import diagnosis_section as tables
from quantmark.run.checks import check_output_writable, validate_inputs

console = Console(width=None if sys.stdout.isatty() else 200)


def parse_damage(items: list[str]) -> tuple[tuple[str, float], ...]:
    """``LAYER=FACTOR`` flags -> ((layer, factor), ...); FACTOR above 1."""
    faults = []
    for item in items:
        name, sep, factor = item.rpartition("=")
        try:
            value = float(factor)
        except ValueError:
            value = 0.0
        if not sep or not name or value <= 1:
            raise UserError(f"--damage {item}: write LAYER=FACTOR with FACTOR above 1, e.g. "
                            "--damage node_Conv_805=64 (layer names: a diagnosis' layers.csv)")
        faults.append((name, value))
    return tuple(faults)


def config_from_args(args: Any) -> DiagnoseConfig:
    from quantmark.models.zoo import DEFAULT_MODEL

    return DiagnoseConfig(
        model=args.model or DEFAULT_MODEL, sut=args.sut, against=args.against,
        samples=args.samples, worst=args.worst, recover=args.recover,
        damage=parse_damage(args.damage or []), eval_samples=args.eval_samples,
        rounds=args.rounds, round_seconds=args.round_seconds, batch_size=args.batch_size,
        threads=args.threads, output=args.output, dataset_path=args.dataset_path,
        model_path=args.model_path, calibration_list=args.calibration_list)


def diagnose(args: Any) -> Path:
    """Run a diagnosis as the flags ask, write its folder, print its tables. A recovery curve
    that fails is a SutError raised after the diagnosis is written (exit 3, nothing lost)."""
    from quantmark.diagnosis import output

    config = config_from_args(args)
    if config.rounds < 2 and config.recover:
        raise UserError("--rounds must be at least 2: an interval needs repeats")
    validate_inputs(config.dataset_path, config.calibration_list, None)
    check_output_writable(config.output)
    started = time.time()
    record = run(config)
    folder = output.write(record, config, started)
    show(tables.load([folder])[0])
    console.print(f"written to {escape(str(folder))}: results.json, layers.csv, layers.md"
                  f"{', recovery.csv' if record.get('recovery') else ''}, diagnosis.png",
                  soft_wrap=True)
    if record.get("recovery_failed"):
        raise SutError(f"the recovery curve failed ({record['recovery_failed']}); the "
                       f"diagnosis is written to {folder}")
    return folder


def show(record: dict[str, Any]) -> None:
    """A diagnosis on the console: what was matched, the worst layers, the recovery curve."""
    for line in tables.summary_lines(record):
        console.print(escape(line), soft_wrap=True)
    worst = Table(title=escape(f"worst layers: {tables.title(record)}"))
    for header in tables.WORST_HEADER:
        worst.add_column(header)
    for row in tables.worst_rows(record):
        worst.add_row(*map(escape, row))
    console.print(worst)
    if not record.get("recovery"):
        return
    curve = Table(title=escape("recovery: worst layers kept in FP32 (top-1 paired against "
                               "K=0; speed in interleaved rounds)"))
    for header in tables.RECOVERY_HEADER:
        curve.add_column(header)
    for row in record["recovery"]["rows"]:
        curve.add_row(*map(escape, tables.recovery_cells(row)))
    console.print(curve)
    for row in record["recovery"]["rows"]:
        if row.get("disturbed_rounds"):
            console.print(f"[yellow]disturbed:[/] {escape(row['label'])}: "
                          f"{escape('; '.join(row['disturbed_why']))}", soft_wrap=True)


def show_agreement(records: list[dict[str, Any]]) -> None:
    """Where diagnoses share a reference: each one's worst layers under the reference's names."""
    for heading, header, rows in tables.agreement(records):
        table = Table(title=escape(heading))
        for column in header:
            table.add_column(escape(column))
        for row in rows:
            table.add_row(*map(escape, row))
        console.print(table)
