"""The evaluation samples ``run.py diagnose`` and ``run.py profile`` feed their SUTs: the run's
own, opened by its task, so a profile or a diagnosis sees what a run scores.

An image task's crops are decoded once (the uint8 cache) and preprocessed per backend layout;
a text task's samples are its QSL's token rows (``[N, 3, seq_len]`` int64: ids, mask, token
types), the same for every layout: each SUT turns them into its model's named feeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantmark.models.text_graph import is_text
from quantmark.qsl.cache import cached_images
from quantmark.qsl.groups import read_groups
from quantmark.qsl.preprocess import normalise, recipe_for
from quantmark.tasks.catalog import task_for
from quantmark.tasks.contract import Task


@dataclass
class Data:
    """The evaluation samples, decoded once; handed out per layout."""

    spec: Any
    images: np.ndarray  # uint8 NHWC crops, evaluation order (a text task: its token rows)
    labels: np.ndarray  # a classifier's classes; a detector's rows (its count is what counts)
    groups: np.ndarray | None  # source image of each sample (the built-in set), for intervals
    task: Task | None = None  # how the model's output is scored (None: classification's)
    dataset: Any = None  # the task's dataset (a detector's ground truth and image sizes)
    #: the samples are final already (a text model's tokens): no recipe, any layout
    final: bool = False
    _layouts: dict[str, Any] = field(default_factory=dict)

    def batch(self, layout: str, start: int, stop: int) -> np.ndarray:
        if self.final:
            return np.asarray(self.images[start:stop])
        recipe = self._layouts.setdefault(layout, recipe_for(self.spec, layout))
        return normalise(np.asarray(self.images[start:stop]), recipe)


def token_data(task: Task, dataset: Any, spec: Any) -> Data:
    """A text task's samples: every row of the QSL a run builds (``Task.sample_library``),
    loaded once, in evaluation order."""
    library = task.sample_library(dataset, spec, None)
    every = np.arange(library.total_count)
    library.load(every)
    tokens = np.ascontiguousarray(library.batch(every))
    return Data(spec, tokens, np.asarray(library.labels), None, task, dataset, final=True)


def open_data(config: Any, spec: Any) -> tuple[Data, Any]:
    """The evaluation samples and the calibration, opened by the run's task, so a detector
    reads its detection dataset (and calibrates on its own list) and a text model its
    tokenized sentences (and its held-out calibration sentences) as a run does."""
    task = task_for(config)
    dataset = task.open_dataset(config, spec)
    calibration = task.calibration(dataset, spec, task.calibration_list(config, dataset))
    if is_text(spec):
        return token_data(task, dataset, spec), calibration
    images = cached_images(dataset, recipe_for(spec, "NHWC"))
    rows = np.asarray(dataset.cache_rows)
    named = read_groups(dataset.root)  # the source photo of each crop, where the data says
    groups = (np.asarray([named.get(rel, rel) for rel, _ in dataset.items])
              if named is not None else None)
    return Data(spec, images[rows], dataset.labels, groups, task, dataset), calibration
