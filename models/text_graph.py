"""A text encoder's ONNX file as every framework's SUT needs it: which token inputs it takes,
which output it answers with, and how a QSL sample becomes its feeds.

Framework-neutral (the SUTs and the text task both read it). A text model takes token inputs
(``input_ids``, ``attention_mask`` and optionally ``token_type_ids``: int64 ``[batch,
sequence]``) and answers with either a sentence embedding ``[batch, hidden]`` (the model pools
inside, as quantmark's MiniLM export does) or class logits ``[batch, labels]``. A QSL sample is
one int64 array ``[3, seq_len]``: row 0 the ids, row 1 the mask, row 2 the token types, padded
to the run's sequence length; a batch is ``[N, 3, seq_len]``. With dynamic padding a batch is
cut to its longest sequence before it is fed (the SUT's timed work), so each SingleStream
sample runs at its own length, as a user serving one sentence at a time would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError

#: the token inputs a text model may take, in the rows of a QSL sample
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: the rows every text model must take (token types are optional: DistilBERT takes none)
REQUIRED_INPUTS = TOKEN_INPUTS[:2]
#: how a run pads its sequences (the spec's ``padding``)
PADDINGS = ("fixed", "dynamic")
#: what a text model answers with (the spec's ``head``)
TEXT_HEADS = ("embedding", "classifier")


@dataclass(frozen=True)
class TextModelFile:
    """What a text model's ONNX file states: its token inputs (names in ``TOKEN_INPUTS``
    order), the output it answers with, and that output's width (hidden size or labels)."""

    inputs: tuple[str, ...]
    output_name: str
    width: int
    head: str  # "embedding" | "classifier"


def is_text(spec: Any) -> bool:
    """The spec (or an artifact's meta) runs a text model: its samples are token rows."""
    task = spec.get("task") if isinstance(spec, dict) else getattr(spec, "task", None)
    return task == "text"


def text_meta(spec: Any) -> dict[str, Any]:
    """A text model's task and head for an artifact's meta (and from there its cache key)."""
    return {"task": "text", "head": spec.head} if is_text(spec) else {}


def _dims(value: Any) -> list[Any]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value.type.tensor_type.shape.dim]


def read_text_model(path: str | Path, where: str, head: str = "") -> TextModelFile:
    """The token inputs and answering output of a text model's ONNX file; one line where it is
    not one. ``head`` ("embedding" or "classifier", "" to read it from the file: an output
    named like an embedding is one, else logits are) picks the output."""
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise UserError(f"{where} is not a valid ONNX model ({cause}); pass a file exported "
                        "with torch.onnx.export or Optimum") from None
    init_names = {t.name for t in proto.graph.initializer}
    given = {i.name: i for i in proto.graph.input if i.name not in init_names}
    missing = [name for name in REQUIRED_INPUTS if name not in given]
    unknown = sorted(set(given) - set(TOKEN_INPUTS))
    if missing or unknown:
        raise UserError(f"{where} takes inputs {sorted(given)}; a text model takes "
                        f"{', '.join(REQUIRED_INPUTS)} (and optionally token_type_ids): export "
                        "the encoder with those input names")
    for name, value in given.items():
        if value.type.tensor_type.elem_type != onnx.TensorProto.INT64 or len(_dims(value)) != 2:
            raise UserError(f"{where} input {name!r} is not an int64 [batch, sequence] tensor; "
                            "export the encoder with int64 token inputs")
    outputs = [o for o in proto.graph.output
               if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and len(_dims(o)) == 2]
    if not outputs:
        found = ", ".join(f"{o.name}{_dims(o)}" for o in proto.graph.output)
        raise UserError(f"{where} has no float [batch, width] output (found {found}); export "
                        "the pooled sentence embedding or the class logits as an output")
    chosen = _answering_output(outputs, head, where)
    kind = head or ("embedding" if "embed" in chosen.name.lower() else "classifier")
    width = _dims(chosen)[1]
    if not isinstance(width, int) or width < 1:
        width = _configured_width(Path(path).parent / "config.json", kind, where, chosen.name)
    return TextModelFile(inputs=tuple(n for n in TOKEN_INPUTS if n in given),
                         output_name=chosen.name, width=width, head=kind)


def _configured_width(config: Path, head: str, where: str, output: str) -> int:
    """An output width the exporter left symbolic, from the model's config.json beside it
    (Hugging Face's: ``hidden_size`` for an embedding, ``id2label``/``num_labels`` for a
    classifier); one line where it states none."""
    import json

    try:
        stated = json.loads(config.read_text())
        width = (stated["hidden_size"] if head == "embedding"
                 else len(stated["id2label"]) if "id2label" in stated else stated["num_labels"])
        return int(width)
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{where}: output {output!r} leaves its width symbolic and no "
                        f"config.json beside it states it; export with a fixed width or put "
                        "the model's config.json (hidden_size, num_labels) beside it") from None


def _answering_output(outputs: list[Any], head: str, where: str) -> Any:
    """The output a text model answers with: an embedding-named one for an embedding model,
    the first otherwise (logits)."""
    if head and head not in TEXT_HEADS:
        raise UserError(f"{where}: unknown text head {head!r}; choose {' or '.join(TEXT_HEADS)}")
    named = [o for o in outputs if "embed" in o.name.lower()]
    if head == "embedding" and not named and len(outputs) > 1:
        raise UserError(f"{where} has several [batch, width] outputs "
                        f"({', '.join(o.name for o in outputs)}) and none named an embedding; "
                        "export the pooled sentence embedding as the only output")
    if head == "embedding":
        return (named or outputs)[0]
    if head == "classifier":
        return next((o for o in outputs if o not in named), outputs[0])
    return (named or outputs)[0]


def token_rows(inputs: tuple[str, ...]) -> tuple[int, ...]:
    """The rows of a QSL sample that feed ``inputs``, in the same order."""
    return tuple(TOKEN_INPUTS.index(name) for name in inputs)


def batch_length(batch: np.ndarray, dynamic: bool) -> int:
    """The sequence length a batch ``[N, 3, L]`` is fed at: its longest sequence where the
    padding is dynamic (at least 1), else the whole padded length."""
    if not dynamic:
        return int(batch.shape[2])
    return max(1, int(batch[:, 1, :].sum(axis=1).max(initial=0)))


def token_feeds(batch: np.ndarray, inputs: tuple[str, ...], dynamic: bool
                ) -> dict[str, np.ndarray]:
    """``{input name: int64 [N, L]}`` for a batch of QSL samples ``[N, 3, seq_len]``: views,
    no copy, cut to the batch's longest sequence where the padding is dynamic."""
    length = batch_length(batch, dynamic)
    return {name: batch[:, row, :length] for name, row in zip(inputs, token_rows(inputs),
                                                               strict=True)}


def probe_tokens(seq_len: int, batch: int = 1) -> np.ndarray:
    """A valid batch of QSL samples ``[batch, 3, seq_len]`` (a [CLS]-like id, ones in the
    mask): what a SUT proves its kernels on at load."""
    tokens = np.zeros((batch, 3, seq_len), np.int64)
    tokens[:, 0, :] = 101
    tokens[:, 1, :] = 1
    return tokens


def text_artifact(path: str | Path, spec: Any, where: str) -> Any:
    """The FP32 artifact of a text model's ONNX file (quantmark's MiniLM export, or the
    user's, used in place): its meta names the token inputs, the answering output and the
    task, which every artifact made from it keys on. A quantized file is refused: the SUT
    quantizes the FP32 model itself (its own toolkit's recipe, proven at load)."""
    import onnx

    from quantmark.ground.hashing import hash_file
    from quantmark.models.artifacts import Artifact

    file = Path(path)
    if not file.is_file():
        raise UserError(f"{where} not found; pass an existing .onnx file")
    stated = read_text_model(file, where, spec.head)
    proto = onnx.load(str(file), load_external_data=False)
    ops = {node.op_type for node in proto.graph.node}
    if ops & {"QuantizeLinear", "MatMulInteger", "QLinearMatMul", "DynamicQuantizeLinear"}:
        raise UserError(f"{where} is already quantized; give the FP32 export and pick the "
                        "precision with --sut")
    digest = hash_file(file)
    meta = {"model": spec.name, "user_file": str(file.resolve()), **text_meta(spec),
            "inputs": list(stated.inputs), "input_name": stated.inputs[0],
            "output_name": stated.output_name, "width": stated.width, "layout": "tokens",
            "static_batch": None, "label_offset": 0, "sha256": digest, "cached": False,
            "opset": next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                          None)}
    return Artifact(path=file, format="onnx", precision="fp32", key=digest,
                    weights=f"{spec.name}: {file.name}", source_hash=digest, meta=meta)
