"""What a sweep is asked: every setting that decides its cells and how they are measured, as
flags or a sweep file give them (``plan.build_spec`` checks and fills it in).

Apart from ``plan``, which expands it into cells, so the dimensions' own checks (``axes``) read
the settings without importing the module that calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class SweepSpec:
    """Everything that decides a sweep's cells and how they are measured."""

    models: list[str]
    suts: list[str]
    ensembles: list[str] = field(default_factory=list)  # each "MODEL@SUT,MODEL@SUT,..."
    ensemble_modes: list[str] = field(default_factory=lambda: ["sequential", "concurrent"])
    scenarios: list[str] = field(default_factory=lambda: ["Offline", "SingleStream"])
    batch_sizes: list[int] = field(default_factory=lambda: [8])
    repeats: int = 1
    output: str = "sweep"
    seconds: float = 10.0  # quick runs' minimum duration
    official: bool = False
    accuracy: bool = True
    timeout: float = 1800.0  # per cell
    threads: int = 0
    workers: int = 0  # predict threads in the SUT (0: the SUT's preferred number)
    model_path: str | None = None  # the one model's own file, as run.py --model-path
    # --sut-option as a dimension: key -> its values, each a variant of the SUTs reading it
    sut_options: dict[str, list[str]] = field(default_factory=dict)
    dataset_path: str | None = None
    # input size and dataset as dimensions (quantmark.sweep.axes): [] is the model's own size
    # and the one --dataset-path
    image_sizes: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    # a text model's sequence length as a dimension (quantmark.sweep.lengths): [] is the text
    # task's default; its padding ("": fixed) and tokenizer, the same for every cell
    seq_lens: list[int] = field(default_factory=list)
    padding: str = ""
    tokenizer: str | None = None
    # the model's classes and preprocessing recipe, and the labels file, as run.py takes them
    num_classes: int = 0
    preprocess: dict[str, Any] = field(default_factory=dict)
    labels: str | None = None
    calibration_list: str | None = None
    user_conf: str | None = None
    cluster: str = ""  # "" runs here; "auto", "HOST:PORT" or "ray://HOST:PORT" on Ray
    placement: list[str] = field(default_factory=list)  # "SUT_PATTERN:REQ,REQ" rules

    def measuring_settings(self) -> dict[str, Any]:
        """What must match for cells of two runs of the sweep to be compared (resume). The
        paths are kept for people: resuming compares the files and datasets they name by
        content, cell by cell (``quantmark.sweep.resume``), never by path."""
        return {"seconds": self.seconds, "official": self.official, "threads": self.threads,
                "workers": self.workers, "model_path": absolute(self.model_path),
                "dataset_path": absolute(self.dataset_path),
                "num_classes": self.num_classes, "preprocess": self.preprocess,
                "labels": absolute(self.labels),
                "calibration_list": absolute(self.calibration_list),
                "user_conf": absolute(self.user_conf), "padding": self.padding,
                "tokenizer": absolute(self.tokenizer)}


def absolute(path: str | None) -> str | None:
    """A path setting as the manifest keeps it: absolute, ``~`` and symlinks resolved."""
    return str(Path(path).expanduser().resolve()) if path else None
