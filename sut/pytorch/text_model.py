"""Which torch module a CPU torch SUT runs for a text encoder (``spec.task == "text"``), and
the record of it.

The run names the model's ONNX file (``SutOptions.model_path``), which the other frameworks
read. A torch SUT runs a torch module instead, never that file:

* the built-in encoder: ``importlib.import_module(spec.trainer).encoder_module()``, the module
  the ONNX file was exported from (weights and pooling alike). ``spec.trainer`` is a module of
  quantmark.tasks, which a SUT may not import by name: it is imported from the spec's string.
* a user's classifier: the Hugging Face checkpoint beside its ONNX file (``config.json``
  naming a ``...ForSequenceClassification`` in ``architectures``, and ``model.safetensors``),
  loaded in float32 with ``AutoModelForSequenceClassification``, answering its logits. A
  checkpoint that lacks any weight is refused: transformers would fill it with random values.
* a user's embedding model is refused: how its export pools the hidden states into the
  embedding (mean, [CLS], normalised or not) is in the ONNX file only, unknown to quantmark.

torch-int8 (static, FX graph mode) is refused for every text model: torch.fx cannot trace
transformers' models (Python control flow on tensor shapes: ``prepare_fx`` fails on the tiny
BERT with "slice indices must be integers") and the FX path quantizes one float image tensor
with image calibration. Dynamic INT8 of every ``nn.Linear`` (torch-int8dyn) is torch's
recipe for a transformer.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact
from quantmark.models.text_graph import TOKEN_INPUTS, read_text_model, text_meta

log = logging.getLogger(__name__)

CHECKPOINT_FILES = ("config.json", "model.safetensors")
CLASSIFIER_SUFFIX = "ForSequenceClassification"
_FILE_SUTS = "ort-* or ov-*"


@dataclass
class TextModel:
    """The eval-mode module a text SUT runs, the token inputs it is fed by name (in
    ``TOKEN_INPUTS`` order), and the artifact record of where it came from."""

    module: nn.Module
    inputs: tuple[str, ...]
    artifact: Artifact


class Logits(nn.Module):
    """A transformers sequence classifier answering with its logits tensor (the ONNX export's
    ``logits`` output) instead of a ModelOutput, so that every SUT gets one tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits


def refuse_static(name: str, spec: Any) -> None:
    """torch-int8's one line for a text model (see the module's docstring)."""
    raise UserError(f"{name}: model {spec.name} is a text encoder; torch's static INT8 (FX "
                    "graph mode) cannot take it (torch.fx cannot trace transformers' models, "
                    "and the FX path calibrates one float image input): use torch-int8dyn, "
                    "dynamic INT8 of every nn.Linear, torch's recipe for transformers")


def taken_inputs(module: nn.Module, offered: tuple[str, ...] = TOKEN_INPUTS) -> tuple[str, ...]:
    """The token inputs among ``offered`` that ``module.forward`` takes by name (token types
    only where the model has them: DistilBERT has none)."""
    forward = module.model.forward if isinstance(module, Logits) else module.forward
    params = inspect.signature(forward).parameters
    taken = tuple(n for n in offered if n in params)
    if not set(taken) >= {"input_ids", "attention_mask"}:
        raise UserError(f"{type(module).__name__}.forward takes {list(params)}; a text model "
                        "takes input_ids and attention_mask by name")
    return taken


def text_model(name: str, spec: Any, model_path: str | None) -> TextModel:
    """The module ``name`` runs for text model ``spec``; one line where torch cannot run it."""
    if spec.trainer:
        return _builtin(spec, model_path)
    return _user_classifier(name, spec, model_path)


def _builtin(spec: Any, model_path: str | None) -> TextModel:
    """The built-in encoder from its trainer module (``encoder_module()``)."""
    trainer = importlib.import_module(spec.trainer)
    if not callable(getattr(trainer, "encoder_module", None)):
        raise UserError(f"model {spec.name}: {spec.trainer} has no encoder_module(); the "
                        "torch SUTs rebuild a built-in text encoder from it")
    module = trainer.encoder_module().eval()
    described = trainer.describe() if callable(getattr(trainer, "describe", None)) else {}
    identity = {"trainer": spec.trainer, **described}
    source = described.get("source") or spec.trainer
    path = Path(model_path) if model_path else Path(inspect.getfile(trainer))
    artifact = Artifact(
        path=path, format="torch-module", precision="fp32",
        key=hash_json({"what": "torch-text-module", **identity, "torch": torch.__version__}),
        weights=f"{spec.name}: {source} (torch module {spec.trainer}.encoder_module())",
        source_hash=hash_json(identity),
        meta={"model": spec.name, **text_meta(spec), "layout": "tokens", "label_offset": 0,
              "runs": f"the built-in {spec.name}, built in torch by {spec.trainer}",
              "onnx_file": model_path, "onnx_read": False, "weights_source": described})
    return TextModel(module, taken_inputs(module), artifact)


def _user_classifier(name: str, spec: Any, model_path: str | None) -> TextModel:
    """A user's classifier from the Hugging Face checkpoint beside its ONNX file."""
    if not model_path:
        raise UserError(f"{name}: model {spec.name} is a text model with no file; give "
                        "--model-path its ONNX export")
    where = f"{name}: --model-path {model_path}"
    if spec.head != "classifier":
        raise UserError(f"{where} is an embedding model from its ONNX file: how it pools the "
                        "encoder's hidden states into the embedding is in the export only, "
                        "unknown to quantmark, so torch cannot rebuild it; run the file with "
                        f"{_FILE_SUTS}")
    folder = Path(model_path).parent
    architecture = _checkpoint_architecture(folder, where)
    model = _load_classifier(folder, where)
    labels = int(model.config.num_labels)
    if spec.num_classes and labels != spec.num_classes:
        raise UserError(f"{where}: the checkpoint beside it answers {labels} classes, the ONNX "
                        f"file {spec.num_classes}; they are not the same model")
    module = Logits(model).eval()
    stated = read_text_model(model_path, where, "classifier")
    weights = folder / "model.safetensors"
    digest = hash_file(weights)
    artifact = Artifact(
        path=weights, format="safetensors", precision="fp32", key=digest,
        weights=f"{spec.name}: Hugging Face checkpoint {folder} ({architecture})",
        source_hash=digest,
        meta={"model": spec.name, **text_meta(spec), "layout": "tokens", "label_offset": 0,
              "user_file": str(weights.resolve()), "sha256": digest, "cached": False,
              "architecture": architecture,
              "attn_implementation": getattr(model.config, "_attn_implementation", None),
              "runs": f"the Hugging Face checkpoint beside {model_path} "
                      "(AutoModelForSequenceClassification, float32 weights), answering logits",
              "onnx_file": model_path, "onnx_read": False})
    return TextModel(module, taken_inputs(module, stated.inputs), artifact)


def _checkpoint_architecture(folder: Path, where: str) -> str:
    """The sequence classifier class the checkpoint in ``folder`` names; one line for what is
    missing (its files, ``architectures``) or for a checkpoint with no classification head."""
    missing = [f for f in CHECKPOINT_FILES if not (folder / f).is_file()]
    architectures: Any = None
    if "config.json" not in missing:
        try:
            architectures = json.loads((folder / "config.json").read_text()).get("architectures")
        except (OSError, ValueError, AttributeError):
            architectures = None
        if not architectures:
            missing.insert(0, "config.json's architectures")
    if missing:
        raise UserError(f"{where}: no Hugging Face checkpoint beside it ({', '.join(missing)} "
                        f"missing in {folder}); the torch SUTs run a user's classifier from "
                        "its save_pretrained checkpoint: save it there, or run the file with "
                        f"{_FILE_SUTS}")
    architecture = str(architectures[0])
    if not architecture.endswith(CLASSIFIER_SUFFIX):
        raise UserError(f"{where}: the checkpoint beside it is a {architecture}, with no "
                        f"sequence classification head; save the {CLASSIFIER_SUFFIX} model the "
                        f"ONNX file was exported from, or run the file with {_FILE_SUTS}")
    return architecture


def _load_classifier(folder: Path, where: str) -> nn.Module:
    """``AutoModelForSequenceClassification.from_pretrained(folder)`` in float32, local files
    only; a checkpoint that leaves weights missing (random values) is refused."""
    from transformers import AutoModelForSequenceClassification

    try:
        with _no_progress_bars():
            model, info = AutoModelForSequenceClassification.from_pretrained(
                str(folder), dtype=torch.float32, local_files_only=True,
                output_loading_info=True)
    except Exception as exc:  # transformers raises many types for a bad checkpoint
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(f"{where}: transformers cannot load the checkpoint beside it "
                        f"({cause})") from None
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise UserError(f"{where}: the checkpoint beside it lacks {len(missing)} weights "
                        f"({', '.join(missing[:3])}), which transformers would fill with "
                        "random values; save the whole model with save_pretrained")
    log.info("loaded %s from %s (%s attention)", type(model).__name__, folder,
             getattr(model.config, "_attn_implementation", "?"))
    return model.eval()


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' tqdm bars off while loading (they would land in the run's log)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
