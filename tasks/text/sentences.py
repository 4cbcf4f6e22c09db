"""A text run's data: the sentences (the built-in corpus, or a user's CSV/JSONL), tokenized by
the model's own tokenizer into QSL samples, the held-out calibration sentences, and what the
record says of both (the source, its hash, the length distribution and padding).

Calibration sentences are held out of the scored ones: every tenth sentence (at most
``CALIBRATION_MAX``), the same for every SUT, so a static INT8 SUT is never scored on what it
calibrated on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError

#: every this-many-th sentence is held out for calibration
CALIBRATION_STRIDE = 10
#: at most this many calibration sentences (MLPerf's BERT calibrates on a few hundred)
CALIBRATION_MAX = 128
#: at least this many scored sentences, or the intervals mean nothing
MIN_SCORED = 20


@dataclass
class TextRunData:
    """The run's sentences as the run and its record read them (the image datasets'
    members: ``root``, ``builtin``, ``items``, ``fingerprint()``, ``held_out_count``)."""

    root: Path
    builtin: bool
    texts: tuple[str, ...]
    labels: np.ndarray | None
    tokens: Any  # tokens.TokenSamples of the scored sentences
    calibration: Any  # tokens.TokenSamples of the held-out ones
    source_sha256: str
    description: str
    classes: tuple[str, ...] = ()
    held_out_count: int = 0
    #: the FP32 model file the run was given (its reference is this file's function)
    model_file: Path | None = None
    lengths: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def num_classes(self) -> int | None:
        return len(self.classes) or None

    @property
    def items(self) -> list[tuple[str, int]]:
        """(sentence id, label) per scored sentence: the run's val_map (label -1: none)."""
        labels = self.labels if self.labels is not None else np.full(len(self), -1)
        return [(f"sentence-{i:05d}", int(label)) for i, label in enumerate(labels)]

    @property
    def all_items(self) -> list[tuple[str, int]]:
        """Every text the source holds, calibration's included (the batch-size check)."""
        return [*self.items, *(("held-out", -1),) * self.held_out_count]

    def fingerprint(self) -> str:
        """What the run scored: the source's bytes and the token samples."""
        digest = hashlib.sha256(self.source_sha256.encode())
        digest.update(np.ascontiguousarray(self.tokens.tokens).tobytes())
        return digest.hexdigest()[:16]


def split(count: int) -> tuple[np.ndarray, np.ndarray]:
    """(scored, calibration) indices of ``count`` sentences: every tenth held out, at most
    ``CALIBRATION_MAX``."""
    every = np.arange(count)
    held = every[::CALIBRATION_STRIDE][:CALIBRATION_MAX]
    return np.setdiff1d(every, held), held


def open_text_data(dataset_path: str | None, tokenizer: Any, seq_len: int,
                   max_positions: int | None) -> TextRunData:
    """The built-in sentences (``dataset_path`` None) or the user's file, split and tokenized."""
    from quantmark.tasks.text import tokens

    if dataset_path is None:
        from quantmark.tasks.text import corpus

        texts, labels, classes = corpus.builtin_sentences(), None, ()
        root, digest, description = corpus_root(), corpus.corpus_hash(), corpus.DESCRIPTION
    else:
        from quantmark.tasks.text.datasets import read_text_dataset

        found = read_text_dataset(Path(dataset_path))
        texts, labels, classes = found.texts, found.labels, tuple(found.label_names)
        root, digest, description = found.source, found.sha256, found.description
    scored, held = split(len(texts))
    if len(scored) < MIN_SCORED:
        raise UserError(f"--dataset-path {dataset_path}: {len(texts)} texts leave "
                        f"{len(scored)} to score after calibration's {len(held)}; give at "
                        f"least {MIN_SCORED + MIN_SCORED // CALIBRATION_STRIDE + 1} texts")
    chosen = tuple(texts[i] for i in scored)
    samples = tokens.encode(tokenizer, chosen, seq_len, max_positions=max_positions)
    calibration = tokens.encode(tokenizer, tuple(texts[i] for i in held), seq_len,
                                max_positions=max_positions)
    return TextRunData(root=root, builtin=dataset_path is None, texts=chosen,
                       labels=None if labels is None else np.asarray(labels)[scored],
                       tokens=samples, calibration=calibration, source_sha256=digest,
                       description=description, classes=classes, held_out_count=len(held),
                       lengths=tokens.length_summary(samples))


def corpus_root() -> Path:
    """The file the built-in sentences are read from (CPython's own pydoc_data)."""
    import pydoc_data.topics

    return Path(pydoc_data.topics.__file__)


@dataclass
class TextCalibration:
    """The static INT8 SUTs' calibration (the run's ``Calibration``): the held-out sentences
    as token samples ``[N, 3, seq_len]``."""

    data: TextRunData

    def arrays(self, layout: str) -> np.ndarray:
        if layout != "tokens":
            raise ValueError(f"a text model's calibration is token samples, not {layout}")
        return self.data.calibration.tokens

    def hash(self) -> str:
        digest = hashlib.sha256(self.data.source_sha256.encode())
        digest.update(np.ascontiguousarray(self.data.calibration.tokens).tobytes())
        return digest.hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {"source": f"every {CALIBRATION_STRIDE}th text of {self.data.root.name}, held "
                          "out of the scored ones",
                "count": int(len(self.data.calibration.tokens)), "hash": self.hash()}
