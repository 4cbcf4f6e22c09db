"""Is quantmark as fast as each framework's own benchmark tool? Side by side, interleaved.

For every case (a SUT, model, scenario and batch) each round runs, each in a fresh process:

* quantmark itself (a quick LoadGen run, as ``run.py`` makes it);
* the framework's own tool on the very artifact quantmark ran, with the settings the run
  recorded in results.json ``speed_settings`` (``benchmark_app`` for OpenVINO,
  ``litert-benchmark`` for LiteRT), on its constant input;
* the same tool fed real, different samples where it can be (``benchmark_app -i`` with the
  run's own preprocessed batches and ``-inference_only false``), else the framework's tight
  loop (``quantmark.bench.vendor_loops``) on real samples and on one constant batch.

The order of the sides rotates each round, so drift hits every side alike. The parity ratio is
quantmark's speed over the reference's (samples/s for Offline, 1 / p50 latency for
SingleStream), with a paired 95% interval over the rounds (``report.stats.speedup``).

    python -m quantmark.bench.vendor_parity [--cases ov-int8:resnet50:Offline:8,...]
        [--rounds 3] [--seconds 8] [--output bench-results/vendor_parity]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.hashing import atomic_write_json, atomic_write_text
from quantmark.report.stats import speedup
from quantmark.run.launch import launch

log = logging.getLogger(__name__)

DEFAULT_CASES = ",".join(f"{sut}:resnet50:Offline:8,{sut}:efficientnet-lite0:SingleStream:1"
                         for sut in ("ov-int8", "tflite-int8", "ort-int8", "torch-int8",
                                     "tf-fp32"))
PARITY_TARGET = 0.95


@dataclass(frozen=True)
class Case:
    sut: str
    model: str
    scenario: str
    batch: int

    @classmethod
    def parse(cls, text: str) -> Case:
        sut, model, scenario, batch = text.split(":")
        return cls(sut, model, scenario, int(batch))

    @property
    def name(self) -> str:
        return f"{self.sut} {self.model} {self.scenario} b{self.batch}"

    @property
    def throughput(self) -> bool:
        return self.scenario == "Offline"


@dataclass(frozen=True)
class Side:
    """One way of measuring a case: quantmark, or a reference with its input regime."""

    label: str
    regime: str  # "real" | "constant"
    kind: str  # "quantmark" | "benchmark_app" | "litert-benchmark" | "loop"


def sides_for(case: Case) -> list[Side]:
    sides = [Side("quantmark", "real", "quantmark")]
    framework = case.sut.split("-")[0]
    if framework == "ov":
        return sides + [Side("benchmark_app", "constant", "benchmark_app"),
                        Side("benchmark_app -i (real samples)", "real", "benchmark_app")]
    if framework == "tflite" and case.batch == 1:
        sides.append(Side("litert-benchmark", "constant", "litert-benchmark"))
    return sides + [Side("framework loop", "real", "loop"),
                    Side("framework loop", "constant", "loop")]


# ------------------------------------------------------------------------------ the sides
def run_quantmark(case: Case, seconds: float, work: Path) -> tuple[float, dict[str, Any]]:
    config = RunConfig(scenario=case.scenario, sut=case.sut, model=case.model,
                       batch_size=case.batch, output=str(work / "quantmark"),
                       quick_duration_ms=int(seconds * 1000))
    result = launch(config, quiet=True, timeout_s=1800)
    if result.status != "ok":
        raise RuntimeError(f"{case.name}: quantmark run {result.status}: {result.message}")
    summary = result.results["summary"]
    value = (summary["samples_per_second"] if case.throughput
             else summary["percentiles_ns"]["50.00"] / 1e6)
    return value, result.results


def _tool(name: str) -> str:
    """A console script of this Python's environment (the venv need not be activated)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: pip install -e '.[cpu]'")
    return found


def _output(command: list[str], timeout_s: float = 900, stdout_only: bool = False) -> str:
    if not command[0].startswith("/") and command[0] != sys.executable:
        command = [_tool(command[0]), *command[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(command)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout)[-800:]}")
    return done.stdout if stdout_only else done.stdout + done.stderr


def run_benchmark_app(case: Case, settings: dict[str, Any], seconds: float,
                      samples_dir: Path | None) -> float:
    command = shlex.split(settings["vendor_command"])
    command[command.index("-t") + 1] = str(int(seconds))
    if samples_dir is not None:
        command += ["-i", str(samples_dir), "-inference_only", "false"]
    text = _output(command)
    found = re.search(r"Throughput:\s+([\d.]+) (FPS)" if case.throughput
                      else r"Median:\s+([\d.]+) (ms|us)", text)  # us below 1 ms
    if found is None:
        raise RuntimeError(f"{shlex.join(command)} printed no figure: {text[-800:]}")
    return float(found[1]) / (1000 if found[2] == "us" else 1)


def run_litert_benchmark(settings: dict[str, Any], work: Path) -> float:
    report = work / "litert.json"
    _output(shlex.split(settings["vendor_command"]) + ["--result_json", str(report)])
    return float(json.loads(report.read_text())["latency"]["median_ms"])


def run_loop(case: Case, regime: str, seconds: float) -> float:
    text = _output([sys.executable, "-m", "quantmark.bench.vendor_loops", "--sut", case.sut,
                    "--model", case.model, "--batch-size", str(case.batch), "--input", regime,
                    "--seconds", str(seconds)], stdout_only=True)
    result = json.loads(text.strip().splitlines()[-1])
    return result["samples_per_s"] if case.throughput else result["median_ms"]


def write_samples(case: Case, folder: Path) -> Path:
    """The run's own preprocessed batches as .npy files, benchmark_app's ``-i`` input."""
    _output([sys.executable, "-m", "quantmark.bench.vendor_loops", "--sut", case.sut,
             "--model", case.model, "--batch-size", str(case.batch), "--write-npy", str(folder)])
    return folder


def measure_side(side: Side, case: Case, settings: dict[str, Any], seconds: float,
                 work: Path) -> float:
    if side.kind == "benchmark_app":
        samples = None
        if side.regime == "real":
            samples = work / "npy"
            if not samples.is_dir():
                write_samples(case, samples)
        return run_benchmark_app(case, settings, seconds, samples)
    if side.kind == "litert-benchmark":
        return run_litert_benchmark(settings, work)
    return run_loop(case, side.regime, seconds)


# ------------------------------------------------------------------------------ rounds
def run_case(case: Case, rounds: int, seconds: float) -> dict[str, Any]:
    """Every side of ``case``, ``rounds`` times, the order rotated each round."""
    sides = sides_for(case)
    values: dict[str, list[float]] = {_key(s): [] for s in sides}
    settings: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="quantmark-parity-") as tmp:
        work = Path(tmp)
        for number in range(rounds):
            order = sides[number % len(sides):] + sides[:number % len(sides)]
            if not settings:  # the first round starts with quantmark: it tells the settings
                order = sides
            for side in order:
                if side.kind == "quantmark":
                    value, results = run_quantmark(case, seconds, work)
                    settings = results["speed_settings"]
                else:
                    value = measure_side(side, case, settings, seconds, work)
                values[_key(side)].append(value)
                log.info("%s round %d: %s = %.3f", case.name, number + 1, _key(side), value)
    return {"case": vars(case), "metric": "samples/s" if case.throughput else "p50 ms",
            "values": values, "speed_settings": settings,
            "ratios": {key: _ratio(case, values[QUANTMARK], vals)
                       for key, vals in values.items() if key != QUANTMARK}}


def _key(side: Side) -> str:
    return f"{side.label} [{side.regime} input]"


QUANTMARK = _key(Side("quantmark", "real", "quantmark"))


def _ratio(case: Case, quantmark: list[float], reference: list[float]) -> dict[str, Any]:
    ratio = speedup(reference, quantmark, higher_is_better=case.throughput, paired=True)
    return {"point": ratio.point, "low": ratio.low, "high": ratio.high, "method": ratio.method}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| case | reference | input | quantmark (median) | reference (median) | "
             "quantmark / reference [95% CI] | >= 0.95 |", "|---|---|---|---|---|---|---|"]
    for entry in results:
        case, metric = Case(**entry["case"]), entry["metric"]
        ours = statistics.median(entry["values"][QUANTMARK])
        for key, ratio in entry["ratios"].items():
            label, regime = key.rsplit(" [", 1)
            interval = (f" [{ratio['low']:.3f}, {ratio['high']:.3f}]"
                        if ratio["low"] is not None else "")
            lines.append(f"| {case.name} | {label} | {regime.split()[0]} | {ours:.2f} {metric} "
                         f"| {statistics.median(entry['values'][key]):.2f} {metric} | "
                         f"{ratio['point']:.3f}{interval} | "
                         f"{'yes' if ratio['point'] >= PARITY_TARGET else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="comma-separated SUT:MODEL:SCENARIO:BATCH")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per side and round")
    parser.add_argument("--output", default="bench-results/vendor_parity")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    finished = _finished(out / "parity.json", args.rounds)
    results: list[dict[str, Any]] = []
    failed = 0
    for text in args.cases.split(","):
        case = Case.parse(text)
        if case in finished:  # rerunning the command resumes: finished cases are kept
            results.append(finished[case])
        else:
            try:
                results.append(run_case(case, args.rounds, args.seconds))
            except (RuntimeError, ValueError, subprocess.SubprocessError, OSError) as exc:
                log.error("%s failed, the other cases go on: %s", case.name, exc)
                failed += 1
        atomic_write_json(out / "parity.json", results)  # finished and kept cases alike
        atomic_write_text(out / "table.md", table(results))
    print(table(results))
    if failed:
        sys.exit(f"{failed} case(s) failed (see above); rerun the command to retry them")


def _finished(path: Path, rounds: int) -> dict[Case, dict[str, Any]]:
    """Cases of an earlier run of the command with all their rounds."""
    if not path.is_file():
        return {}
    return {Case(**entry["case"]): entry for entry in json.loads(path.read_text())
            if all(len(values) == rounds for values in entry["values"].values())}


if __name__ == "__main__":
    main()
