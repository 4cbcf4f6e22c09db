"""Each op of a .tflite timed in isolation: the per-op profile where no LiteRT tool with op
profiling is installed (``sut.tflite.profile`` falls back to this).

ai-edge-litert's Python ``Interpreter`` has no profiler API, and the ``litert-benchmark`` that
ai-edge-litert 2.x installs has no op profiling. What the interpreter can do is run any model,
so each op of the SUT's own model becomes a model of its own:

* **One-op model** (``one_op_models``): the op as the file holds it (same operator code,
  options and tensors, so the same quantization parameters), its constant operands with their
  buffers, its other operands as the model's inputs, its outputs as the model's outputs.
  Edited with ai-edge-litert's own flatbuffer object API (no TensorFlow).
* **Real operands** (``capture_tensors``): one invoke of the whole model on the real samples,
  with ``experimental_preserve_all_tensors``, reads every tensor an op takes.
* **Timing** (``time_rounds``): every one-op interpreter (the backend's threads and its default
  XNNPACK delegate, as the backend runs the whole model), the whole model and an empty model
  (one ADD of two one-element tensors: the cost of an invoke that computes nothing) are
  invoked in interleaved rounds, ``warmup`` rounds unmeasured, so drift on a busy machine hits
  all of them alike; each one's time is the median over the measured rounds. Each one-op
  model's inputs are set again (untimed) just before its invoke, so it reads operands fresh in
  cache, as in situ an op reads what the op before it just wrote. (Lite0, batch 1, one
  thread, the calling thread's CPU time on the shared 2-core Zen 4 under load, so rough:
  without that the per-op sum came to 1.1x (int8) and 1.3x (fp32) of the whole model; with
  it 1.02-1.08x.)

What isolation cannot see: in situ, XNNPACK runs a whole partition in one invoke, while each
one-op model pays an invoke of its own (about the empty model's time, which in interleaved
rounds is an invoke with its interpreter cold in cache, tens of microseconds, not the ~1 us of a
hot one). The caller takes each op's time net of the empty invoke of the same round, and
reports the raw sum beside it.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import SutError

__all__ = ["OneOp", "capture_tensors", "delegated", "empty_interpreter", "empty_model",
           "open_one_op", "one_op_models", "refeed", "run_one_op", "time_rounds", "whole_model"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OneOp:
    """One op of the full model as a model of its own."""

    #: the op's node index in the full model (``_get_ops_details()``'s ``index``)
    index: int
    #: the flatbuffer of the one-op model
    content: bytes
    #: the full model's tensor indices the one-op model takes, in its input order
    inputs: tuple[int, ...]
    #: the full model's tensor indices it gives, in its output order
    outputs: tuple[int, ...]


def _constant(model: Any, tensor: Any) -> bool:
    data = model.buffers[tensor.buffer].data if tensor.buffer else None
    return data is not None and len(data) > 0


def _one_op(model: Any, index: int) -> OneOp:
    """The ``index``-th operator of the first subgraph of ``model`` (a ``ModelT``) alone."""
    from ai_edge_litert import schema_py_generated as schema

    graph = model.subgraphs[0]
    op = graph.operators[index]
    used = [t for t in [*op.inputs, *op.outputs, *(op.intermediates or [])] if t >= 0]
    order = list(dict.fromkeys(used))
    new_index = {old: new for new, old in enumerate(order)}
    buffers, tensors = [schema.BufferT()], []
    for old in order:
        tensor = copy.copy(graph.tensors[old])
        if _constant(model, tensor):
            buffers.append(model.buffers[tensor.buffer])
            tensor.buffer = len(buffers) - 1
        else:
            tensor.buffer = 0
        tensors.append(tensor)
    fed = tuple(dict.fromkeys(t for t in op.inputs
                              if t >= 0 and not _constant(model, graph.tensors[t])))
    alone = copy.copy(op)
    alone.inputs = [new_index[t] if t >= 0 else -1 for t in op.inputs]
    alone.outputs = [new_index[t] for t in op.outputs]
    alone.intermediates = [new_index[t] for t in op.intermediates or []] or None
    sub = schema.SubGraphT()
    sub.tensors, sub.operators, sub.name = tensors, [alone], graph.name
    sub.inputs, sub.outputs = [new_index[t] for t in fed], list(alone.outputs)
    one = schema.ModelT()
    one.version, one.operatorCodes, one.description = model.version, model.operatorCodes, b"op"
    one.subgraphs, one.buffers = [sub], buffers
    return OneOp(index=index, content=_pack(one), inputs=fed, outputs=tuple(op.outputs))


def _pack(model: Any) -> bytes:
    from ai_edge_litert.tools import flatbuffer_utils

    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def one_op_models(path: str | Path) -> list[OneOp]:
    """A one-op model for every op of the model at ``path``, in execution order."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(Path(path))
    if len(model.subgraphs) != 1:
        raise SutError(f"tflite: {path} has {len(model.subgraphs)} subgraphs; timing ops in "
                       "isolation needs a model of one graph (no control flow)")
    return [_one_op(model, i) for i in range(len(model.subgraphs[0].operators))]


def empty_model() -> bytes:
    """A model of one ADD of two one-element float tensors: an invoke that computes nothing."""
    from ai_edge_litert import schema_py_generated as schema

    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.ADD
    code.version = 1
    tensors = []
    for name in (b"a", b"b", b"sum"):
        tensor = schema.TensorT()
        tensor.shape, tensor.type, tensor.buffer, tensor.name = [1], schema.TensorType.FLOAT32, \
            0, name
        tensors.append(tensor)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1], [2]
    op.builtinOptionsType, op.builtinOptions = schema.BuiltinOptions.AddOptions, \
        schema.AddOptionsT()
    sub = schema.SubGraphT()
    sub.tensors, sub.inputs, sub.outputs, sub.operators = tensors, [0, 1], [2], [op]
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [code], [sub]
    model.buffers, model.description = [schema.BufferT()], b"empty"
    return _pack(model)


def empty_interpreter(threads: int) -> Any:
    """The empty model's interpreter (``threads``, default XNNPACK), fed."""
    return _feed(_interpreter(threads, model_content=empty_model()),
                 [np.ones(1, np.float32), np.ones(1, np.float32)])


def _interpreter(threads: int, **source: Any) -> Any:
    from quantmark.sut.tflite.inspection import open_interpreter

    try:
        return open_interpreter(source.pop("path", None), num_threads=threads, **source)
    except (ValueError, RuntimeError) as exc:
        raise SutError(f"tflite: ai-edge-litert could not open a model to time: "
                       f"{str(exc).splitlines()[0] if str(exc) else exc}") from exc


def _feed(interpreter: Any, values: Sequence[np.ndarray]) -> Any:
    """Resize each input to its value's shape, allocate, and set the values."""
    details = interpreter.get_input_details()
    for detail, value in zip(details, values, strict=True):
        if list(detail["shape"]) != list(value.shape):
            interpreter.resize_tensor_input(int(detail["index"]), list(value.shape))
    interpreter.allocate_tensors()
    for detail, value in zip(details, values, strict=True):  # a 0-d operand stays 0-d (a
        # detector's shape arithmetic): ascontiguousarray makes it 1-d, which set_tensor refuses
        interpreter.set_tensor(int(detail["index"]), np.asarray(value, order="C"))
    return interpreter


def whole_model(path: str | Path, x: np.ndarray, threads: int) -> Any:
    """The full model's interpreter as the backend builds it (threads, default XNNPACK), fed
    ``x`` (the input as the backend encodes it)."""
    return _feed(_interpreter(threads, path=str(path)), [x])


def capture_tensors(path: str | Path, x: np.ndarray, wanted: set[int]) -> dict[int, np.ndarray]:
    """The value of each tensor in ``wanted`` after one invoke of the model on ``x``."""
    import warnings

    with warnings.catch_warnings():  # "intended for debugging purposes only": it is
        warnings.filterwarnings("ignore", message=".*experimental_preserve_all_tensors")
        interpreter = _interpreter(1, path=str(path), experimental_preserve_all_tensors=True)
    _feed(interpreter, [x]).invoke()
    return {t: np.array(interpreter.get_tensor(t)) for t in sorted(wanted)}


def open_one_op(op: OneOp, values: dict[int, np.ndarray], threads: int) -> Any:
    """The one-op model's interpreter (``threads``, default XNNPACK), fed the captured values of
    its inputs."""
    return _feed(_interpreter(threads, model_content=op.content),
                 [values[t] for t in op.inputs])


def run_one_op(op: OneOp, values: dict[int, np.ndarray], threads: int) -> list[np.ndarray]:
    """The one-op model's outputs on the captured values (to check it is the same op)."""
    interpreter = open_one_op(op, values, threads)
    interpreter.invoke()
    return [interpreter.get_tensor(int(d["index"])) for d in interpreter.get_output_details()]


def delegated(interpreter: Any) -> bool:
    """Whether XNNPACK took the model's op (its op list gained a DELEGATE node)."""
    return any(op["op_name"] == "DELEGATE" for op in interpreter._get_ops_details())


def refeed(interpreter: Any, op: OneOp, values: dict[int, np.ndarray]) -> Callable[[], None]:
    """Set the one-op model's inputs again: called untimed just before its invoke, so the op
    reads operands that were just written, as in situ it reads what the op before it wrote."""
    indices = [int(d["index"]) for d in interpreter.get_input_details()]
    fed = [np.asarray(values[t], order="C") for t in op.inputs]  # 0-d stays 0-d

    def feed() -> None:
        for index, value in zip(indices, fed, strict=True):
            interpreter.set_tensor(index, value)
    return feed


def time_rounds(invokes: Sequence[Callable[[], Any]], iterations: int, warmup: int,
                before: Sequence[Callable[[], Any] | None] = ()) -> list[list[float]]:
    """Each callable's wall times in seconds, called once per round in turn (``before[i]``,
    where given, just before ``invokes[i]``, untimed): ``warmup`` rounds unmeasured, then
    ``iterations`` measured."""
    times: list[list[float]] = [[] for _ in invokes]
    prepare = list(before) + [None] * (len(invokes) - len(before))
    clock = time.perf_counter
    for round_ in range(warmup + iterations):
        for spent, invoke, ready in zip(times, invokes, prepare, strict=True):
            if ready is not None:
                ready()
            start = clock()
            invoke()
            if round_ >= warmup:
                spent.append(clock() - start)
    return times
