"""OpenVINO's own benchmark tool, ``benchmark_app`` (shipped in the openvino wheel): the command
that reruns an ov SUT's figure in it with the settings the SUT's compiled model reported, so
both tools run the same IR with the same hint, batch, streams, requests, threads and pinning."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

TOOL = "benchmark_app"
LATENCY_SCENARIOS = ("SingleStream", "MultiStream")
#: the SUT's inference-precision hint in benchmark_app's -infer_precision spelling
HINT_PRECISION = {"f32": "f32", "bf16": "bf16", "f16": "f16"}


def benchmark_app_command(model_file: str, scenario: str, batch_size: int,
                          compiled: dict[str, Any], explicit: bool = False,
                          seconds: int = 10, shapes: Sequence[str] = ()) -> str:
    """benchmark_app's command line for this IR, as the SUT compiled and drove it.

    With the SUT's hint alone the plugin picks the same streams and threads in both tools.
    ``explicit`` (the user set --threads) spells streams, threads and pinning out instead:
    benchmark_app takes those only with ``-hint none``. ``shapes``: a text model's token
    input shapes (``-shape``/``-data_shape``, batch included), fed as the int64 they are."""
    latency = scenario in LATENCY_SCENARIOS
    if shapes:  # no -b: the batch is in the shapes (token inputs have no known layout)
        args = [TOOL, "-m", model_file, "-d", "CPU", *shapes, "-t", str(seconds)]
    else:  # -ip f32: benchmark_app otherwise feeds an image as u8, converted in the graph
        args = [TOOL, "-m", model_file, "-d", "CPU", "-b", str(batch_size), "-t",
                str(seconds), "-ip", "f32"]
    if explicit:
        args += ["-hint", "none", "-nstreams", str(compiled["num_streams"]),
                 "-nthreads", str(compiled["inference_num_threads"]),
                 "-pin", "YES" if compiled.get("enable_cpu_pinning") else "NO"]
    else:
        args += ["-hint", "latency" if latency else "throughput"]
    if not latency:
        args += ["-nireq", str(compiled["optimal_number_of_infer_requests"])]
    else:
        args += ["-api", "sync"]
    precision = HINT_PRECISION.get(str(compiled.get("inference_precision_hint")))
    if precision:
        args += ["-infer_precision", precision]
    return shlex.join(args)
