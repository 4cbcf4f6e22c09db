"""``run.py sweep [FILE] --models ... --suts ...``: every model x SUT x scenario x batch size x
repeat (and input size or a text model's sequence length, x dataset, where given), each cell in
its own process, resumable; then its report."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from quantmark.commands import options
from quantmark.commands import report as report_verb
from quantmark.report import console_tables as tables
from quantmark.run.checks import check_output_writable, validate_inputs
from quantmark.sweep.driver import run_sweep
from quantmark.sweep.plan import load_sweep_file, spec_from_args

NAME = "sweep"
HELP = "every model x SUT x scenario x batch size x repeat, each cell in its own process"
DESCRIPTION = ("Run every model x SUT x scenario x batch size x repeat, each cell in its own "
               "process; resumable.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", help="sweep file (.toml, .yaml): the same settings "
                                                "as the flags; flags given override it")
    parser.add_argument("--models", help="comma-separated, e.g. resnet50,mobilenetv2")
    parser.add_argument("--suts", help="comma-separated SUT names, or cpu / gpu / all")
    parser.add_argument("--ensemble", dest="ensembles", action="append", metavar="MODEL@SUT,...",
                        help="an ensemble to sweep too, with each member alone (repeatable)")
    parser.add_argument("--ensemble-modes", help="sequential,concurrent (default both)")
    parser.add_argument("--scenarios", help="comma-separated (default Offline,SingleStream)")
    parser.add_argument("--batch-sizes", help="comma-separated, e.g. 1,8,32 (default 8; "
                                              "SingleStream always runs batch 1)")
    parser.add_argument("--image-sizes", metavar="S,HxW,...",
                        help="input sizes to run each model at, e.g. 64,128,224 or 224x320 "
                             "(default: each model's own)")
    parser.add_argument("--seq-lens", metavar="N,N,...",
                        help="text models: sequence lengths to run each model at, e.g. "
                             "32,128,384 (default: the text task's 128); --padding applies "
                             "to every cell")
    parser.add_argument("--datasets", metavar="DIR1,DIR2",
                        help="dataset folders, each a dimension of the sweep like the batch "
                             "sizes (one dataset: --dataset-path)")
    parser.add_argument("--repeats", type=int, help="runs of each cell (default 1)")
    options.output(parser, default=None, help="sweep folder (default sweep)")
    parser.add_argument("--seconds", type=float, help="quick runs' minimum duration (default 10)")
    parser.add_argument("--official", action="store_true", default=None,
                        help="official runs (600 s each) instead of quick ones")
    parser.add_argument("--no-accuracy", dest="accuracy", action="store_false", default=None,
                        help="skip the accuracy run of each model x SUT")
    parser.add_argument("--timeout", type=float, help="seconds per cell (default 1800)")
    options.threads(parser, default=None)
    options.model_and_dataset(parser, with_model=False)
    options.model_shape(parser)
    parser.set_defaults(num_classes=None)  # not given: the sweep file's, else the model's own
    options.run_settings(parser, with_batch_size=False, from_file=True,
                         sut_option_help="a SUT's own knob for every cell of the SUTs that "
                                         "read it; KEY=V1,V2 runs each value as a variant, e.g. "
                                         "ov_api=sync,async (repeatable)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="rerun failed and timed-out cells too (finished ones are skipped)")
    parser.add_argument("--cluster", metavar="auto|HOST:PORT|ray://HOST:PORT",
                        help="run the cells as Ray tasks on this cluster (start its nodes with "
                             "run.py node)")
    parser.add_argument("--place", dest="placement", action="append",
                        metavar="SUT_PATTERN:REQ,...",
                        help="where matching SUTs' cells run: arch=, isa=, core=, board=, node= "
                             "or gpu, e.g. 'tflite-*:arch=aarch64' (repeatable; needs --cluster)")


def sweep(args: argparse.Namespace) -> Any:
    """Run (or resume) the sweep the flags describe and write its report; its outcome (the
    folder, the cells by status, how many ran now)."""
    spec = spec_from_args(args, load_sweep_file(args.file) if args.file else {})
    # the dataset folders were read as each model's task reads them (sweep.plan's checks)
    validate_inputs(None, spec.calibration_list, spec.user_conf)
    check_output_writable(spec.output)
    outcome = run_sweep(spec, retry_failed=args.retry_failed, console=console)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(outcome.counts.items()))
    console.print(f"sweep {escape(str(outcome.root))}: {counts} ({outcome.ran} ran now)")
    report_verb.report([str(outcome.root)], None)
    return outcome
