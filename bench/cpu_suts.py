"""Offline samples/s of every CPU SUT, and each one's ratio to the same framework's FP32.

A thin use of the sweep (``run.py sweep``): every cell is a real quantmark Offline run (its own
process, LoadGen, the SUT's worker path), not a raw framework loop; a framework's FP32 cell runs
just before its other precisions, so a ratio compares runs minutes apart on this shared
machine. The sweep's manifest keeps every finished cell (rerun the command to resume), and the
table is written to ``table.md`` beside the sweep's own report.

    python -m quantmark.bench.cpu_suts [--models resnet50,mobilenetv2]
        [--suts ort-fp32,ort-int8,...] [--batch-size 8] [--seconds 10]
        [--output bench-results/cpu_suts]
"""

from __future__ import annotations

import argparse

from quantmark.ground.hashing import atomic_write_text
from quantmark.report.characterize import Study, load
from quantmark.sweep.driver import run_sweep
from quantmark.sweep.plan import build_spec


def table(study: Study) -> str:
    lines = ["| model | SUT | samples/s | x framework FP32 | executed precision | validity |"
             " prepare s | load s |", "|---|---|---|---|---|---|---|---|"]
    for c in study.configs:
        d = c.derived
        ratio = f"{d['speedup_vs_fp32']:.2f}" if d["speedup_vs_fp32"] else "-"
        lines.append(f"| {c.model} | {c.sut} | {d['samples_per_s']:.1f} | {ratio} | "
                     f"{d['executed_precision']} | {d['validity']} | {d['prepare_s']:.2f} | "
                     f"{d['load_s']:.2f} |")
    for e in study.explained:
        lines.append(f"| {e.model} | {e.sut} | {e.status}: {e.message} | | | | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenetv2")
    parser.add_argument("--suts", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="Offline min duration")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per cell")
    parser.add_argument("--output", default="bench-results/cpu_suts")
    args = parser.parse_args()
    spec = build_spec({"models": args.models, "suts": args.suts, "scenarios": "Offline",
                       "batch_sizes": str(args.batch_size), "seconds": args.seconds,
                       "timeout": args.timeout, "output": args.output, "accuracy": False})
    run_sweep(spec)
    text = table(load([args.output]))
    atomic_write_text(f"{args.output}/table.md", text)
    print(text)


if __name__ == "__main__":
    main()
