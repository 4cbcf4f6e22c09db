"""A text encoder's FP32 ONNX -> TensorFlow SavedModel (onnx2tf), cached: the source of the TF
and TFLite SUTs on a text model.

onnx2tf guesses layouts from static shapes, and a transformers export is full of run-time
shape arithmetic: with dynamic batch and sequence it took the ``[N, L, hidden]`` activations
for channels-first and transposed them (a bias add of ``[?, 384, 1536]`` and ``[1, 1536, 1]``
stopped it on MiniLM), and with only the sequence fixed it converted a graph that computed
nonsense (an embedding add of ``[0, 128, 384]`` and ``[4, 128, 384]``). What works, on MiniLM
and the tiny test encoders alike:

1. the token inputs fixed to ``[1, seq_len]`` and the graph optimised offline by onnxruntime
   at its basic level (``optimized_model_filepath``: constant folding and fusions into
   standard ONNX ops only), which turns every shape computation and the attention mask's
   index arithmetic (transformers 5 gathers the mask through a flattened copy) into constants;
2. the exact GELU ``x * 0.5 * (1 + erf(x / sqrt(2)))`` written as
   ``(x * 0.5) * (erf(x * (1 / sqrt(2))) + 1)``, the form TensorFlow's TFLite converter fuses
   into its GELU op (TFLite has no Erf; TensorFlow runs it either way);
3. onnx2tf, then the SavedModel run against onnxruntime on seeded token batches of several
   lengths (``check_text``): a conversion that computes something else is refused.

So the SavedModel takes ``[1, seq_len]`` token inputs: the SUTs run a batch one sample at a
time and cannot cut batches short (``--padding dynamic``). Its key holds the sequence length.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.text_graph import TOKEN_INPUTS, text_artifact, text_meta

TEXT_SAVED_MODEL_RECIPE: dict[str, Any] = {
    "converter": "onnx2tf", "signature": "serving_default", "layout": "tokens",
    "shapes": "token inputs fixed to [1, seq_len]",
    "fold": "onnxruntime ORT_ENABLE_BASIC offline optimisation (standard ONNX ops)",
    "rewrites": ["erf GELU as (x*0.5)*(erf(x*rsqrt2)+1), TFLite's GELU pattern"],
    "check": "SavedModel vs onnxruntime, seeded token batches of 4 lengths: cosine >= 0.9999 "
             "and |error| / (1 + |value|) <= 1e-3",
    "version": 1,
}
#: the SavedModel must match onnxruntime's FP32 output this closely (the same FP32 math in
#: other kernels: measured cosine 1 - 1e-7 and error 2e-7 on MiniLM)
MIN_COSINE = 0.9999
MAX_ERROR = 1e-3
#: the way out printed with every refusal
ELSEWHERE = "run it with ort-*, ov-* or torch-*"
SAVED_MODEL_FILE = "saved_model.pb"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def static_batch_note(seq_len: int) -> str:
    """Why a text model runs one sample at a time on TensorFlow and TFLite (describe())."""
    return (f"onnx2tf converts a text encoder at fixed token shapes [1, {seq_len}] (its layout "
            "guesses break on dynamic ones): a batch runs one sample at a time")


def refuse_dynamic_padding(name: str, spec: Any) -> None:
    """One line for ``--padding dynamic`` (the SavedModel's sequence length is fixed)."""
    if spec.padding == "dynamic":
        raise UserError(f"{name}: --padding dynamic needs the sequence length to vary, and "
                        f"onnx2tf converts {spec.name} at fixed token shapes [1, "
                        f"{spec.seq_len}]; use --padding fixed, or {ELSEWHERE}")


def text_saved_model_key(source: Artifact, spec: Any) -> str:
    """The text SavedModel's key: the FP32 ONNX's identity, the run's sequence length, the
    recipe and the converters' versions."""
    from quantmark.models.tensorflow_env import tensorflow_version

    return hash_json({"what": "saved-model-text", "source": source.key,
                      "source_sha": source.meta.get("sha256"), "seq_len": int(spec.seq_len),
                      "onnx2tf": dist_version("onnx2tf"), "tensorflow": tensorflow_version(),
                      "onnxruntime": dist_version("onnxruntime"), **text_meta(spec),
                      "recipe": TEXT_SAVED_MODEL_RECIPE})


def fold_at_fixed_shapes(source: Path, out: Path, seq_len: int) -> Any:
    """The ONNX model with its token inputs fixed to ``[1, seq_len]``, folded by onnxruntime's
    basic offline optimisation (written to ``out``); returns the loaded result."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(source))
    weights = {t.name for t in model.graph.initializer}  # old exports list them as inputs
    for value in model.graph.input:
        if value.name not in weights:
            _fix_dims(value, (1, seq_len))
    for value in model.graph.output:
        _fix_dims(value, (1,))
    fixed = out.with_name("fixed.onnx")
    onnx.save(model, str(fixed))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3  # its notes on the initializers it dropped
    ort.InferenceSession(str(fixed), options, providers=["CPUExecutionProvider"])
    fixed.unlink()
    return onnx.load(str(out))


def _fix_dims(value: Any, sizes: tuple[int, ...]) -> None:
    """Give ``value``'s leading dims ``sizes`` (a dim the file leaves symbolic or fixes)."""
    dims = value.type.tensor_type.shape.dim
    for axis, size in enumerate(sizes[:len(dims)]):
        dims[axis].Clear()
        dims[axis].dim_value = size


def _constants(graph: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _gelu_nodes(erf: Any, graph: Any, constants: dict[str, np.ndarray],
                users: dict[str, list[Any]]) -> tuple[str, list[Any]] | None:
    """(x, [div, erf, add, mul, mul]) where ``erf`` is in ``x * 0.5 * (1 + erf(x / sqrt2))``
    as torch exports it (``Div``, ``Erf``, ``Add 1``, ``Mul x``, ``Mul 0.5``), else None."""
    def scalar(name: str, value: float) -> bool:
        found = constants.get(name)
        return found is not None and found.size == 1 and abs(float(found.ravel()[0]) - value) < 1e-5

    def single_user(name: str, op: str, constant: float | None, other: str | None) -> Any:
        found = users.get(name, [])
        if len(found) != 1 or found[0].op_type != op:
            return None
        rest = [i for i in found[0].input if i != name]
        ok = (len(rest) == 1 and (scalar(rest[0], constant) if constant is not None
                                  else rest[0] == other))
        return found[0] if ok else None

    div = next((n for n in graph.node if erf.input[0] in n.output), None)
    if div is None or div.op_type != "Div" or not scalar(div.input[1], 2 ** 0.5):
        return None
    x = div.input[0]
    plus = single_user(erf.output[0], "Add", 1.0, None)
    times_x = plus and single_user(plus.output[0], "Mul", None, x)
    half = times_x and single_user(times_x.output[0], "Mul", 0.5, None)
    return (x, [div, erf, plus, times_x, half]) if half else None


def rewrite_erf_gelu(model: Any) -> int:
    """Write each torch-exported exact GELU in the form TFLite's converter fuses into its
    GELU op (the same function); returns how many were rewritten."""
    from onnx import helper, numpy_helper

    graph = model.graph
    constants = _constants(graph)
    users: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            users[name].append(node)
    found = [m for m in (_gelu_nodes(n, graph, constants, users) for n in graph.node
                         if n.op_type == "Erf") if m is not None]
    if not found:
        return 0
    for name, value in (("gelu:half", 0.5), ("gelu:rsqrt2", 2 ** -0.5), ("gelu:one", 1.0)):
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
    replaced: dict[int, list[Any]] = {}
    for x, (div, erf, plus, times_x, half) in found:
        stem = f"{erf.name or erf.output[0]}:gelu"
        replaced[id(half)] = [
            helper.make_node("Mul", [x, "gelu:half"], [f"{stem}:half"], name=f"{stem}/half"),
            helper.make_node("Mul", [x, "gelu:rsqrt2"], [f"{stem}:scaled"],
                             name=f"{stem}/scaled"),
            helper.make_node("Erf", [f"{stem}:scaled"], [f"{stem}:erf"], name=f"{stem}/erf"),
            helper.make_node("Add", [f"{stem}:erf", "gelu:one"], [f"{stem}:plus"],
                             name=f"{stem}/plus"),
            helper.make_node("Mul", [f"{stem}:half", f"{stem}:plus"], list(half.output),
                             name=f"{stem}/out")]
        replaced.update({id(n): [] for n in (div, erf, plus, times_x)})
    nodes = [new for node in graph.node for new in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    return len(found)


def _vocabulary(model: Any) -> int:
    """The word-embedding rows (the ids a check may feed): the Gather of ``input_ids``."""
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    rows = [weights[n.input[0]][0] for n in model.graph.node
            if n.op_type == "Gather" and n.input[1] == "input_ids" and n.input[0] in weights]
    return int(rows[0]) if rows else 100


def check_tokens(seq_len: int, vocabulary: int, count: int = 4, seed: int = 0) -> np.ndarray:
    """Seeded token samples ``[count, 3, seq_len]`` of unequal lengths (full, half, 3, one
    short of full): real padding for the attention mask and the pooling to get right."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((count, 3, seq_len), np.int64)
    lengths = [seq_len, max(1, seq_len // 2), min(3, seq_len), max(1, seq_len - 1)]
    for row in range(count):
        length = lengths[row % len(lengths)]
        tokens[row, 0, :length] = rng.integers(min(1000, vocabulary - 1), vocabulary, length)
        tokens[row, 0, 0] = min(101, vocabulary - 1)
        tokens[row, 1, :length] = 1
    return tokens


def check_text(folder: Path, source: Artifact, tokens: np.ndarray, where: str
               ) -> dict[str, Any]:
    """Run the SavedModel and onnxruntime on ``tokens`` (one sample at a time, as the SUTs
    feed it) and compare; refuse a conversion that computes something else."""
    import onnxruntime as ort
    import tensorflow as tf

    inputs, output = tuple(source.meta["inputs"]), str(source.meta["output_name"])
    session = ort.InferenceSession(str(source.path), providers=["CPUExecutionProvider"])
    rows = [TOKEN_INPUTS.index(name) for name in inputs]
    feeds = [{n: tokens[i:i + 1, r] for n, r in zip(inputs, rows, strict=True)}
             for i in range(len(tokens))]
    expected = np.concatenate([session.run([output], feed)[0] for feed in feeds])
    signature = tf.saved_model.load(str(folder)).signatures["serving_default"]
    with tf.device("/CPU:0"):  # the conversion's check, not a GPU's TF32 rounding
        got = np.concatenate([next(iter(signature(**{n: tf.constant(v) for n, v in feed.items()}
                                                  ).values())).numpy() for feed in feeds])
    if got.shape != expected.shape:
        raise UserError(f"{where}: onnx2tf's SavedModel answers {list(got.shape)}, not the "
                        f"ONNX model's {list(expected.shape)}; {ELSEWHERE}")
    cosine = float(np.min((got * expected).sum(1) / np.maximum(
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1), 1e-30)))
    error = float((np.abs(got - expected) / (1 + np.abs(expected))).max())
    if not cosine >= MIN_COSINE or not error <= MAX_ERROR:
        raise UserError(f"{where}: onnx2tf's SavedModel does not compute the ONNX model "
                        f"(cosine {cosine:.6f}, error {error:.2e} on {len(tokens)} token "
                        f"samples); {ELSEWHERE}")
    return {"min_cosine": cosine, "max_error": error, "samples": int(len(tokens)),
            "lengths": [int(n) for n in tokens[:, 1].sum(axis=1)],
            "error": "|SavedModel - onnxruntime| / (1 + |onnxruntime|)"}


def _failing_op(chatter: str, model: Any) -> str:
    """``Type 'name'`` of the op onnx2tf failed on (its printout names it), or ''."""
    found = re.findall(r"onnx_op_name: (\S+)", re.sub(r"\x1b\[[0-9;]*m", "", chatter))
    if not found:
        return ""
    name = re.sub("^wa/", "/", found[-1])
    types = {n.name: n.op_type for n in model.graph.node}
    return f"{types.get(name) or types.get(found[-1], 'op')} {name!r}"


def _convert(onnx_input: Path, work: Path, model: Any, where: str) -> None:
    """onnx2tf's conversion; one line naming the failing op where it cannot convert."""
    import onnx2tf

    chatter = io.StringIO()
    try:
        with contextlib.redirect_stdout(chatter):
            onnx2tf.convert(input_onnx_file_path=str(onnx_input), output_folder_path=str(work),
                            output_signaturedefs=True, non_verbose=True, not_use_onnxsim=True)
    except Exception as exc:
        op = _failing_op(chatter.getvalue(), model)
        raise UserError(f"{where}: onnx2tf cannot convert it{' at ' + op if op else ''} "
                        f"({type(exc).__name__}: {_first_line(exc)}); {ELSEWHERE}") from None
    if not (work / SAVED_MODEL_FILE).is_file():
        raise UserError(f"{where}: onnx2tf wrote no SavedModel "
                        f"({chatter.getvalue().strip()[-200:]}); {ELSEWHERE}")


def _signature_io(folder: Path) -> tuple[list[str], str]:
    """The SavedModel's token input names and its (single) output's name."""
    import tensorflow as tf

    signature = tf.saved_model.load(str(folder)).signatures["serving_default"]
    return sorted(signature.structured_input_signature[1]), next(
        iter(signature.structured_outputs))


def text_saved_model(spec: Any, model_path: str | Path | None) -> Artifact:
    """The text model's SavedModel (token inputs ``[1, seq_len]``), converted from its FP32
    ONNX export and checked against onnxruntime; cached."""
    from quantmark.models.tensorflow_env import require_tensorflow

    where = f"model {spec.name}: --model-path {model_path}"
    if model_path is None or not str(model_path).endswith(".onnx"):
        raise UserError(f"{where}: a text model converts to TensorFlow from its ONNX export; "
                        "pass its .onnx file")
    require_tensorflow("a TensorFlow/TFLite SUT")
    source = text_artifact(model_path, spec, where)
    key = text_saved_model_key(source, spec)

    def build(folder: Path) -> Artifact:
        progress(f"converting {spec.name} ONNX -> TensorFlow SavedModel at [1, {spec.seq_len}] "
                 "tokens (onnxruntime folding, onnx2tf; one-off) ...")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            onnx_input = Path(scratch) / "onnx2tf-input.onnx"
            try:
                prepared = fold_at_fixed_shapes(source.path, onnx_input, int(spec.seq_len))
            except Exception as exc:  # onnxruntime raises its own exception types
                raise UserError(f"{where}: onnxruntime cannot fold it at token shapes [1, "
                                f"{spec.seq_len}] ({_first_line(exc)}); {ELSEWHERE}") from None
            rewritten = rewrite_erf_gelu(prepared)
            import onnx

            onnx.save(prepared, str(onnx_input))
            work = Path(scratch) / "onnx2tf"
            _convert(onnx_input, work, prepared, where)
            for entry in work.iterdir():  # the SavedModel; not onnx2tf's own .tflite files
                if entry.suffix != ".tflite":
                    os.replace(entry, folder / entry.name)
            vocabulary = _vocabulary(prepared)
        convert_s = time.perf_counter() - started
        check = check_text(folder, source, check_tokens(int(spec.seq_len), vocabulary), where)
        inputs, output = _signature_io(folder)
        progress(f"converted {spec.name} to SavedModel in {convert_s:.1f} s (cosine to "
                 f"onnxruntime {check['min_cosine']:.7f})")
        meta = {"model": spec.name, **text_meta(spec), "layout": "tokens",
                "inputs": list(source.meta["inputs"]), "signature_inputs": inputs,
                "output_name": output, "onnx_output_name": source.meta["output_name"],
                "width": source.meta["width"], "num_classes": source.meta["width"],
                "seq_len": int(spec.seq_len), "static_batch": 1, "label_offset": 0,
                "signature": "serving_default", "source_onnx": str(source.path),
                "source_onnx_key": source.key, "onnx2tf": dist_version("onnx2tf"),
                "recipe": TEXT_SAVED_MODEL_RECIPE, "gelu_rewritten": rewritten, "check": check}
        return Artifact(path=folder / SAVED_MODEL_FILE, format="saved_model", precision="fp32",
                        key=key, weights=source.weights, source_hash=source.source_hash,
                        times={"tf_convert_s": round(convert_s, 3)}, meta=meta)

    return cached_build(spec.name, key, build)
