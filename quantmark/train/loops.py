"""The training loops train-bench times, one per framework, run inside its child process.

Both train one seeded synthetic batch with SGD (momentum) and cross-entropy, time each step
after the warm-up, and return the figures with the evidence of what precision computed: the
output dtype of the first convolution under autocast (torch) or the Keras policy (TF).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import cpu_model

SEED = 0
LEARNING_RATE = 0.01
MOMENTUM = 0.9
NUM_CLASSES = 1000
# zoo name -> tf.keras.applications class (random weights: the architecture is what counts)
KERAS_APPS = {"vgg16": "VGG16", "vgg19": "VGG19", "resnet50": "ResNet50",
              "mobilenetv1": "MobileNet", "mobilenetv2": "MobileNetV2",
              "densenet121": "DenseNet121", "densenet201": "DenseNet201",
              "efficientnetb0": "EfficientNetB0"}


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


def rss_mb() -> float:
    """This process's peak resident memory so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def cpu_memory() -> dict[str, Any]:
    return {"kind": "cpu", "peak_mb": rss_mb(),
            "source": "getrusage(RUSAGE_SELF).ru_maxrss of the training process"}


def timed_loop(job: Job, step: Callable[[], float], sync: Callable[[], None]) -> dict[str, Any]:
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


def train_torch(job: Job) -> dict[str, Any]:
    import torch
    from torch import nn

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
    model, images, labels = _torch_model_and_batch(torch, job, device, batch)
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
    rss_before = rss_mb()
    build_s = time.perf_counter() - built
    measured = timed_loop(job, step, sync)
    hook.remove()
    evidence["compute_dtype"] = evidence["first_conv_output_dtype"].removeprefix("torch.")
    memory = ({"kind": "gpu", "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
               "source": "torch.cuda.max_memory_allocated"} if gpu else cpu_memory())
    executed = ("fp32" if not amp else "fp16 autocast + GradScaler" if gpu
                else "bf16 autocast")
    return {
        **measured, **_torch_facts(torch, gpu, device, amp, amp_dtype, scaler),
        "batch_size": batch, "executed_precision": executed, "build_s": build_s,
        "rss_before_training_mb": rss_before, "memory": memory,
        "architecture": f"quantmark models zoo {job.model} (torch, random init seed {SEED})",
        "amp": {**_torch_amp(amp, amp_dtype, device, scaler), "evidence": evidence},
    }


def _torch_model_and_batch(torch: Any, job: Job, device: Any, batch: int
                           ) -> tuple[Any, Any, Any]:
    """The zoo's torch network (seeded) in training mode and one seeded synthetic batch."""
    from quantmark.models.zoo import get_model

    torch.manual_seed(SEED)
    model = get_model(job.model).builder(NUM_CLASSES).to(device).train()
    gen = torch.Generator().manual_seed(SEED)
    images = torch.randn(batch, 3, job.image_size, job.image_size, generator=gen).to(device)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=gen).to(device)
    return model, images, labels


def _torch_facts(torch: Any, gpu: bool, device: Any, amp: bool, amp_dtype: Any,
                 scaler: Any) -> dict[str, Any]:
    """Where torch trained and with which software."""
    return {"device": "gpu" if gpu else "cpu",
            "device_name": torch.cuda.get_device_name() if gpu else cpu_model(),
            "layout": "NCHW", "threads": torch.get_num_threads(), "cudnn_benchmark": gpu,
            "software": {"torch": torch.__version__,
                         "cuda": torch.version.cuda if gpu else None}}


def _torch_amp(amp: bool, amp_dtype: Any, device: Any, scaler: Any) -> dict[str, Any]:
    """How torch's mixed precision was set up (autocast dtype, GradScaler)."""
    return {"enabled": amp, "dtype": str(amp_dtype).removeprefix("torch.") if amp else None,
            "mechanism": f"torch.autocast({device.type!r}, {amp_dtype})" if amp else None,
            "grad_scaler": scaler is not None,
            "final_loss_scale": scaler.get_scale() if scaler is not None else None}


def train_tf(job: Job) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    gpu, gpus = _tf_device(tf, job)
    batch = job.batch_size or (32 if gpu else 8)
    amp = job.precision == "amp"
    policy = "float32" if not amp else "mixed_float16" if gpu else "mixed_bfloat16"
    built = time.perf_counter()
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(SEED)
    size = job.image_size
    model = _keras_model(keras, job, policy)
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
    rss_before = rss_mb()
    build_s = time.perf_counter() - built
    measured = timed_loop(job, step, lambda: None)  # train_on_batch returns a host float
    memory = ({"kind": "gpu",
               "peak_mb": tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20,
               "source": "tf.config.experimental.get_memory_info('GPU:0')['peak']"} if gpu
              else cpu_memory())
    executed = ("fp32" if not amp else "mixed_float16 + LossScaleOptimizer" if gpu
                else "mixed_bfloat16")
    return {
        **measured, **_tf_facts(tf, keras, gpu, gpus), "batch_size": batch,
        "executed_precision": executed, "build_s": build_s,
        "rss_before_training_mb": rss_before, "memory": memory,
        "architecture": f"keras.applications.{KERAS_APPS[job.model]} (weights=None, seed "
                        f"{SEED})",
        "amp": {"enabled": amp, "dtype": policy.removeprefix("mixed_") if amp else None,
                "mechanism": f"keras mixed precision policy {policy}" if amp else None,
                "grad_scaler": policy == "mixed_float16", "evidence": evidence},
    }


def _tf_device(tf: Any, job: Job) -> tuple[bool, list[Any]]:
    """Threads and the device TensorFlow trains on: (on a GPU, the GPUs it sees)."""
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
    return gpu, gpus


def _keras_model(keras: Any, job: Job, policy: str) -> Any:
    """The Keras application, compiled with SGD (loss-scaled under mixed_float16)."""
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
    return model


def _tf_facts(tf: Any, keras: Any, gpu: bool, gpus: list[Any]) -> dict[str, Any]:
    """Where TensorFlow trained, its threads and software."""
    details = tf.config.experimental.get_device_details(gpus[0]) if gpu else {}
    return {"device": "gpu" if gpu else "cpu",
            "device_name": details.get("device_name", "GPU") if gpu else cpu_model(),
            "layout": "NHWC", "jit_compile": False,
            "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                        "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
            "software": {"tensorflow": tf.__version__, "keras": keras.__version__}}
