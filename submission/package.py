"""Package finished quantmark runs into an MLPerf inference v6.x submission tree.

    <output>/<division>/<submitter>/
      systems/<system>.json
      src/                                  the quantmark code that produced the results
      model_mapping.json                    open division: each model folder -> "resnet"
      results/<system>/<model>/<scenario>/
        user.conf  README.md  measurements.json
        performance/run_1/   mlperf_log_summary.txt mlperf_log_detail.txt
        accuracy/            mlperf_log_summary.txt mlperf_log_detail.txt accuracy.txt
                             mlperf_log_accuracy.json (truncated; accuracy.txt keeps its hash)
        TEST01/  verify_accuracy.txt verify_performance.txt accuracy/ performance/run_1/
        TEST04/  verify_performance.txt performance/run_1/

Nothing is packaged unless every scenario passes ``submission.rules``; the tree is built in a
temporary folder and moved into place whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json, atomic_write_text
from quantmark.ground.paths import require_component, require_path
from quantmark.ground.records import RunRecord
from quantmark.submission.rules import AUDIT_TESTS, ScenarioRuns, find_scenarios, scenario_problems
from quantmark.submission.system import build_system_json, missing_user_fields, write_system_json

MAX_ACCURACY_LOG_BYTES = 10 * 1024  # the checker's limit for a submitted accuracy log
KEEP_CHARS = 4096  # head and tail kept when truncating, as MLPerf's truncation tool does
LOG_FILES = ("mlperf_log_summary.txt", "mlperf_log_detail.txt")
OFFICIAL_BENCHMARK = "resnet"  # every image-classification model is judged as resnet
SOURCE_PARTS = ("run.py", "setup.py", "pyproject.toml", "constraints.txt", "README.md",
                "audit", "models", "qsl", "quantmark", "report", "scenarios", "submission",
                "sut", "user_confs")


@dataclass
class Packaged:
    """What was written, and what the submitter still has to fill in by hand."""

    root: Path
    scenarios: list[str] = field(default_factory=list)
    systems: dict[str, list[str]] = field(default_factory=dict)  # system -> fields to fill


def truncate_accuracy_log(source: Path, target: Path) -> str:
    """Copy the accuracy log cut to its first and last 4 KiB; return the full log's sha256."""
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > MAX_ACCURACY_LOG_BYTES:
        text = data.decode()
        data = (text[:KEEP_CHARS] + "\n\n...\n\n" + text[-KEEP_CHARS:]).encode()
    target.write_bytes(data)
    return digest


def _copy_logs(source: Path, target: Path, extra: tuple[str, ...] = ()) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in (*LOG_FILES, *extra):
        shutil.copy2(source / name, target / name)


def _measurements(results: RunRecord) -> dict[str, str]:
    """The implementation facts the checker requires, from what the run recorded."""
    described, model, calibration = results.sut, results.model, results.calibration
    executed = str(described.get("executed_precision") or described.get("precision") or "")
    if calibration:
        transform = (f"post-training static quantization with {described.get('framework')}'s "
                     f"own toolkit, calibrated on {calibration['count']} images "
                     f"({calibration['source']}, hash {calibration['hash']})")
    elif executed != "fp32":
        transform = f"converted to {executed} by {described.get('framework')}'s own toolkit"
    else:
        transform = "none (FP32 export of the starting weights)"
    # only full-integer TFLite takes int8 input; every other SUT is fed float32 images
    input_type = "int8" if described.get("name") == "tflite-int8" else "fp32"
    return {"input_data_types": input_type, "retraining": "no",
            "starting_weights_filename": str(model.get("weights") or "unknown"),
            "weight_data_types": executed or "fp32",
            "weight_transformations": transform}


def _readme(runs: ScenarioRuns, results: RunRecord, accuracy: str) -> str:
    config, described = results.config, results.sut
    command = (f"python run.py --official --all-tests --scenario {runs.scenario} "
               f"--sut {config.get('sut')} --model {config.get('model')} "
               f"--batch-size {config.get('batch_size')}")
    for flag, key in (("--model-path", "model_path"), ("--dataset-path", "dataset_path"),
                      ("--calibration-list", "calibration_list"), ("--user-conf", "user_conf")):
        if config.get(key):
            command += f" {flag} {config[key]}"
    summary = results.summary
    return "\n".join([
        f"# {runs.model} {runs.scenario} on {runs.system}", "",
        f"SUT `{described.get('name')}` ({described.get('framework')} "
        f"{described.get('framework_version', '')}), requested precision "
        f"{described.get('precision')}, executed precision {described.get('executed_precision')}.",
        f"Weights: {results.model.get('weights')}.",
        f"Performance: {summary.get('metric_name')} = {summary.get('metric_value')} "
        f"({summary.get('validity')}). Accuracy: {accuracy}.", "",
        "Reproduce (performance, accuracy, TEST01 and TEST04, each in its own process), then "
        "package:", "", "```", command,
        "python run.py submission --results RESULTS --submitter NAME --division DIVISION "
        "--output OUT", "```", ""])


def _write_scenario(runs: ScenarioRuns, target: Path) -> str:
    """Copy one scenario's runs into ``target``; returns the framework name the run used."""
    perf = runs.results(runs.performance)
    _copy_logs(runs.performance, target / "performance" / "run_1")
    shutil.copy2(runs.performance / "user.conf", target / "user.conf")
    atomic_write_json(target / "measurements.json", _measurements(perf))

    accuracy_dir = target / "accuracy"
    _copy_logs(runs.accuracy, accuracy_dir)
    digest = truncate_accuracy_log(runs.accuracy / "mlperf_log_accuracy.json",
                                   accuracy_dir / "mlperf_log_accuracy.json")
    first_line = (runs.accuracy / "accuracy.txt").read_text().splitlines()[0]
    atomic_write_text(accuracy_dir / "accuracy.txt", f"{first_line}\nhash={digest}\n")
    atomic_write_text(target / "README.md", _readme(runs, perf, first_line))

    for test, checks in AUDIT_TESTS.items():
        test_dir = target / test
        _copy_logs(runs.audit_run(test), test_dir / "performance" / "run_1")
        for check in checks:
            shutil.copy2(runs.folder / test / f"verify_{check}.txt", test_dir)
        if test == "TEST01":  # the sampled log, and the fallback's accuracy files if it ran
            source = runs.folder / test / "accuracy"
            (test_dir / "accuracy").mkdir()
            for name in ("mlperf_log_accuracy.json", "baseline_accuracy.txt",
                         "compliance_accuracy.txt"):
                if (source / name).is_file():
                    shutil.copy2(source / name, test_dir / "accuracy" / name)
    return str(perf.sut.get("framework") or "")


def _copy_source(target: Path) -> None:
    """The code that ran: quantmark's packages and entry points, plus the git commit if any."""
    root = Path(__file__).resolve().parent.parent
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    target.mkdir(parents=True, exist_ok=True)
    for part in SOURCE_PARTS:
        source = root / part
        if source.is_dir():
            shutil.copytree(source, target / part, ignore=ignore)
        elif source.is_file():
            shutil.copy2(source, target / part)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        commit = ""
    atomic_write_text(target / "VERSION.txt",
                      f"quantmark source, git commit {commit or 'unknown'}\n")


def _build(scenarios: list[ScenarioRuns], base: Path, division: str, submitter: str,
           system_file: str | Path | None, status: str, system_type: str,
           out: Path) -> Packaged:
    """Write the whole tree under ``base`` (inside the staging folder)."""
    packaged = Packaged(out)
    frameworks: dict[str, dict[str, str]] = {}
    for runs in scenarios:
        model_dir = runs.model if division == "open" else OFFICIAL_BENCHMARK
        target = base / "results" / runs.system / model_dir / runs.scenario
        framework = _write_scenario(runs, target)
        version = runs.results(runs.performance).software.get(framework, "")
        frameworks.setdefault(runs.system, {})[framework] = str(version or "")
        packaged.scenarios.append(f"{runs.system}/{model_dir}/{runs.scenario}")
    for system, used in frameworks.items():
        description = build_system_json(submitter=submitter, division=division,
                                        system_name=system, frameworks=used,
                                        user_file=system_file, status=status,
                                        system_type=system_type)
        write_system_json(description, base / "systems" / f"{system}.json")
        packaged.systems[system] = missing_user_fields(description)
    if division == "open":  # open models are judged as resnet; say so for every folder name
        atomic_write_json(base / "model_mapping.json",
                          {r.model: OFFICIAL_BENCHMARK for r in scenarios})
    _copy_source(base / "src")
    return packaged


def package(results_root: str | Path, *, submitter: str, division: str, output: str | Path,
            system_file: str | Path | None = None, status: str = "available",
            system_type: str = "edge", require_official: bool = True) -> Packaged:
    """Check every scenario under ``results_root``, then write the submission tree.

    ``require_official=False`` skips only the checks that need a 600 s official run (for
    rehearsing the packaging on quick runs); the result is then not a valid submission.
    """
    root, out = Path(results_root), Path(output)
    if division not in ("open", "closed"):
        raise UserError(f"division {division!r} is not valid; use open or closed")
    require_component(submitter, "--submitter")  # <output>/<division>/<submitter>/
    require_path(root, "results folder", "pass the --output of your runs", want="folder")
    if os.path.lexists(out):
        require_path(out, "--output", "pass a new folder for the submission tree",
                     want="folder")
        if any(out.iterdir()):
            raise UserError(f"output {out} already exists and is not empty; choose a new folder")
    scenarios = find_scenarios(root)
    if not scenarios:
        raise UserError(f"no performance runs under {root}; run python run.py --official "
                        "--all-tests ... --output DIR first")
    for runs in scenarios:  # each becomes a folder of the tree
        require_component(runs.system, f"system name (a folder of {root})")
        require_component(runs.model, f"model name (a folder of {root}/{runs.system!r})")
        require_component(runs.scenario, f"scenario (a folder of {root}/{runs.system!r})")
    problems = [p for runs in scenarios
                for p in scenario_problems(runs, division, require_official)]
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise UserError(f"refusing to package: {problems[0]}{more}")
    if division == "closed" and len({r.model for r in scenarios}) > 1:
        raise UserError("a closed submission has one model per benchmark; package one model")

    staging = out.parent / f".{out.name}.staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        packaged = _build(scenarios, staging / division / submitter, division, submitter,
                          system_file, status, system_type, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # a failed packaging leaves nothing behind
        raise
    if out.exists():
        out.rmdir()
    staging.rename(out)
    return packaged
