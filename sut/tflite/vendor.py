"""LiteRT's own benchmark tool, ``litert-benchmark`` (shipped in ai-edge-litert): the command
that reruns a tflite SUT's figure in it. The tool runs the model's own input shape (batch 1 for
quantmark's artifacts) on a constant random input through the ``CompiledModel`` API."""

from __future__ import annotations

import shlex

TOOL = "litert-benchmark"


def litert_benchmark_command(model_file: str, threads: int, runs: int = 1000) -> str:
    """The tool's command line for this model at these threads (its default is 1 thread)."""
    return shlex.join([TOOL, "--model", model_file, "--num_threads", str(threads),
                       "--num_runs", str(runs), "--warmup_runs", "20"])
