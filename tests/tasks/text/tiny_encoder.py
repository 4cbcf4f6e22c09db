"""A tiny BERT-style encoder folder as users bring one: an ONNX export (token inputs, a
pooled ``sentence_embedding`` or class ``logits`` output) with the tokenizer.json it reads
(MiniLM's, from the installed package) and its config.json. Random weights, seeded: what the
plumbing tests run in seconds instead of MiniLM's minutes."""

from __future__ import annotations

import importlib.util
import io
import json
import warnings
import zipfile
from pathlib import Path

import torch
from torch import nn

HIDDEN, LAYERS, HEADS, VOCAB = 32, 2, 2, 30522


def minilm_file(name: str) -> bytes:
    """One file of the MiniLM package's model.zip (its tokenizer.json, config.json ...)."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    archive = Path(spec.submodule_search_locations[0]) / "model.zip"
    with zipfile.ZipFile(archive) as outer:
        return outer.read(name)


class _Pooled(nn.Module):
    """A BertModel answering with the masked mean of its last hidden state (L2-normalised),
    or with a linear head's logits on that mean."""

    def __init__(self, labels: int) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                            max_position_embeddings=512, attn_implementation="eager")
        self.bert = BertModel(config, add_pooling_layer=False)
        self.head = nn.Linear(HIDDEN, labels) if labels else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        if self.head is not None:
            return self.head(mean)
        return nn.functional.normalize(mean, dim=-1)


def tiny_encoder_folder(folder: Path, labels: int = 0, seed: int = 0) -> Path:
    """``folder/model.onnx`` (+ tokenizer.json, config.json): an embedding model, or a
    classifier of ``labels`` classes. Returns the ONNX file."""
    torch.manual_seed(seed)
    model = _Pooled(labels).eval()
    folder.mkdir(parents=True, exist_ok=True)
    example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in range(3))
    output = "logits" if labels else "sentence_embedding"
    buffer = io.BytesIO()
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, buffer, opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=[output],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "token_type_ids": axes, output: {0: "batch"}})
    path = folder / "model.onnx"
    path.write_bytes(buffer.getvalue())
    (folder / "tokenizer.json").write_bytes(minilm_file("tokenizer.json"))
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 512,
                                                    "hidden_size": HIDDEN,
                                                    "num_labels": labels or 2}))
    return path


class _LogitsOnly(nn.Module):
    """A Hugging Face sequence classifier answering with its logits alone (what an export
    for serving answers)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).logits


def tiny_hf_classifier_folder(folder: Path, labels: int = 3, seed: int = 1) -> Path:
    """A user's classifier folder as Hugging Face tools leave it: a tiny
    ``BertForSequenceClassification`` saved with ``save_pretrained`` (config.json,
    model.safetensors), its ONNX export (output ``logits``) and tokenizer.json. Returns the
    ONNX file."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                        num_labels=labels)
    model = BertForSequenceClassification(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in names)
    axes = {0: "batch", 1: "sequence"}
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(_LogitsOnly(model), example, buffer, opset_version=17, dynamo=False,
                          input_names=names, output_names=["logits"],
                          dynamic_axes={**{name: axes for name in names},
                                        "logits": {0: "batch"}})
    path = folder / "model.onnx"
    path.write_bytes(buffer.getvalue())
    (folder / "tokenizer.json").write_bytes(minilm_file("tokenizer.json"))
    return path
