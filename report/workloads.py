"""What a run measured beside its SUT and batch: its model at an input size (a text model at a
sequence length, padded one way), on a dataset.

Runs of one model at two input sizes, or on two datasets, are two configurations: a median over
both would be nobody's number, and a speedup of INT8 at 128 over FP32 at 224 means nothing. The
report keeps them apart by the model's label, as a SUT's options keep variants apart
(``sut_label``): ``resnet50 size=128``, ``resnet50 data=flowers``, ``minilm seq=32``,
``minilm padding=dynamic``. A run at the model's own size (the text task's default length and
padding) carries none, and the dataset is named only where one model ran on several in the
report, so a report of one size and one dataset reads exactly as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground.records import RunRecord

BUILTIN = "built-in"
#: a text run's padding without --padding: not in its label
DEFAULT_PADDING = "fixed"
_SIZE = re.compile(r"\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*")


@dataclass(frozen=True)
class Workload:
    """A run's model, input size and dataset, as its results.json records them."""

    model: str  # the model's name, as the run recorded it
    size: tuple[int, int] | None  # the input's height and width; None where not recorded
    own_size: bool  # the model's own size: no size in its label
    dataset: str  # the dataset's name: its folder's, or "built-in"
    dataset_id: str  # tells two datasets of one name apart: their content's fingerprint
    seq_len: int | None = None  # a text model's sequence length; None for an image model
    own_seq_len: bool = True  # the text task's default length: no length in its label
    padding: str = ""  # a text model's padding where not the default (fixed): "dynamic"

    @property
    def size_text(self) -> str:
        """``128``, ``224x320``, or ``-`` where the run did not record it."""
        if self.size is None:
            return "-"
        height, width = self.size
        return str(height) if height == width else f"{height}x{width}"


def _parse(text: Any) -> tuple[int, int] | None:
    found = _SIZE.fullmatch(str(text or ""))
    return (int(found[1]), int(found[2] or found[1])) if found else None


def _own(config: dict[str, Any]) -> tuple[int, int] | None:
    """The built-in model's own size; None for a model file (its own size is the file's)."""
    from quantmark.models.zoo import MODELS

    spec = MODELS.get(str(config.get("model", "")))
    if spec is None or config.get("model_path"):
        return None
    return spec.input_size, spec.input_width


def workload(results: RunRecord) -> Workload:
    """The run's workload: the size it ran at (as its model record states it, else as it was
    asked for, else the built-in model's own), a text model's sequence length and padding,
    and the dataset it read."""
    config = results.config
    given = _parse(config.get("input_size"))
    shape = results.model.get("input") if isinstance(results.model.get("input"), dict) else {}
    stated = (int(shape["height"]), int(shape["width"])) if shape.get("height") and \
        shape.get("width") else None
    own = _own(config)
    size = stated or given or own
    folder = config.get("dataset_path")
    name = Path(str(folder)).resolve().name if folder else BUILTIN
    seq_len = int(shape.get("seq_len") or config.get("seq_len") or 0) or None
    # a text run's fingerprint hashes its token samples, which differ by length: its source
    # (the path) is what two lengths share
    identity = str((results.dataset.get("path") if seq_len else None) or
                   results.dataset.get("fingerprint") or results.dataset.get("path") or name)
    padding = str(shape.get("padding") or config.get("padding") or "")
    return Workload(str(config.get("model", "")), size,
                    not given or (own is not None and size == own),
                    name, identity, seq_len,
                    not config.get("seq_len") or seq_len == _default_seq_len(),
                    "" if padding == DEFAULT_PADDING else padding)


def _default_seq_len() -> int:
    """The length a text run pads to without ``--seq-len`` (the text task's default)."""
    from quantmark.tasks.text.definition import DEFAULT_SEQ_LEN

    return int(DEFAULT_SEQ_LEN)


def labeller(records: list[RunRecord]) -> Callable[[RunRecord], str]:
    """The model label of each run of ``records`` (the report's runs): its model, its size
    where not the model's own, its dataset where the model ran on several here (two datasets
    of one name told apart by their fingerprint)."""
    found = [workload(r) for r in records if not _ensemble(r)]
    datasets: dict[str, set[tuple[str, str]]] = {}
    for w in found:
        datasets.setdefault(w.model, set()).add((w.dataset, w.dataset_id))

    def dataset_name(w: Workload) -> str:
        mine = datasets.get(w.model, set())
        if len(mine) < 2:
            return ""
        shared = sum(name == w.dataset for name, _ in mine) > 1
        return f"{w.dataset}#{w.dataset_id[:6]}" if shared else w.dataset

    def label(results: RunRecord) -> str:
        if _ensemble(results):
            return str(results.config.get("model", ""))
        w = workload(results)
        return model_label(w.model, "" if w.own_size else w.size_text, dataset_name(w),
                           None if w.own_seq_len else w.seq_len, w.padding)

    return label


def model_label(model: str, size: str, dataset: str, seq_len: int | None = None,
                padding: str = "") -> str:
    """``resnet50``, ``resnet50 size=128``, ``resnet50 size=128 data=flowers``,
    ``minilm seq=32 padding=dynamic``."""
    return " ".join([model, *([f"size={size}"] if size else []),
                     *([f"seq={seq_len}"] if seq_len else []),
                     *([f"padding={padding}"] if padding else []),
                     *([f"data={dataset}"] if dataset else [])])


def entry_label(entry: dict[str, Any], padding: str = "") -> str:
    """The model label of a sweep cell that left no run (its manifest entry): its size or
    sequence length and dataset as the sweep named them (``padding``: the sweep's)."""
    dataset = str(entry.get("dataset") or "")
    return model_label(str(entry["model"]), str(entry.get("input_size") or ""),
                       Path(dataset).name if dataset else "", entry.get("seq_len") or None,
                       "" if padding == DEFAULT_PADDING else padding)


def _ensemble(results: RunRecord) -> bool:
    """Several models per sample: its members' sizes and datasets are their own."""
    return bool(results.ensemble) or results.sut.get("framework") == "ensemble"
