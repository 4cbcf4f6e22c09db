"""The framework's own tight loop on quantmark's artifact: the reference side of the parity
benchmark for frameworks without a shipped benchmark tool, and the real-sample side where a
shipped tool can only feed one constant input.

Each loop uses the framework's recommended call path and nothing of quantmark's harness:

* ONNX Runtime: a fresh ``InferenceSession`` with ORT's defaults (all graph optimizations,
  spinning intra-op threads), ``session.run`` in a loop;
* LiteRT: the ``CompiledModel`` API with tensor buffers, as ``litert-benchmark`` calls it, for
  the model's own batch; the ``Interpreter`` resized to the batch otherwise (``CompiledModel``
  cannot resize an input), its input written through the zero-copy tensor view;
* PyTorch: ``torch.utils.benchmark.Timer`` under ``torch.inference_mode`` on the module the
  SUT loaded;
* TensorFlow: the ``tf.function`` the SUT traced over the SavedModel's serving signature.

``--input constant`` feeds one batch of real samples over and over (what the shipped tools do
with their random input); ``--input real`` cycles, in a seeded random order, through as many of
the run's own preprocessed samples as LoadGen keeps loaded (the model's performance sample
count: 1024, 150-600 MB), so the working set is the run's, not one that fits in the CPU's
cache. The samples come from the task's own QSL, so a detector's are letterboxed in the
backend's layout (NCHW for OpenVINO, NHWC for LiteRT) as its SUT is fed; the loop stops at the
model's output, where a detector's SUT goes on to its NMS (``quantmark.bench.
parity_postprocess`` times that part). Prints one JSON object on stdout:

    python -m quantmark.bench.vendor_loops --sut ort-int8 --model resnet50 --batch-size 8 \\
        --metric throughput --input real --seconds 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

WARMUP_CALLS = 5
SEED = 0


@dataclass(frozen=True)
class Loaded:
    """A SUT's backend loaded as a run loads it, with what its samples come from."""

    spec: Any
    dataset: Any
    backend: Any
    task: Any
    info: Any  # the SUT's registry entry (SutInfo)


def prepared_backend(sut: str, model: str, batch: int, threads: int,
                     model_path: str | None = None) -> Loaded:
    """The SUT's backend, loaded as a run loads it (its artifact from quantmark's cache)."""
    from quantmark.ground.config import RunConfig
    from quantmark.run.test_process import build_sut
    from quantmark.tasks.catalog import task_for

    config = RunConfig(scenario="Offline" if batch > 1 else "SingleStream", sut=sut,
                       model=model, batch_size=batch, threads=threads, model_path=model_path)
    spec, info, dataset, _calibration, backend, _times = build_sut(config)
    return Loaded(spec, dataset, backend, task_for(config), info)


def real_batches(loaded: Loaded, batch: int, samples: int | None = None
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The run's own preprocessed samples, as many as its QSL keeps loaded (or ``samples``),
    shuffled into batches, and the QSL indices of each. The task's own QSL makes them, so a
    detector's are letterboxed as its SUT is fed (NCHW or NHWC, the backend's layout), and
    encoded as the backend's input (a full-integer model's int8)."""
    qsl = loaded.task.sample_library(loaded.dataset, loaded.spec, loaded.backend)
    order = np.random.default_rng(SEED).permutation(qsl.performance_count)[:samples]
    count = -(-len(order) // batch)
    indices = np.resize(order, count * batch)
    qsl.load(order)
    chunks = [indices[i * batch:(i + 1) * batch] for i in range(count)]
    return [qsl.batch(chunk) for chunk in chunks], chunks


def distinct(indices: Sequence[np.ndarray]) -> int:
    """How many different samples the batches hold (the last one is topped up from the
    first ones)."""
    return len(np.unique(np.concatenate(indices)))


def timed_loop(call: Callable[[np.ndarray], Any], batches: Sequence[np.ndarray],
               seconds: float) -> list[float]:
    """Durations of back-to-back calls cycling through ``batches`` for ``seconds``."""
    for data in batches[:WARMUP_CALLS]:
        call(data)
    durations: list[float] = []
    deadline = time.perf_counter() + seconds
    for data in itertools.cycle(batches):
        start = time.perf_counter()
        call(data)
        durations.append(time.perf_counter() - start)
        if start > deadline:
            return durations
    raise AssertionError("unreachable")


def ort_call(backend: Any, threads: int, api: str) -> tuple[Callable[[np.ndarray], Any], str]:
    import onnxruntime as ort

    options = ort.SessionOptions()  # ORT's defaults: ENABLE_ALL, spinning intra-op threads
    if threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(backend.model_path, sess_options=options,
                                   providers=["CPUExecutionProvider"])
    name, output = session.get_inputs()[0].name, session.get_outputs()[0].name
    if api != "iobinding":
        return (lambda x: session.run(None, {name: x})), "InferenceSession.run (ORT defaults)"
    binding = session.io_binding()

    def bound(x: np.ndarray) -> None:
        binding.bind_cpu_input(name, x)
        binding.bind_output(output, "cpu")
        session.run_with_iobinding(binding)

    return bound, "InferenceSession.run_with_iobinding (ORT defaults)"


def litert_call(backend: Any, batch: int, threads: int, api: str
                ) -> tuple[Callable[[np.ndarray], Any], str]:
    threads = threads or backend.threads
    if batch == 1 and api != "interpreter":
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
        from ai_edge_litert.options import CpuOptions, Options

        model = CompiledModel.from_file(backend.model_path, options=Options(
            hardware_accelerators=HardwareAccelerator(HardwareAccelerator.CPU),
            cpu_options=CpuOptions(num_threads=threads)))
        signature = next(iter(model.get_signature_list()))
        inputs = {n: model.create_input_buffer_by_name(signature, n)
                  for n in model.get_input_tensor_details(signature)}
        outputs = {n: model.create_output_buffer_by_name(signature, n)
                   for n in model.get_output_tensor_details(signature)}
        first = inputs[next(iter(inputs))]

        def run(x: np.ndarray) -> None:
            first.write(x)
            model.run_by_name(signature, inputs, outputs)

        return run, "CompiledModel.run_by_name with tensor buffers"
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=backend.model_path, num_threads=threads)
    index = interpreter.get_input_details()[0]["index"]
    shape = list(interpreter.get_input_details()[0]["shape"])
    interpreter.resize_tensor_input(index, [batch, *shape[1:]])
    interpreter.allocate_tensors()
    view = interpreter.tensor(index)  # zero-copy: write straight into the input tensor

    def invoke(x: np.ndarray) -> None:
        view()[...] = x
        interpreter.invoke()

    return invoke, f"Interpreter at batch {batch}, input written through its tensor view"


def torch_durations(backend: Any, batches: Sequence[np.ndarray], seconds: float
                    ) -> tuple[list[float], str]:
    """torch.utils.benchmark's blocked measurement: per-call times of blocks of calls."""
    import torch
    from torch.utils import benchmark

    tensors = itertools.cycle([torch.from_numpy(b) for b in batches])
    module = backend._run

    def call() -> None:
        with torch.inference_mode():
            module(next(tensors))

    for _ in range(WARMUP_CALLS):
        call()
    timer = benchmark.Timer(stmt="call()", globals={"call": call},
                            num_threads=torch.get_num_threads())
    measurement = timer.blocked_autorange(min_run_time=seconds)
    return list(measurement.times), "torch.utils.benchmark.Timer.blocked_autorange"


def tf_call(backend: Any) -> tuple[Callable[[np.ndarray], Any], str]:
    tf, fn = backend._tf, backend._fn
    return (lambda x: fn(tf.constant(x)).numpy()), "tf.function over serving_default"


def measure(sut: str, model: str, batch: int, threads: int, regime: str,
            seconds: float, model_path: str | None = None, api: str = "default",
            samples: int | None = None) -> dict[str, Any]:
    loaded = prepared_backend(sut, model, batch, threads, model_path)
    backend = loaded.backend
    batches, indices = real_batches(loaded, batch, samples)
    if regime == "constant":
        batches, indices = batches[:1], indices[:1]
    framework = sut.split("-")[0]
    if framework == "torch":
        durations, used = torch_durations(backend, batches, seconds)
    else:
        call, used = {"ort": lambda: ort_call(backend, threads, api),
                      "tflite": lambda: litert_call(backend, batch, threads, api),
                      "tf": lambda: tf_call(backend)}[framework]()
        durations = timed_loop(call, batches, seconds)
    median = statistics.median(durations)
    return {"sut": sut, "model": model, "batch": batch, "input": regime, "api": used,
            "distinct_samples": distinct(indices),
            "threads": threads, "calls": len(durations), "median_ms": median * 1e3,
            "samples_per_s": batch * len(durations) / sum(durations),
            "model_file": getattr(backend, "model_path", None)}


def write_npy(sut: str, model: str, batch: int, threads: int, folder: str,
              model_path: str | None = None, samples: int | None = None) -> list[str]:
    """The run's own preprocessed batches as ``.npy`` files (benchmark_app's ``-i`` input:
    file k fills slot k of each batch from its own row k, so every file is a full batch;
    benchmark_app makes one tensor per file and sets them in turn). The files are topped up
    to a multiple of the batch by repeating the first ones: benchmark_app drops the files
    past the last whole multiple (a detector's 356 samples make 45 batches of 8)."""
    batches, _indices = real_batches(prepared_backend(sut, model, batch, threads, model_path),
                                     batch, samples)
    whole = -(-len(batches) // batch) * batch
    batches = [batches[i % len(batches)] for i in range(whole)]
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, data in enumerate(batches):
        path = target / f"batch-{number:04d}.npy"
        np.save(path, data)
        paths.append(str(path))
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sut", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--model-path", default=None, help="the run's --model-path, if any")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--input", choices=("constant", "real"), default="real")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--api", choices=("default", "iobinding", "interpreter"),
                        default="default", help="ORT: iobinding; LiteRT at batch 1: the "
                        "Interpreter with a tensor view instead of CompiledModel")
    parser.add_argument("--samples", type=int, default=None,
                        help="distinct samples (default: the model's performance sample count)")
    parser.add_argument("--write-npy", metavar="FOLDER",
                        help="write the real batches as .npy files instead of timing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.write_npy:
        paths = write_npy(args.sut, args.model, args.batch_size, args.threads, args.write_npy,
                          args.model_path, args.samples)
        print(json.dumps({"written": paths}))
        return
    print(json.dumps(measure(args.sut, args.model, args.batch_size, args.threads, args.input,
                             args.seconds, args.model_path, args.api, args.samples)))


if __name__ == "__main__":
    main()
