"""Offline samples/s of every CPU SUT, and each one's ratio to the same framework's FP32.

Every cell is a real quantmark Offline run (its own process, LoadGen, the SUT's worker path),
not a raw framework loop. A framework's FP32 cell runs just before its other precisions, so a
ratio compares runs minutes apart on this shared machine; cells of one model run together.
Results are appended to ``cells.json`` after every cell (a crash loses nothing finished) and
the table is written to ``table.md``.

    python -m bench.cpu_suts [--models resnet50,mobilenetv2] [--suts ort-fp32,ort-int8,...]
                             [--batch-size 8] [--seconds 10] [--output bench-results/cpu_suts]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from quantmark.config import RunConfig
from quantmark.hashing import atomic_write_json, atomic_write_text
from quantmark.launcher import launch
from sut.registry import FP32_BASELINE, SUTS, availability

FP32_OF = {k: v for k, v in FP32_BASELINE.items() if SUTS[v].device == "cpu"}


def cpu_suts() -> list[str]:
    """All CPU SUT names, each framework's FP32 first."""
    names = [info.name for info in SUTS.values() if info.device == "cpu"]
    return sorted(names, key=lambda n: (list(FP32_OF).index(SUTS[n].framework),
                                        n != FP32_OF[SUTS[n].framework]))


def run_cell(model: str, sut: str, args: argparse.Namespace) -> dict[str, Any]:
    ok, reason = availability(SUTS[sut])
    row: dict[str, Any] = {"model": model, "sut": sut, "framework": SUTS[sut].framework}
    if not ok:
        return {**row, "status": "unavailable", "message": reason}
    config = RunConfig(scenario="Offline", sut=sut, model=model, quick=True,
                       output=str(Path(args.output) / "runs"), batch_size=args.batch_size,
                       quick_duration_ms=int(args.seconds * 1000))
    started = time.time()
    result = launch(config, timeout_s=args.timeout, quiet=True)
    row["wall_s"] = round(time.time() - started, 1)
    if result.status != "ok":
        return {**row, "status": result.status, "message": result.message[:300]}
    results = result.results
    summary, described = results["summary"], results["sut"]
    return {**row, "status": "ok", "samples_per_s": summary["metric_value"],
            "validity": summary["validity"],
            "executed_precision": described.get("executed_precision"),
            "prepare_s": round(results["times"]["prepare_s"], 2),
            "load_s": round(results["times"]["load_s"], 2),
            "workers": results["settings"].get("workers"), "run_dir": result.run_dir}


def add_ratios(rows: list[dict[str, Any]]) -> None:
    fp32 = {(r["model"], r["sut"]): r.get("samples_per_s") for r in rows}
    for row in rows:
        base = fp32.get((row["model"], FP32_OF[row["framework"]]))
        value = row.get("samples_per_s")
        row["ratio_to_fp32"] = round(value / base, 2) if value and base else None


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | SUT | samples/s | x framework FP32 | executed precision | validity |"
             " prepare s | load s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | {r['sut']} | {r['status']}: {r.get('message', '')}"
                         " | | | | | |")
            continue
        ratio = f"{r['ratio_to_fp32']:.2f}" if r.get("ratio_to_fp32") else "-"
        lines.append(f"| {r['model']} | {r['sut']} | {r['samples_per_s']:.1f} | {ratio} | "
                     f"{r['executed_precision']} | {r['validity']} | {r['prepare_s']} | "
                     f"{r['load_s']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenetv2")
    parser.add_argument("--suts", default=",".join(cpu_suts()))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="Offline min duration")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per cell")
    parser.add_argument("--output", default="bench-results/cpu_suts")
    args = parser.parse_args()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for model in args.models.split(","):
        for sut in args.suts.split(","):
            rows.append(run_cell(model, sut, args))
            add_ratios(rows)
            atomic_write_json(out / "cells.json", rows)
            print(json.dumps(rows[-1]), flush=True)
    atomic_write_text(out / "table.md", table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
