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

A detector's quantmark run times the task's postprocessing (threshold, NMS, top-K: MLPerf's
rule) inside the SUT's work; the vendor tools and the loop stop at the model's output. Its ratio
stays the one measured, and each round also times the task's ``respond`` on the SUT's own
outputs right after quantmark's run (``quantmark.bench.parity_postprocess``): its share of
quantmark's time per batch and worker, and the ratio if postprocessing cost nothing
(ratio / (1 - share)), so a reader sees whether a gap is the NMS or the harness. A side or a
case that cannot be measured is named with its reason under the table.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.bench import parity_postprocess
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


def unmeasured(case: Case) -> list[str]:
    """One line for each reference this case has no side for, and why."""
    framework = case.sut.split("-")[0]
    if framework == "ov":
        return ["framework loop: none for OpenVINO (benchmark_app -i runs the real samples)"]
    if framework == "tflite" and case.batch != 1:
        return [f"litert-benchmark: not run, it runs the model's own batch of 1, not "
                f"{case.batch} (the framework loop is the reference)"]
    return []


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


def check_artifact(case: Case, settings: dict[str, Any], results: dict[str, Any]) -> None:
    """The vendor command must run the very file quantmark's SUT ran (its IR, its .tflite)."""
    ran, command = results.get("sut", {}).get("model_file"), settings.get("vendor_command")
    if ran and command and ran not in shlex.split(command):
        raise RuntimeError(f"{case.name}: the recorded vendor command does not run "
                           f"quantmark's artifact {ran}: {command}")


def measure_postprocess(case: Case, value: float, settings: dict[str, Any],
                        seconds: float) -> dict[str, Any]:
    """The task's ``respond`` timed on the SUT's own outputs, and its share of this round's
    quantmark figure (``quantmark.bench.parity_postprocess``)."""
    text = _output([sys.executable, "-m", "quantmark.bench.parity_postprocess", "--sut",
                    case.sut, "--model", case.model, "--batch-size", str(case.batch),
                    "--seconds", str(seconds)], stdout_only=True)
    found = json.loads(text.strip().splitlines()[-1])
    workers = int(settings.get("workers") or 1)
    return {"respond_ms": found["respond_ms"], "predict_ms": found["predict_ms"],
            "calls": found["calls"], "workers": workers,
            "nms": (found.get("postprocess") or {}).get("nms"),
            "share": parity_postprocess.share(case.throughput, value, found["respond_ms"],
                                              case.batch, workers)}


def run_quantmark_round(case: Case, seconds: float, work: Path,
                        post: list[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
    """quantmark's side of a round, and for a task with postprocessing (a detector) its
    ``respond`` timed right after it, into ``post``."""
    value, results = run_quantmark(case, seconds, work)
    settings = results["speed_settings"]
    check_artifact(case, settings, results)
    if results.get("task", {}).get("postprocess"):
        post.append(measure_postprocess(case, value, settings, seconds))
        log.info("%s: postprocess %.3f ms a batch, %.1f%% of quantmark's time", case.name,
                 post[-1]["respond_ms"], 100 * post[-1]["share"])
    return value, settings


# ------------------------------------------------------------------------------ rounds
def run_case(case: Case, rounds: int, seconds: float) -> dict[str, Any]:
    """Every side of ``case``, ``rounds`` times, the order rotated each round."""
    sides = sides_for(case)
    values: dict[str, list[float]] = {_key(s): [] for s in sides}
    settings: dict[str, Any] = {}
    post: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="quantmark-parity-") as tmp:
        work = Path(tmp)
        for number in range(rounds):
            order = sides[number % len(sides):] + sides[:number % len(sides)]
            if not settings:  # the first round starts with quantmark: it tells the settings
                order = sides
            for side in order:
                if side.kind == "quantmark":
                    value, settings = run_quantmark_round(case, seconds, work, post)
                else:
                    value = measure_side(side, case, settings, seconds, work)
                values[_key(side)].append(value)
                log.info("%s round %d: %s = %.3f", case.name, number + 1, _key(side), value)
        notes = unmeasured(case) + measured_notes(case, values, work)
    entry = {"case": vars(case), "metric": "samples/s" if case.throughput else "p50 ms",
             "values": values, "speed_settings": settings,
             "ratios": {key: _ratio(case, values[QUANTMARK], vals)
                        for key, vals in values.items() if key != QUANTMARK}, "notes": notes}
    if post:
        entry["postprocess"] = parity_postprocess.summary(post, entry["ratios"])
    return entry


def measured_notes(case: Case, values: dict[str, list[float]], work: Path) -> list[str]:
    """What a reader must know of the references' inputs and resolution."""
    notes = []
    files = sorted((work / "npy").glob("*.npy"))
    if files:  # benchmark_app puts row k % batch of file k in slot k % batch of its tensor
        notes.append(f"benchmark_app -i: {len(files)} distinct samples" + (
            f" (row k mod {case.batch} of each of its {len(files)} .npy batch files)"
            if case.batch > 1 else ", one .npy file each"))
    litert = values.get(_key(Side("litert-benchmark", "constant", "litert-benchmark")))
    if litert and statistics.median(litert) < 1:
        notes.append(f"litert-benchmark prints ms with 2 decimals: its median "
                     f"{statistics.median(litert):.2f} ms is +/- "
                     f"{0.5 / statistics.median(litert):.0f}%")
    return notes


def _key(side: Side) -> str:
    return f"{side.label} [{side.regime} input]"


QUANTMARK = _key(Side("quantmark", "real", "quantmark"))


def _ratio(case: Case, quantmark: list[float], reference: list[float]) -> dict[str, Any]:
    ratio = speedup(reference, quantmark, higher_is_better=case.throughput, paired=True)
    return {"point": ratio.point, "low": ratio.low, "high": ratio.high, "method": ratio.method}


def table(results: list[dict[str, Any]], failures: Sequence[str] = ()) -> str:
    """The ratios; then, for detectors, the postprocessing's share; then every side or case
    not measured and what a reader must know of the references, one line each."""
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
    notes = [f"- {Case(**entry['case']).name}: {note}" for entry in results
             for note in entry.get("notes", [])] + [f"- {line}" for line in failures]
    return ("\n".join(lines) + "\n"
            + parity_postprocess.table(results, lambda entry: Case(**entry["case"]).name)
            + ("\n" + "\n".join(notes) + "\n" if notes else ""))


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
    failures: list[str] = []
    for text in args.cases.split(","):
        case = Case.parse(text)
        if case in finished:  # rerunning the command resumes: finished cases are kept
            results.append(finished[case])
        else:
            try:
                results.append(run_case(case, args.rounds, args.seconds))
            except (RuntimeError, ValueError, KeyError, subprocess.SubprocessError,
                    OSError) as exc:
                log.error("%s failed, the other cases go on: %s", case.name, exc)
                reason = _one_line(exc).removeprefix(f"{case.name}: ")
                failures.append(f"{case.name}: not measured: {reason}")
        atomic_write_json(out / "parity.json", results)  # finished and kept cases alike
        atomic_write_text(out / "table.md", table(results, failures))
    print(table(results, failures))
    if failures:
        sys.exit(f"{len(failures)} case(s) failed (see above); rerun the command to retry them")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """The failure's reason on one line (a tool's stderr tail has many)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _finished(path: Path, rounds: int) -> dict[Case, dict[str, Any]]:
    """Cases of an earlier run of the command with all their rounds."""
    if not path.is_file():
        return {}
    return {Case(**entry["case"]): entry for entry in json.loads(path.read_text())
            if all(len(values) == rounds for values in entry["values"].values())}


if __name__ == "__main__":
    main()
