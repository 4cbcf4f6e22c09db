"""Per-op time of a TFLite SUT's model, from LiteRT's op profiling (``run.py profile``;
contract: ``sut.profiling``).

ai-edge-litert's Python ``Interpreter`` has no per-op profiling API, so the times come from
the benchmark tool run with ``--enable_op_profiling=true``: the C++ ``benchmark_model`` /
``benchmark_litert_model`` print the table "Operator-wise Profiling Info for Regular Benchmark
Runs" (run order: node type, avg ms, times called, ``[name]:node index``) and the line
"Inference timings in us: ... Inference (avg): N". The tool is run on the SUT's own .tflite
with the backend's threads and XNNPACK, on the real samples (encoded as the backend encodes
them, written to a raw file for ``--input_layer_value_files``), at the batch's shape where the
model's batch is dynamic. Both figures are the tool's averages over its runs, not medians.

The ``litert-benchmark`` that ai-edge-litert 2.x installs is a Python script over the
``CompiledModel`` API without op profiling. Where no tool that profiles is found, each op is
timed in isolation through the interpreter instead (``isolated_profile``, ``op_isolation``):
one-op models fed the real operands, not in situ, with the empty invoke's cost in the notes.
The notes' ``path`` line says which path gave the times.

Precision and category come from the model file: an op whose first operand is int8/uint8 is
int8 (fp16 for float16, else fp32); QUANTIZE, DEQUANTIZE, TRANSPOSE and CAST are overhead.
Rows of XNNPACK's own operators (``Convolution (NHWC, QC8) IGEMM`` ...) are read by their name.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import Backend
from quantmark.sut.profiling import OVERCOUNTED, LayerTime, Profile, median_ms

__all__ = ["ISOLATED", "PROFILER", "ToolRow", "category", "find_tool", "isolated_profile",
           "op_precisions", "parse_run_order", "parse_inference_avg_ms", "profile",
           "tool_command"]

log = logging.getLogger(__name__)

PROFILER = "LiteRT op profiling: benchmark tool --enable_op_profiling=true (run-order table)"
#: the tools that can profile ops, in the order they are looked for
TOOLS = ("litert-benchmark", "benchmark_litert_model", "benchmark_model")
OVERHEAD_OPS = frozenset({"QUANTIZE", "DEQUANTIZE", "TRANSPOSE", "CAST"})
#: XNNPACK operator names that only convert, copy or transpose
_XNN_OVERHEAD = re.compile(r"^(Convert|Copy|Transpose|Quantize|Dequantize)", re.IGNORECASE)
_XNN_PRECISION = (("QC8", "int8"), ("QS8", "int8"), ("QU8", "int8"), ("QD8", "int8"),
                  ("F16", "fp16"), ("F32", "fp32"))
_SECTION = "Operator-wise Profiling Info for Regular Benchmark Runs"
_NAME = re.compile(r"^\[(.*)\]:(\d+)$")
_INFERENCE_AVG = re.compile(r"Inference timings in us:.*Inference \(avg\):\s*([0-9.eE+-]+)")
_TYPES = {"int8": "int8", "uint8": "int8", "float16": "fp16", "float32": "fp32",
          "int16": "int16"}
_TIMEOUT_S = 600
ISOLATED = ("ai-edge-litert Interpreter: each op timed in isolation (one-op models), not in "
            "situ, less an empty invoke; medians over interleaved rounds")


@dataclass(frozen=True)
class ToolRow:
    """One row of the tool's run-order table."""

    node_type: str
    name: str
    index: int
    avg_ms: float
    calls: int


def category(op: str) -> str:
    """``overhead`` for quantize/dequantize, transposes and casts (TFLite ops or XNNPACK
    operators), ``compute`` for the rest."""
    if op in OVERHEAD_OPS or _XNN_OVERHEAD.match(op):
        return "overhead"
    return "compute"


def find_tool() -> tuple[str, str]:
    """(path, flag for the model file) of a benchmark tool that has op profiling.

    The venv's own bin folder is searched before PATH. A tool without
    ``--enable_op_profiling`` (ai-edge-litert's Python ``litert-benchmark``) is skipped.
    """
    here = Path(sys.executable).parent
    found = [str(here / t) if (here / t).is_file() else shutil.which(t) for t in TOOLS]
    found = [path for path in found if path]
    if not found:
        raise SutError("tflite: litert-benchmark not found; install quantmark[cpu]")
    for path in found:
        text = _help(path)
        if "enable_op_profiling" in text:
            return path, "--graph" if "--graph" in text else "--model"
    raise SutError(f"tflite: {', '.join(Path(p).name for p in found)} here has no "
                   "--enable_op_profiling (ai-edge-litert's Python tool); per-op times need "
                   "LiteRT's C++ benchmark_model on PATH")


def _help(path: str) -> str:
    try:
        done = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s --help failed: %s", path, exc)
        return ""
    return done.stdout + done.stderr


def tool_command(tool: str, model_flag: str, model: str, threads: int, iterations: int,
                 warmup: int, inputs: list[tuple[str, tuple[int, ...], str]]) -> list[str]:
    """The tool's command line: the backend's threads and XNNPACK, exactly ``warmup`` and
    ``iterations`` runs (no minimum seconds), op profiling on, and each input's name, shape
    and raw value file."""
    command = [tool, f"{model_flag}={model}", f"--num_threads={threads}",
               f"--num_runs={iterations}", f"--warmup_runs={warmup}", "--min_secs=0",
               "--warmup_min_secs=0", "--use_xnnpack=true", "--enable_op_profiling=true"]
    if inputs:
        command += [
            "--input_layer=" + ",".join(name for name, _, _ in inputs),
            "--input_layer_shape=" + ":".join(",".join(map(str, s)) for _, s, _ in inputs),
            # a name holding ':' is written '::' in this flag
            "--input_layer_value_files=" + ",".join(f"{name.replace(':', '::')}:{file}"
                                                    for name, _, file in inputs)]
    return command


def parse_run_order(text: str) -> list[ToolRow]:
    """The rows of the run-order table under "Operator-wise Profiling Info for Regular
    Benchmark Runs", columns found by their bracketed headers."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _SECTION in line), None)
    if start is None:
        return []
    header = next((i for i in range(start, len(lines)) if "[node type]" in lines[i]), None)
    if header is None:
        return []
    columns = re.findall(r"\[([^\]]+)\]", lines[header])
    where = {name: i for i, name in enumerate(columns)}
    rows = []
    for line in lines[header + 1:]:
        if not line.strip() or line.lstrip().startswith("="):
            break
        cells = [cell.strip() for cell in line.strip().split("\t") if cell.strip()]
        if len(cells) != len(columns):
            continue
        match = _NAME.match(cells[where["Name"]])
        name, index = (match.group(1), int(match.group(2))) if match else (cells[-1], -1)
        calls = cells[where["times called"]] if "times called" in where else "1"
        rows.append(ToolRow(node_type=cells[where["node type"]], name=name, index=index,
                            avg_ms=float(cells[where["avg ms"]]),
                            calls=max(1, round(float(calls)))))
    return rows


def parse_inference_avg_ms(text: str) -> float:
    """The tool's average inference time ("Inference (avg)" in µs), in ms; 0 if absent."""
    match = _INFERENCE_AVG.search(text)
    return float(match.group(1)) / 1000.0 if match else 0.0


def op_precisions(interpreter: Any) -> dict[int, str]:
    """{node index: precision} from the model's tensors: the first operand's type (int8 and
    uint8 -> int8, float16 -> fp16, float32 -> fp32)."""
    found = {}
    for op in interpreter._get_ops_details():
        if op["op_name"] == "DELEGATE" or not len(op["operand_types"]):
            continue
        kind = np.dtype(op["operand_types"][0]).name
        found[int(op["index"])] = _TYPES.get(kind, kind)
    return found


def _row_precision(row: ToolRow, precisions: dict[int, str]) -> str:
    if row.node_type.isupper() and row.index in precisions:
        return precisions[row.index]
    for tag, value in _XNN_PRECISION:
        if tag in row.node_type:
            return value
    return ""


def _layers(rows: list[ToolRow], precisions: dict[int, str]) -> list[LayerTime]:
    # a builtin op's row (CONV_2D ...) ran on TFLite's own kernel: XNNPACK's rows are its
    # partitions (TfLiteXNNPackDelegate) or its operators (Convolution (NHWC, F32) IGEMM ...)
    return [LayerTime(name=row.name, op_type=row.node_type,
                      kernel="TFLite builtin" if row.node_type.isupper() else "XNNPACK",
                      precision=_row_precision(row, precisions),
                      category=category(row.node_type), median_ms=row.avg_ms, calls=row.calls)
            for row in rows]


def _encode(samples: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """The input as the backend feeds it: float as is, else quantized with the input tensor's
    scale and zero point (a raw-pixel model's unquantized uint8: only cast)."""
    from quantmark.sut.tflite.interpreter_backend import quantize

    dtype = np.dtype(detail["dtype"])
    scale, zero_point = detail["quantization"]
    if dtype == np.float32 or samples.dtype == dtype or not scale:
        return np.ascontiguousarray(samples, dtype=dtype)
    return np.ascontiguousarray(quantize(samples, scale, zero_point, dtype))


def _batch(backend: Backend, samples: np.ndarray) -> tuple[str, np.ndarray]:
    """The input's name and the batch as the backend feeds it (a static batch of 1 runs one
    sample)."""
    from quantmark.sut.tflite.inspection import open_interpreter

    detail = open_interpreter(backend.model_path).get_input_details()[0]
    static = int(detail["shape_signature"][0]) != -1
    return str(detail["name"]), _encode(np.asarray(samples)[:1] if static
                                        else np.asarray(samples), detail)


def _inputs(backend: Backend, samples: np.ndarray, folder: str
            ) -> tuple[list[tuple[str, tuple[int, ...], str]], int]:
    """The model's input as the backend feeds it, written raw; and the batch profiled."""
    name, x = _batch(backend, samples)
    file = os.path.join(folder, "input.bin")
    x.tofile(file)
    return [(name, tuple(int(d) for d in x.shape), file)], len(x)


def profile(backend: Backend, samples: np.ndarray, iterations: int, warmup: int) -> Profile:
    """Each op's time per inference of ``samples`` in the .tflite ``backend`` runs: from the
    benchmark tool's op profiling where a tool that profiles is found, else each op timed in
    isolation through the interpreter (``isolated_profile``)."""
    if iterations < 1 or warmup < 0:
        raise UserError(f"profile: iterations must be >= 1 and warm-up >= 0 (got {iterations} "
                        f"and {warmup})")
    try:
        tool, flag = find_tool()
    except SutError as exc:
        log.info("%s: timing each op in isolation instead", exc)
        return isolated_profile(backend, samples, iterations, warmup, str(exc))
    return _tool_profile(backend, samples, iterations, warmup, tool, flag)


def _tool_profile(backend: Backend, samples: np.ndarray, iterations: int, warmup: int,
                  tool: str, flag: str) -> Profile:
    """The benchmark tool's run-order table and average inference, on the real samples."""
    from quantmark.sut.tflite.inspection import open_interpreter

    model = str(backend.model_path)
    with tempfile.TemporaryDirectory(prefix="quantmark-tflite-profile-") as tmp:
        inputs, batch = _inputs(backend, samples, tmp)
        command = tool_command(tool, flag, model, backend.threads, iterations, warmup, inputs)
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise SutError(f"tflite: {Path(tool).name} ran past {_TIMEOUT_S} s on "
                           f"{model}") from exc
    text = done.stdout + "\n" + done.stderr
    rows = parse_run_order(text)
    if done.returncode != 0 or not rows:
        last = (text.strip().splitlines() or ["no output"])[-1]
        raise SutError(f"tflite: {Path(tool).name} gave no op profile for {model} "
                       f"(exit {done.returncode}): {last}")
    precisions = op_precisions(open_interpreter(model))
    notes = {"path": f"the benchmark tool's op profiling ({Path(tool).name})",
             "model_file": model, "tool": " ".join(command),
             "statistic": "the tool's averages over its runs, not medians (per op and end "
                          "to end)"}
    if batch != len(samples):
        notes["batch"] = f"the model has a static batch of {batch}: profiled at batch {batch}"
    return Profile(sut=_sut(backend), framework="tflite", batch_size=batch,
                   iterations=iterations, layers=_layers(rows, precisions),
                   end_to_end_ms=parse_inference_avg_ms(text), method=PROFILER, notes=notes)


def net(spent: list[float], empty: list[float]) -> list[float]:
    """Each round's op time less the same round's empty invoke (never below zero)."""
    return [max(op - nothing, 0.0) for op, nothing in zip(spent, empty, strict=True)]


def _sut(backend: Backend) -> str:
    return getattr(getattr(backend, "sut", None), "name", "")


def isolated_profile(backend: Backend, samples: np.ndarray, iterations: int, warmup: int,
                     why: str) -> Profile:
    """Each op of the SUT's .tflite as a one-op model fed the real operands the samples give
    it (``op_isolation``), the whole model and an empty model invoked in interleaved rounds;
    each op's time is the median over the rounds of its invoke less the empty model's invoke of
    the same round (the cost every invoke pays, which in situ the whole model pays once; raw
    sum and the empty invoke are in the notes)."""
    from quantmark.sut.tflite import op_isolation as iso
    from quantmark.sut.tflite.inspection import open_interpreter

    model = str(backend.model_path)
    _, x = _batch(backend, samples)
    ops = iso.one_op_models(model)
    values = iso.capture_tensors(model, x, {t for op in ops for t in op.inputs})
    runners = [iso.open_one_op(op, values, backend.threads) for op in ops]
    whole, empty = iso.whole_model(model, x, backend.threads), \
        iso.empty_interpreter(backend.threads)
    feeds = [iso.refeed(runner, op, values) for runner, op in zip(runners, ops, strict=True)]
    times = iso.time_rounds([whole.invoke, empty.invoke, *(r.invoke for r in runners)],
                            iterations, warmup, [None, None, *feeds])
    interpreter = open_interpreter(model)
    names = {int(t["index"]): str(t["name"]) for t in interpreter.get_tensor_details()}
    kinds = {int(op["index"]): op["op_name"] for op in interpreter._get_ops_details()}
    precisions = op_precisions(interpreter)
    layers = [LayerTime(name=names[op.outputs[0]], op_type=kinds[op.index],
                        kernel="XNNPACK" if iso.delegated(runner) else "TFLite builtin",
                        precision=precisions.get(op.index, ""), category=category(
                            kinds[op.index]), median_ms=median_ms(net(spent, times[1])))
              for op, runner, spent in zip(ops, runners, times[2:], strict=True)]
    empty_ms = median_ms(times[1])
    raw_ms = sum(median_ms(spent) for spent in times[2:])
    notes = {"path": f"{why}: each op timed in isolation through the interpreter instead",
             "model_file": model,
             "statistic": "medians over interleaved rounds (the whole model, an empty model "
                          "and each one-op model, its inputs set again untimed just before, "
                          "invoked once a round)",
             "empty_invoke_ms": f"{empty_ms:.3g}",
             "invoke_overhead": f"each op's time is net of the empty model's invoke in the same "
                                f"round (median {empty_ms:.3g} ms): the per-op sum before that "
                                f"subtraction was {raw_ms:.3f} ms",
             "kernel": "XNNPACK where XNNPACK took the op in its one-op model",
             OVERCOUNTED: "ops timed in isolation read their operands and weights cold in "
                          "cache, where in situ the op before has just written them"}
    if len(x) != len(samples):
        notes["batch"] = f"the model has a static batch of {len(x)}: profiled at batch {len(x)}"
    return Profile(sut=_sut(backend), framework="tflite", batch_size=len(x),
                   iterations=iterations, layers=layers, end_to_end_ms=median_ms(times[0]),
                   method=ISOLATED, notes=notes)
