"""train-bench: step time, images/s and peak memory of training, FP32 vs mixed precision.

Each (framework, precision) trains in its own process: the peak memory is that
configuration's alone, and torch and TensorFlow never share a process. The child trains on one
seeded synthetic batch (SGD with momentum, cross-entropy), times every step after the warm-up
and writes its figures to a JSON file; the parent writes them atomically into the output folder
as ``<framework>-<model>-b<batch>[-s<size>]-<precision>.json`` and summarises every record
there (``train_bench.md``, ``train_bench.csv``). AMP is fp16 autocast + GradScaler (torch) or
mixed_float16 + LossScaleOptimizer (TF) on a GPU; bf16 autocast / mixed_bfloat16 on a CPU.

    python -m quantmark.train_bench CONFIG.json RESULT.json     # the child (used internally)
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quantmark.errors import SutError, UserError
from quantmark.fingerprint import cpu_model, machine, software
from quantmark.hashing import atomic_write_json, atomic_write_text

FRAMEWORKS = ("torch", "tf")
PRECISIONS = ("fp32", "amp")
DEVICES = ("auto", "cpu", "gpu")
SEED = 0
LEARNING_RATE = 0.01
MOMENTUM = 0.9
NUM_CLASSES = 1000
# zoo name -> tf.keras.applications class (random weights: the architecture is what counts)
KERAS_APPS = {"vgg16": "VGG16", "vgg19": "VGG19", "resnet50": "ResNet50",
              "mobilenetv1": "MobileNet", "mobilenetv2": "MobileNetV2",
              "densenet121": "DenseNet121", "densenet201": "DenseNet201",
              "efficientnetb0": "EfficientNetB0"}
_PACKAGES = {"torch": ("torch",), "tf": ("tensorflow", "keras")}


@dataclass(frozen=True)
class Job:
    """One child's work: a framework, a model, one precision."""

    framework: str
    model: str
    precision: str
    steps: int
    warmup: int
    batch_size: int | None  # None: 32 on a GPU, 8 on a CPU (the child knows which)
    image_size: int
    device: str = "auto"
    threads: int = 0  # CPU threads of the framework; 0: its default (every core)


def parse_list(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if not items or bad:
        raise UserError(f"{flag} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return list(dict.fromkeys(items))


def check(frameworks: list[str], model: str, steps: int, warmup: int, batch_size: int | None,
          image_size: int | None, threads: int = 0) -> int:
    """Every bad input as one UserError line, before a child starts; returns the image size."""
    from models.zoo import get_model

    spec = get_model(model)
    for framework in frameworks:
        missing = [p for p in _PACKAGES[framework] if importlib.util.find_spec(p) is None]
        if missing:
            raise UserError(f"--framework {framework} needs {' and '.join(missing)}, which is "
                            f"not installed: pip install 'quantmark[{framework}]'")
        if framework == "tf" and model not in KERAS_APPS:
            raise UserError(f"--framework tf has no Keras model for {model}: choose one of "
                            f"{', '.join(KERAS_APPS)}")
    if model == "efficientnet-lite0" and importlib.util.find_spec(
            "efficientnet_lite_pytorch") is None:
        raise UserError("efficientnet-lite0 needs efficientnet-lite-pytorch: pip install "
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


def _rss_mb() -> float:
    """This process's peak resident memory so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _cpu_memory() -> dict[str, Any]:
    return {"kind": "cpu", "peak_mb": _rss_mb(),
            "source": "getrusage(RUSAGE_SELF).ru_maxrss of the training process"}


def _timed_loop(job: Job, step: Callable[[], float], sync: Callable[[], None]) -> dict[str, Any]:
    """Warm-up (the first step apart: graph building, compilation), then the timed steps."""
    losses: list[float] = []
    started = time.perf_counter()
    first_step_s = 0.0
    for i in range(job.warmup):
        losses.append(step())
        sync()
        if i == 0:
            first_step_s = time.perf_counter() - started
    warmup_s = time.perf_counter() - started
    times = []
    for _ in range(job.steps):
        begin = time.perf_counter()
        losses.append(step())
        sync()
        times.append(time.perf_counter() - begin)
    if job.warmup == 0:
        first_step_s = times[0]
    return {"times": {"first_step_s": first_step_s, "warmup_s": warmup_s,
                      "timed_s": sum(times)},
            "step_times_s": times, "losses": losses}


def _torch_child(job: Job) -> dict[str, Any]:
    import torch
    from torch import nn

    from models.zoo import get_model

    gpu = job.device == "gpu" or (job.device == "auto" and torch.cuda.is_available())
    if gpu and not torch.cuda.is_available():
        raise UserError("--device gpu: torch sees no CUDA GPU here; use --device cpu or auto")
    device = torch.device("cuda" if gpu else "cpu")
    batch = job.batch_size or (32 if gpu else 8)
    amp = job.precision == "amp"
    amp_dtype = torch.float16 if gpu else torch.bfloat16
    if job.threads:
        torch.set_num_threads(job.threads)
    built = time.perf_counter()
    torch.manual_seed(SEED)
    model = get_model(job.model).builder(NUM_CLASSES).to(device).train()
    gen = torch.Generator().manual_seed(SEED)
    images = torch.randn(batch, 3, job.image_size, job.image_size, generator=gen).to(device)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=gen).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda") if amp and gpu else None
    evidence: dict[str, str] = {}
    conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))

    def record_dtype(_module: Any, _inputs: Any, output: torch.Tensor) -> None:
        evidence.setdefault("first_conv_output_dtype", str(output.dtype))

    hook = conv.register_forward_hook(record_dtype)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            logits = model(images)
            loss = loss_fn(logits, labels)
        evidence.setdefault("logits_dtype", str(logits.dtype))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.item()

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.backends.cudnn.benchmark = True  # picks conv algorithms during the warm-up
        torch.cuda.reset_peak_memory_stats()
    rss_before = _rss_mb()
    build_s = time.perf_counter() - built
    measured = _timed_loop(job, step, sync)
    hook.remove()
    evidence["compute_dtype"] = evidence["first_conv_output_dtype"].removeprefix("torch.")
    memory = ({"kind": "gpu", "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
               "source": "torch.cuda.max_memory_allocated"} if gpu else _cpu_memory())
    executed = ("fp32" if not amp else "fp16 autocast + GradScaler" if gpu
                else "bf16 autocast")
    return {
        **measured, "device": "gpu" if gpu else "cpu",
        "device_name": torch.cuda.get_device_name() if gpu else cpu_model(),
        "batch_size": batch, "executed_precision": executed, "build_s": build_s,
        "rss_before_training_mb": rss_before, "memory": memory,
        "architecture": f"quantmark models zoo {job.model} (torch, random init seed {SEED})",
        "layout": "NCHW", "threads": torch.get_num_threads(), "cudnn_benchmark": gpu,
        "amp": {"enabled": amp, "dtype": str(amp_dtype).removeprefix("torch.") if amp else None,
                "mechanism": f"torch.autocast({device.type!r}, {amp_dtype})" if amp else None,
                "grad_scaler": scaler is not None,
                "final_loss_scale": scaler.get_scale() if scaler is not None else None,
                "evidence": evidence},
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda if gpu else None},
    }


def _tf_child(job: Job) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    if job.threads:
        tf.config.threading.set_intra_op_parallelism_threads(job.threads)
        tf.config.threading.set_inter_op_parallelism_threads(job.threads)
    gpus = tf.config.list_physical_devices("GPU")
    if job.device == "gpu" and not gpus:
        raise UserError("--device gpu: TensorFlow sees no GPU here; use --device cpu or auto")
    gpu = bool(gpus) and job.device != "cpu"
    if not gpu:
        tf.config.set_visible_devices([], "GPU")
    for found in gpus if gpu else []:
        tf.config.experimental.set_memory_growth(found, True)
    batch = job.batch_size or (32 if gpu else 8)
    amp = job.precision == "amp"
    policy = "float32" if not amp else "mixed_float16" if gpu else "mixed_bfloat16"
    built = time.perf_counter()
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(SEED)
    size = job.image_size
    base = getattr(keras.applications, KERAS_APPS[job.model])(
        weights=None, input_shape=(size, size, 3), classes=NUM_CLASSES,
        classifier_activation=None)
    # logits back to float32 for the loss, as the mixed-precision guide does
    outputs = keras.layers.Activation("linear", dtype="float32")(base.output)
    model = keras.Model(base.input, outputs)
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=MOMENTUM)
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    # XLA off: the same plain graph for both precisions, and no minutes of compiling on a CPU
    model.compile(optimizer=optimizer, jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(SEED)
    with tf.device("/GPU:0" if gpu else "/CPU:0"):
        images = tf.constant(rng.standard_normal((batch, size, size, 3), dtype=np.float32))
        labels = tf.constant(rng.integers(0, NUM_CLASSES, batch, dtype=np.int32))
    conv = next(layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D))
    probe = keras.Model(model.input, conv.output)(images[:1])
    conv_dtype = probe.dtype.name if hasattr(probe.dtype, "name") else str(probe.dtype)
    evidence = {"policy": policy, "policy_compute_dtype": model.dtype_policy.compute_dtype,
                "variable_dtype": model.dtype_policy.variable_dtype,
                "first_conv_output_dtype": conv_dtype, "compute_dtype": conv_dtype}

    def step() -> float:
        return float(model.train_on_batch(images, labels))

    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    rss_before = _rss_mb()
    build_s = time.perf_counter() - built
    measured = _timed_loop(job, step, lambda: None)  # train_on_batch returns a host float
    memory = ({"kind": "gpu",
               "peak_mb": tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20,
               "source": "tf.config.experimental.get_memory_info('GPU:0')['peak']"} if gpu
              else _cpu_memory())
    executed = ("fp32" if not amp else "mixed_float16 + LossScaleOptimizer" if gpu
                else "mixed_bfloat16")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpu else {}
    return {
        **measured, "device": "gpu" if gpu else "cpu",
        "device_name": details.get("device_name", "GPU") if gpu else cpu_model(),
        "batch_size": batch, "executed_precision": executed, "build_s": build_s,
        "rss_before_training_mb": rss_before, "memory": memory,
        "architecture": f"keras.applications.{KERAS_APPS[job.model]} (weights=None, seed "
                        f"{SEED})", "layout": "NHWC", "jit_compile": False,
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
        "amp": {"enabled": amp, "dtype": policy.removeprefix("mixed_") if amp else None,
                "mechanism": f"keras mixed precision policy {policy}" if amp else None,
                "grad_scaler": policy == "mixed_float16", "evidence": evidence},
        "software": {"tensorflow": tf.__version__, "keras": keras.__version__},
    }


def run_child(job: Job) -> dict[str, Any]:
    """Train ``job`` in this process; every figure of the record but the machine's."""
    from models.zoo import get_model

    measured = _torch_child(job) if job.framework == "torch" else _tf_child(job)
    losses = measured["losses"]
    memory = measured["memory"]
    if memory["kind"] == "cpu":
        memory["training_increment_mb"] = memory["peak_mb"] - measured["rss_before_training_mb"]
    memory["peak_rss_mb"] = _rss_mb()
    memory["rss_before_training_mb"] = measured.pop("rss_before_training_mb")
    times = {**measured.pop("times"), "build_s": measured.pop("build_s")}
    stats = step_stats(measured["step_times_s"])
    return {
        "kind": "train-bench", "schema": 1, **asdict(job), "warmup_steps": job.warmup,
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
    from quantmark.launcher import child_env

    with tempfile.TemporaryDirectory(prefix="quantmark-train-") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(asdict(job)))
        command = [sys.executable, "-m", "quantmark.train_bench", str(job_path),
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
    from report.training import file_name

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
            record = status["record"]
            record["machine"] = machine()
            record["software"] = {**software(), **record["software"]}
            record["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            path = out / file_name(framework, model, record["batch_size"], size,
                                   record["default_image_size"], precision)
            atomic_write_json(path, record)
            written.append(path)
            on_record({**record, "path": str(path)})
    return written


def write_summary(output: str | Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """``train_bench.md`` and ``train_bench.csv`` of every record in ``output``."""
    from report import training

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
