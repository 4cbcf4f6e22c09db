"""``run.py diagnose --sut ort-int8 [--against SUT] [--recover K]``: where a reduced-precision
SUT loses accuracy, layer by layer: flags -> ``DiagnoseConfig`` -> the diagnosis -> its folder
and console tables.

The diagnosis (``diagnosis.steps``: scipy) is imported when it runs: the lean install lacks
scipy and must still start every other verb."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.markup import escape

from quantmark.commands import options
from quantmark.diagnosis import output as diagnosis_output
from quantmark.ground.errors import SutError, UserError
from quantmark.models.workload import file_model_name
from quantmark.models.zoo import DEFAULT_MODEL
from quantmark.report import console_tables as tables
from quantmark.report import diagnosis_section
from quantmark.run.checks import check_output_writable, validate_inputs
from quantmark.tasks.catalog import task_for

NAME = "diagnose"
HELP = "where a reduced-precision SUT loses accuracy, layer by layer"
DESCRIPTION = ("Where a reduced-precision SUT loses accuracy: every layer's output against its "
               "framework's FP32 (or --against), the worst layers, and with --recover the "
               "measured way back.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sut", required=True, help="the SUT to diagnose, e.g. ort-int8")
    parser.add_argument("--against", help="reference SUT (default: the framework's FP32)")
    parser.add_argument("--samples", type=int, default=32,
                        help="evaluation samples captured layer by layer (default 32)")
    parser.add_argument("--worst", type=int, default=10, help="layers listed (default 10)")
    parser.add_argument("--recover", type=int, default=0, metavar="K",
                        help="re-quantize with 1, 2, 4 ... K layers in FP32 (in "
                             "--recover-by order) and measure each one's quality in the task's "
                             "metric (a classifier's top-1, a detector's mAP; not yet for text "
                             "models) and speed, with the latency each point's layer costs "
                             "predict (default 0: no)")
    parser.add_argument("--recover-by", choices=("accuracy", "ms"), default="accuracy",
                        help="order of the layers kept in FP32: accuracy (most SQNR lost "
                             "first, default) or ms (most SQNR recovered per millisecond each "
                             "costs, from both SUTs' per-layer profiles)")
    parser.add_argument("--profile-iterations", type=int, default=20,
                        help="profiled inferences that price each recovery candidate in ms "
                             "(default 20)")
    parser.add_argument("--damage", action="append", metavar="LAYER=FACTOR",
                        help="inject a fault to test the diagnosis: LAYER's INT8 weights "
                             "quantized over a range FACTOR times too wide (ort-int8, "
                             "tflite-int8, torch-int8); repeatable")
    parser.add_argument("--eval-samples", type=int,
                        help="evaluation samples the recovery curve's quality is "
                             "judged on (default: all)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved speed rounds of the recovery curve (default 5)")
    parser.add_argument("--round-seconds", type=float, default=1.0,
                        help="seconds each model is timed per round (default 1)")
    options.batch_size(parser, default=8, help="batch timed (default 8)")
    options.threads(parser)
    options.output(parser)
    options.model_and_dataset(parser, model_path_help="your FP32 model (.pt/.onnx ...) to "
                                                      "diagnose",
                              dataset_help="ImageNet-format folder, a detector's COCO or "
                                           "YOLO folder, or a text model's CSV/JSONL "
                                           "(default: built-in)")
    options.model_shape(parser)


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


def diagnose(args: argparse.Namespace) -> Path:
    """Run a diagnosis as the flags ask, write its folder, print its tables; the folder. A
    recovery curve that fails is a SutError raised after the diagnosis is written (exit 3,
    nothing lost)."""
    from quantmark.diagnosis import steps  # scipy: see the module's docstring

    config = steps.DiagnoseConfig(
        model=args.model or file_model_name(args.model_path) or DEFAULT_MODEL, sut=args.sut,
        against=args.against,
        samples=args.samples, worst=args.worst, recover=args.recover,
        recover_by=args.recover_by, profile_iterations=args.profile_iterations,
        damage=parse_damage(args.damage or []), eval_samples=args.eval_samples,
        rounds=args.rounds, round_seconds=args.round_seconds, batch_size=args.batch_size,
        threads=args.threads, output=args.output, dataset_path=args.dataset_path,
        model_path=args.model_path, calibration_list=args.calibration_list,
        **options.shape_fields(args))
    if config.rounds < 2 and config.recover:
        raise UserError("--rounds must be at least 2: an interval needs repeats")
    # another task's dataset (a detector's COCO or YOLO folder) is its task's to read
    image_folder = task_for(config).name == "classification"
    validate_inputs(config.dataset_path if image_folder else None, config.calibration_list, None)
    check_output_writable(config.output)
    started = time.time()
    record = steps.run(config)
    folder = diagnosis_output.write(record, config, started)
    written = diagnosis_section.load([folder])[0]
    tables.print_diagnosis(console, written)  # with the candidates' costs, where priced
    console.print(f"written to {escape(str(folder))}: results.json, layers.csv, layers.md"
                  f"{', recovery.csv' if record.get('recovery') else ''}, diagnosis.png",
                  soft_wrap=True)
    if record.get("recovery_failed"):
        raise SutError(f"the recovery curve failed ({record['recovery_failed']}); the "
                       f"diagnosis is written to {folder}")
    return folder
