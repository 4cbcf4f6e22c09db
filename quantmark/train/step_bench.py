"""train-bench: step time, images/s and peak memory of training, FP32 vs mixed precision.

Each (framework, precision) trains in its own process: the peak memory is that
configuration's alone, and torch and TensorFlow never share a process. The child trains on one
seeded synthetic batch (SGD with momentum, cross-entropy), times every step after the warm-up
and writes its figures to a JSON file; the parent writes them atomically into the output folder
as ``<framework>-<model>-b<batch>[-s<size>]-<precision>.json`` and summarises every record
there (``train_bench.md``, ``train_bench.csv``). AMP is fp16 autocast + GradScaler (torch) or
mixed_float16 + LossScaleOptimizer (TF) on a GPU; bf16 autocast / mixed_bfloat16 on a CPU.

    python -m quantmark.train.step_bench CONFIG.json RESULT.json     # the child (used internally)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.fingerprint import machine, software
from quantmark.ground.hashing import atomic_write_json, atomic_write_text
from quantmark.ground.records import TrainBenchRecord, write_record
from quantmark.train.loops import (
    KERAS_APPS,
    LEARNING_RATE,
    MOMENTUM,
    NUM_CLASSES,
    SEED,
    Job,
    rss_mb,
    train_tf,
    train_torch,
)

FRAMEWORKS = ("torch", "tf")
PRECISIONS = ("fp32", "amp")
DEVICES = ("auto", "cpu", "gpu")
_PACKAGES = {"torch": ("torch",), "tf": ("tensorflow", "keras")}


def parse_list(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if not items or bad:
        raise UserError(f"{flag} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return list(dict.fromkeys(items))


def check(frameworks: list[str], model: str, steps: int, warmup: int, batch_size: int | None,
          image_size: int | None, threads: int = 0) -> int:
    """Every bad input as one UserError line, before a child starts; returns the image size."""
    from quantmark.models.zoo import get_model

    spec = get_model(model)
    for framework in frameworks:
        missing = [p for p in _PACKAGES[framework] if importlib.util.find_spec(p) is None]
        if missing:
            raise UserError(f"--framework {framework} needs {' and '.join(missing)}, which is "
                            f"not installed: pip install 'quantmark[{framework}]'")
        if framework == "tf" and model not in KERAS_APPS:
            raise UserError(f"--framework tf has no Keras model for {model}: choose one of "
                            f"{', '.join(KERAS_APPS)}")
    if model.startswith("efficientnet-lite") and importlib.util.find_spec(
            "efficientnet_lite_pytorch") is None:
        raise UserError(f"{model} needs efficientnet-lite-pytorch: pip install "
                        "'quantmark[torch]', or choose another --model")
    if steps < 1:
        raise UserError(f"--steps {steps}: must be 1 or more")
    if warmup < 0:
        raise UserError(f"--warmup {warmup}: must be 0 or more")
    if batch_size is not None and batch_size < 1:
        raise UserError(f"--batch-size {batch_size}: must be 1 or more")
    if threads < 0:
        raise UserError(f"--threads {threads}: must be 0 (the framework's default) or more")
    size = spec.input_size if image_size is None else image_size
    if size < 32:
        raise UserError(f"--image-size {size}: must be 32 or more")
    return size


def step_stats(times: list[float]) -> dict[str, float]:
    """Median, mean, nearest-rank p90 (as LoadGen ranks), min and max of the step times."""
    ordered = sorted(times)
    return {"median": statistics.median(ordered), "mean": statistics.fmean(ordered),
            "p90": ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)],
            "min": ordered[0], "max": ordered[-1]}


def run_child(job: Job) -> dict[str, Any]:
    """Train ``job`` in this process; every figure of the record but the machine's."""
    from quantmark.models.zoo import get_model

    measured = train_torch(job) if job.framework == "torch" else train_tf(job)
    losses = measured["losses"]
    memory = measured["memory"]
    if memory["kind"] == "cpu":
        memory["training_increment_mb"] = memory["peak_mb"] - measured["rss_before_training_mb"]
    memory["peak_rss_mb"] = rss_mb()
    memory["rss_before_training_mb"] = measured.pop("rss_before_training_mb")
    times = {**measured.pop("times"), "build_s": measured.pop("build_s")}
    stats = step_stats(measured["step_times_s"])
    return {  # the parent types it (ground.records.TrainBenchRecord) and adds the machine
        **asdict(job), "warmup_steps": job.warmup,
        **measured, "memory": memory, "times": times,
        "step_time_s": stats, "images_per_s": measured["batch_size"] / stats["median"],
        "images_per_s_mean": measured["batch_size"] * job.steps / sum(measured["step_times_s"]),
        "loss_first": losses[0], "loss_last": losses[-1],
        "loss_finite": all(math.isfinite(v) for v in losses),
        "num_classes": NUM_CLASSES, "default_image_size": get_model(job.model).input_size,
        "data": f"synthetic: one batch of N(0,1) images and uniform labels (seed {SEED}), "
                "reused every step",
        "optimizer": {"name": "SGD", "lr": LEARNING_RATE, "momentum": MOMENTUM},
        "loss_function": "cross-entropy",
    }


def child_main(argv: list[str]) -> int:
    job_path, result_path = Path(argv[0]), Path(argv[1])
    try:
        record = run_child(Job(**json.loads(job_path.read_text())))
        status: dict[str, Any] = {"status": "ok", "record": record}
    except UserError as exc:
        status = {"status": "user_error", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any crash becomes one line for the parent
        traceback.print_exc(file=sys.stderr)
        status = {"status": "failed", "message": f"{type(exc).__name__}: {exc}"}
    atomic_write_json(result_path, status)
    return 0 if status["status"] == "ok" else 1


def _run_child(job: Job, log: Path) -> dict[str, Any]:
    """Start the child, reap it (killing it on Ctrl-C), return its status."""
    from quantmark.run.launch import child_env

    with tempfile.TemporaryDirectory(prefix="quantmark-train-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(asdict(job)))
        command = [sys.executable, "-m", "quantmark.train.step_bench", str(job_path),
                   str(result_path)]
        with open(log, "wb") as output:
            process = subprocess.Popen(command, env=child_env(), stdout=output,
                                       stderr=subprocess.STDOUT)
            try:
                code = process.wait()
            except BaseException:
                process.kill()
                process.wait()
                raise
        if result_path.is_file():
            return json.loads(result_path.read_text())
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return {"status": "failed", "message": f"exited with code {code}: {tail[0]}"}


def run(frameworks: list[str], model: str, precisions: list[str], steps: int, warmup: int,
        batch_size: int | None, image_size: int | None, device: str, output: str | Path,
        threads: int = 0,
        on_record: Callable[[dict[str, Any]], None] = lambda record: None) -> list[Path]:
    """Train every framework x precision in its own process and write one JSON for each into
    ``output`` (``on_record`` sees each as it is written). Returns the paths written."""
    from quantmark.report.training import file_name

    size = check(frameworks, model, steps, warmup, batch_size, image_size, threads)
    out = Path(output)
    written = []
    for framework in frameworks:
        for precision in precisions:
            job = Job(framework, model, precision, steps, warmup, batch_size, size, device,
                      threads)
            with tempfile.NamedTemporaryFile(prefix="train-bench-", suffix=".log") as log:
                status = _run_child(job, Path(log.name))
            what = f"train-bench {framework} {model} {precision}"
            if status["status"] == "user_error":
                raise UserError(f"{what}: {status['message']}")
            if status["status"] != "ok":
                raise SutError(f"{what}: {status['message']}")
            measured = status["record"]
            record = TrainBenchRecord.from_dict({
                **measured, "machine": machine(),
                "software": {**software(), **measured["software"]},
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, what)
            path = out / file_name(framework, model, record.batch_size, size,
                                   measured["default_image_size"], precision)
            write_record(path, record)
            written.append(path)
            on_record({**record.to_dict(), "path": str(path)})
    return written


def write_summary(output: str | Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """``train_bench.md`` and ``train_bench.csv`` of every record in ``output``."""
    from quantmark.report import training

    out = Path(output)
    table = training.rows(training.load([out]))
    md = out / "train_bench.md"
    csv_path = out / "train_bench.csv"
    atomic_write_text(md, "\n".join(["# quantmark train-bench", "",
                                     *training.markdown(table)]) + "\n")
    atomic_write_text(csv_path, training.to_csv(table))
    return table, [md, csv_path]


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(child_main(sys.argv[1:]))
