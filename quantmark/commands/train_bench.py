"""``run.py train-bench``: training step time, images/s and peak memory, FP32 against mixed
precision, each precision in its own process; then the summary of the output folder."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from quantmark.commands import options
from quantmark.ground.errors import UserError
from quantmark.report import console_tables as tables
from quantmark.run.checks import check_output_writable
from quantmark.train import step_bench as bench

NAME = "train-bench"
HELP = "training step time, images/s and peak memory, FP32 against mixed precision"
DESCRIPTION = ("Training step time, images/s and peak memory, FP32 vs mixed precision (fp16 + "
               "loss scaling on a GPU, bf16 autocast on a CPU), on synthetic data; each "
               "precision in its own process.")

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.model(parser, default="resnet50", help="zoo model (default resnet50)")
    parser.add_argument("--framework", default="torch", help="torch or tf (or torch,tf)")
    parser.add_argument("--precision", default="fp32,amp", help="comma-separated: fp32, amp "
                                                                "(default fp32,amp)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first (default 3; their time is recorded apart)")
    options.batch_size(parser, help="default 32 on a GPU, 8 on a CPU")
    parser.add_argument("--image-size", type=int,
                        help="square input side (default: the model's, 224)")
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu "
                                                         "or gpu")
    options.threads(parser)
    options.output(parser, default="results/train-bench",
                   help="folder for the JSONs and the summary (default results/train-bench)")


def main(args: argparse.Namespace) -> int:
    """Train FP32 and AMP (each in its own process), then the summary of the output folder."""
    frameworks = bench.parse_list(args.framework, bench.FRAMEWORKS, "--framework")
    precisions = bench.parse_list(args.precision, bench.PRECISIONS, "--precision")
    if args.device not in bench.DEVICES:
        raise UserError(f"--device {args.device!r}: choose auto, cpu or gpu")
    bench.check(frameworks, args.model, args.steps, args.warmup, args.batch_size,
                args.image_size, args.threads)
    check_output_writable(args.output)
    bench.run(frameworks, args.model, precisions, args.steps, args.warmup, args.batch_size,
              args.image_size, args.device, args.output, args.threads, _print_record)
    table, files = bench.write_summary(args.output)
    console.print(tables.training_table(table, f"train-bench summary of {args.output}"))
    console.print(f"written {', '.join(escape(str(p)) for p in files)}", soft_wrap=True)
    return 0


def _print_record(r: dict[str, Any]) -> None:
    """One precision's record, as soon as its process is done."""
    s = r["step_time_s"]
    console.print(f"{r['framework']} {escape(r['model'])} {r['precision']} "
                  f"({escape(r['executed_precision'])}, {r['device']}, batch "
                  f"{r['batch_size']}): step {s['median'] * 1e3:.1f} ms median, "
                  f"{r['images_per_s']:.2f} images/s, peak {r['memory']['peak_mb']:.0f} MB "
                  f"({r['memory']['kind']}), loss {r['loss_first']:.3f} -> "
                  f"{r['loss_last']:.3f}  ->  {escape(r['path'])}", soft_wrap=True)
