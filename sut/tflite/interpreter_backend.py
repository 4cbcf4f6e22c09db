"""TFLite / LiteRT on the CPU: the interpreter backend of tflite-fp32, tflite-fp16,
tflite-int8dyn and tflite-int8 (``backend.create`` builds it, or ``text``'s subclass).

Runs a .tflite with ai-edge-litert's ``Interpreter`` and its default XNNPACK delegate. Nothing
here imports TensorFlow: a user's .tflite runs on a device with only ai-edge-litert + numpy.

* Threads: an interpreter must not be used by two threads at once, and one lock around it
  would serialise the workers. Each ``predict`` checks an interpreter out of an idle pool and
  returns it afterwards, so concurrent calls always hold different interpreters; the pool
  grows lazily to the peak concurrency. Unlike a plain thread-local, the interpreter built and
  warmed at load is the one a single LoadGen worker then uses, so no interpreter is built and
  no XNNPACK weights are packed inside the timed run. Each interpreter resizes its input
  (``resize_tensor_input`` + ``allocate_tensors``) only when the batch size changes.
* Invoke modes (``--sut-option tflite_invoke=...``): ``batched`` (default) runs the batch in one
  invoke; ``per-sample`` keeps the interpreter at batch 1 and loops. Measured on the shared
  2-core Zen 4 under a load average of ~6 (batch 8, interleaved, so only rough): the digits
  CNN is faster batched (per-sample/batched 1.1-2.7x fp32, 1.3-1.5x int8: per-invoke overhead
  dominates a tiny model); for MobileNetV2 224 per-sample was often faster in fp32 (0.5-0.9x,
  plausibly batch 1 activations staying in cache) and no different in int8 (0.9-1.2x). Noise
  of that size settles nothing: measure on a quiet machine before choosing. Models with a
  static batch of 1 always run per-sample.
* Full-integer models: float inputs are quantized with the input tensor's scale/zero point
  (``q = round(x / scale) + zp``, clipped to the int8/uint8 range) and the output dequantized.
  The QSL quantizes samples when LoadGen loads them (``encode_samples``), outside the timed
  path, as ``litert-benchmark`` feeds int8 directly: quantizing a 224x224 image per query cost
  0.07 ms of Lite0's 1.1 ms on the 2-core Zen 4. A float batch (tests, other callers) is still
  quantized in ``predict``.
* Proof of what executed, gathered at load: tensor type counts, the op list and which conv/FC
  ops take integer operands, and the XNNPACK partitions. ai-edge-litert logs its "Replacing N
  out of M node(s) with delegate" line only at VERBOSE level, which its release builds do not
  print (only "Created TensorFlow Lite XNNPACK delegate for CPU.", once per process); fd 2 is
  captured around creation anyway and the line parsed when present. The partitions always come
  from the op list: ``_get_ops_details()`` keeps the original nodes and appends one
  ``DELEGATE`` node per XNNPACK partition, whose inputs/outputs bound the nodes it replaced.
* A detector (artifact meta ``task``): its output is the ONNX model's, turned back where the
  converted model holds it transposed, and said so in ``describe()["output"]`` (``detection``).
  A text encoder runs in ``text``'s subclass (token inputs by name, one sample per invoke).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import Backend
from quantmark.sut.registry import find_sut
from quantmark.sut.tflite.inspection import executed_precision, file_precision, inspect_interpreter
from quantmark.sut.tflite.suts import (
    TFLITE_INVOKE_MODES,
    TFLITE_QUANTIZE_OPTION,
    TFLITE_QUANTIZE_PLACES,
)

log = logging.getLogger(__name__)

INVOKE_MODES = TFLITE_INVOKE_MODES
_REPLACING = re.compile(r"Replacing (\d+) out of (\d+) node\(s\) with delegate \(([^)]*)\) "
                        r"node, yielding (\d+) partitions")


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """Capture what C++ writes to file descriptor 2 inside the block (lines, filled on exit).

    Warnings and errors among them are written back to the real stderr afterwards.
    """
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())
            loud = [line for line in lines if not line.startswith(("INFO:", "VERBOSE:"))]
            if loud:
                log.warning("TFLite said: %s", "\n".join(loud))


def delegation(ops: list[dict[str, Any]], log: list[str]) -> dict[str, Any]:
    """XNNPACK's share of the graph: nodes replaced, nodes in total, delegate partitions.

    Each DELEGATE node stands for one partition: walking back from its outputs through the
    nodes that produce them, stopping at its inputs, finds the nodes it replaced.
    """
    nodes = {op["index"]: op for op in ops if op["op_name"] != "DELEGATE"}
    delegates = [op for op in ops if op["op_name"] == "DELEGATE"]
    producer = {int(t): index for index, op in nodes.items() for t in op["outputs"]}
    replaced: set[int] = set()
    for node in delegates:
        boundary = {int(t) for t in node["inputs"]}
        pending = [int(t) for t in node["outputs"]]
        seen: set[int] = set()
        while pending:
            tensor = pending.pop()
            if tensor in seen or tensor in boundary or tensor not in producer:
                continue
            seen.add(tensor)
            replaced.add(producer[tensor])
            pending.extend(int(t) for t in nodes[producer[tensor]]["inputs"] if t >= 0)
    left = Counter(op["op_name"] for index, op in nodes.items() if index not in replaced)
    result: dict[str, Any] = {
        "delegate": "XNNPACK (ai-edge-litert default delegate)", "partitions": len(delegates),
        "delegated_nodes": len(replaced), "total_nodes": len(nodes),
        "nodes_left_to_tflite_kernels": dict(sorted(left.items())),
        "source": "op list (DELEGATE nodes)",
        "delegate_created_log": any("XNNPACK delegate" in line for line in log),
    }
    matches = [m for m in map(_REPLACING.search, log) if m]
    if matches:
        replaced_n, total_n, name, partitions = matches[-1].groups()
        result["runtime_log"] = {"replaced": int(replaced_n), "of": int(total_n),
                                 "delegate": name, "partitions": int(partitions)}
    return result


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """``round(x / scale) + zero_point`` clipped to ``dtype``'s range (vectorised)."""
    info = np.iinfo(dtype)
    q = np.rint(x / np.float32(scale)) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((q.astype(np.float32) - np.float32(zero_point)) * np.float32(scale))


class _Runner:
    """One interpreter and the batch size its input is currently allocated for."""

    def __init__(self, path: str, threads: int, output_index: int = -1) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=path, num_threads=threads)
        self.interpreter.allocate_tensors()
        detail = self.interpreter.get_input_details()[0]
        self.input_index, self.output_index = int(detail["index"]), output_index
        self.batch = int(detail["shape"][0])

    def resize(self, batch: int) -> None:
        if batch != self.batch:
            shape = list(self.interpreter.get_input_details()[0]["shape"])
            self.interpreter.resize_tensor_input(self.input_index, [batch, *shape[1:]])
            self.interpreter.allocate_tensors()
            self.batch = batch

    def invoke(self, x: np.ndarray) -> np.ndarray:
        self.interpreter.set_tensor(self.input_index, x)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.output_index)  # a copy


class TFLiteBackend(Backend):
    """A .tflite on ai-edge-litert + XNNPACK; one interpreter per concurrent predict."""

    def __init__(self, artifact: Any, precision: str, threads: int = 0,
                 invoke: str = "batched", quantize_at: str = "at-load") -> None:
        if invoke not in INVOKE_MODES:
            raise UserError(f"tflite_invoke={invoke!r}: choose one of {', '.join(INVOKE_MODES)}")
        if quantize_at not in TFLITE_QUANTIZE_PLACES:
            raise UserError(f"{TFLITE_QUANTIZE_OPTION}={quantize_at!r}: choose one of "
                            f"{', '.join(TFLITE_QUANTIZE_PLACES)}")
        self.quantize_at = quantize_at
        self.artifact = artifact
        self.model_path = str(artifact.path)
        self.precision = precision  # fp32 | fp16 | int8dyn | int8
        # the registry entry whose proof (the file's precision class) the load check demands
        self.sut = find_sut("tflite", precision)
        self.threads = threads or os.cpu_count() or 1
        self.requested_invoke = invoke
        self.invoke = invoke
        meta = artifact.meta or {}
        self.layout = meta.get("layout", "NHWC")
        self.label_offset = int(meta.get("label_offset", 0))
        self._num_classes = meta.get("num_classes")
        self._output_name = meta.get("output_name")
        # a detector: its head and class count; its output is turned back to the ONNX layout
        self._detector = (SimpleNamespace(head=meta.get("head"), num_classes=self._num_classes)
                          if meta.get("task") == "detection" else None)
        self._transposed = False
        self._idle: queue.SimpleQueue[_Runner] = queue.SimpleQueue()
        self._created = 0
        self._count_lock = threading.Lock()
        self._input: dict[str, Any] = {}
        self._output: dict[str, Any] = {}
        self._executed: dict[str, Any] = {}

    # ----------------------------------------------------------------- load
    def load(self) -> None:
        try:
            with native_stderr() as log:
                first = self._make_runner()
        except (ValueError, RuntimeError) as exc:
            raise SutError(f"ai-edge-litert could not load {self.model_path}: {exc}") from exc
        self._created = 1
        summary = inspect_interpreter(first.interpreter)
        self._bind_io(summary, first)
        self._prove(summary, first, log)
        self._idle.put(first)

    def _make_runner(self, output_index: int = -1) -> Any:
        """An interpreter for one concurrent predict (a text model's feeds its token inputs)."""
        return _Runner(self.model_path, self.threads, output_index)

    def _bind_io(self, summary: dict[str, Any], first: Any) -> None:
        """The input and answering output the runners use (from the first one's model)."""
        self._input = summary["inputs"][0]
        self._output = self._class_output(summary["outputs"])
        if self._input["shape_signature"][0] != -1:
            self.invoke = "per-sample"  # a static batch of 1: resizing could break its reshapes
        first.output_index = self._output["index"]

    def _prove(self, summary: dict[str, Any], first: Any, log: list[str]) -> None:
        """What the file holds and XNNPACK took, recorded; refused where it is not the SUT's
        precision."""
        xnnpack = delegation(first.interpreter._get_ops_details(), log)
        executed = executed_precision(summary)
        self._executed = {
            "executed_precision": executed, "tensor_types": summary["tensor_types"],
            "constant_tensor_types": summary["constant_tensor_types"],
            "int8_weight_tensors": summary["int8_weight_tensors"], "ops": summary["ops"],
            "compute_ops": summary["compute_ops"],
            "fp16_weight_dequantize_ops": summary["fp16_weight_dequantize_ops"],
            "input": self._input, "output": self._output, "xnnpack": xnnpack,
            "runtime_log": log[:20],
        }
        self._check(summary, executed)

    def _class_output(self, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self._detector is not None:
            return self._detector_output(outputs)
        for out in outputs:
            shape = out["shape_signature"]
            if self._output_name in (None, out["name"]) and len(shape) == 2 and (
                    self._num_classes is None or shape[1] == self._num_classes):
                return out
        raise SutError(f"{self.model_path}: no [N,{self._num_classes}] output among "
                       f"{[(o['name'], o['shape_signature']) for o in outputs]}")

    def _detector_output(self, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The detector's output (the ONNX model's, maybe transposed: recorded)."""
        from quantmark.sut.tflite.detection import HEADS, detector_layout

        for out in outputs:
            dims = [None if d == -1 else int(d) for d in out["shape_signature"]]
            transposed = detector_layout(dims, self._detector)
            if self._output_name in (None, out["name"]) and transposed is not None:
                self._transposed = transposed
                return {**out, "task": "detection", "head": self._detector.head,
                        "transposed_back_to": HEADS[self._detector.head] if transposed else None}
        raise SutError(f"{self.model_path}: no {self._detector.head} detector output "
                       f"{HEADS[self._detector.head]} with {self._num_classes} classes among "
                       f"{[(o['name'], o['shape_signature']) for o in outputs]}")

    def _check(self, summary: dict[str, Any], executed: str) -> None:
        """The file's precision class (what its compute ops prove) must be the SUT's proof;
        an INT8 SUT also needs int8 weight tensors."""
        compute = summary["compute_ops"]
        sut, found = self.sut.name, file_precision(summary)
        integer = self.precision in ("int8", "int8dyn")
        if not integer and (compute["integer"] or compute["hybrid"]):
            raise SutError(f"{sut}: {self.model_path} runs int8 ops ({compute}); pass a float "
                           "model")
        if self.sut.proven({found}) and (summary["int8_weight_tensors"] or not integer):
            return
        if self.precision == "int8":
            raise SutError(f"{sut}: {self.model_path} has no integer conv/FC ops or int8 weight "
                           f"tensors (executes {executed}, compute ops {compute}); refusing to "
                           "measure FP32 as INT8")
        if self.precision == "int8dyn":
            raise SutError(f"{sut}: {self.model_path} has no conv/FC op with int8 weights "
                           f"(executes {executed}, compute ops {compute}); refusing to measure "
                           "FP32 as INT8")
        if self.precision == "fp16":
            raise SutError(f"{sut}: {self.model_path} has no fp16 weights; refusing to measure "
                           "an fp32 model as fp16")
        raise SutError(f"{sut}: {self.model_path} holds a {found} model, not "
                       f"{'/'.join(self.sut.proof)}; run it as {find_sut('tflite', found).name}")

    def _new_runner(self) -> Any:
        runner = self._make_runner(self._output["index"])
        with self._count_lock:
            self._created += 1
        return runner

    # ----------------------------------------------------------------- predict
    def _checkout(self) -> Any:
        """An idle runner, or a new one: concurrent predicts never share an interpreter."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._new_runner()

    def predict(self, batch: np.ndarray) -> np.ndarray:
        x = self._to_input(batch)
        runner = self._checkout()
        try:
            if self.invoke == "batched":
                runner.resize(len(x))
                out = runner.invoke(x)
            else:
                runner.resize(1)
                out = np.concatenate([runner.invoke(x[i:i + 1]) for i in range(len(x))])
        finally:
            self._idle.put(runner)
        return self._from_output(out)

    def _to_input(self, batch: np.ndarray) -> np.ndarray:
        dtype = np.dtype(self._input["dtype"])
        # a float model, samples encoded at load, or a raw-pixel model's unquantized uint8
        if dtype == np.float32 or batch.dtype == dtype or not self._input["scale"]:
            return np.ascontiguousarray(batch, dtype=dtype)
        return quantize(batch, self._input["scale"], self._input["zero_point"], dtype)

    def encode_samples(self, samples: np.ndarray) -> np.ndarray:
        """A full-integer model's input quantization, applied by the QSL at load (unless
        ``tflite_quantize=per-call`` keeps it in the timed predict)."""
        if self.quantize_at == "per-call":
            return samples
        return self._to_input(samples)

    def _from_output(self, out: np.ndarray) -> np.ndarray:
        if out.dtype != np.float32:
            out = dequantize(out, self._output["scale"], self._output["zero_point"])
        return np.ascontiguousarray(out.transpose(0, 2, 1)) if self._transposed else out

    # ----------------------------------------------------------------- report
    def describe(self) -> dict[str, Any]:
        return {
            "framework": "tflite",
            "runtime": "ai-edge-litert",
            "framework_version": _litert_version(),
            "requested_precision": self.precision,
            "threads": self.threads,
            "invoke": self.invoke,
            "invoke_note": ("model input has a static batch of 1"
                            if self.invoke != self.requested_invoke else ""),
            "interpreters_created": self._created,
            "model_file": self.model_path,
            **self._executed,
        }

    def speed_settings(self, scenario: str, batch_size: int) -> dict[str, Any]:
        from quantmark.sut.tflite.vendor import litert_benchmark_command

        model_batch = int(self._input["shape_signature"][0])
        return {
            "api": "Interpreter: set_tensor, invoke, get_tensor (one interpreter per worker)",
            "delegate": "XNNPACK (default)", "threads": self.threads, "invoke": self.invoke,
            "input": ("float32, copied into the interpreter's input"
                      if self._input["dtype"] == "float32" else
                      f"{self._input['dtype']} pixels as the QSL gives them (unquantized input)"
                      if not self._input["scale"] else
                      f"{self._input['dtype']}, quantized by the QSL at load (untimed)"
                      if self.quantize_at == "at-load" else
                      f"{self._input['dtype']}, quantized in every predict (timed)"),
            "vendor_command": litert_benchmark_command(self.model_path, self.threads),
            "vendor_note": ("litert-benchmark runs the model's own batch of 1; this run used "
                            f"batch {batch_size}" if batch_size != 1 or model_batch not in
                            (-1, 1) else "same model, threads and batch"),
        }

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait()
            except queue.Empty:
                return


def _litert_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        import ai_edge_litert

        return str(getattr(ai_edge_litert, "__version__", "unknown"))
