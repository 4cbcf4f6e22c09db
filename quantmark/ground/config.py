"""The plain run description run.py builds from flags and hands to the launcher, and the
workload fields it shares with ``run.py diagnose`` and ``run.py profile``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


def sut_label(sut: str, options: Mapping[str, str] | None = None) -> str:
    """The SUT with the ``--sut-option`` values it ran with (``ov-int8 ov_api=async``): runs
    with other options are another configuration, never pooled into one figure."""
    return " ".join([sut, *(f"{key}={value}" for key, value in sorted((options or {}).items()))])


@dataclass(kw_only=True)
class WorkloadFields:
    """The model's file, task, shape and preprocessing, and the data it runs on: what a run, a
    diagnosis and a profile are each asked alike, and all that ``quantmark.models.workload``
    resolves a spec and opens a dataset from. Declared once, so the three configurations
    cannot drift apart; each inherits them (keyword-only: the inheriting configuration keeps
    its own positional fields first, ``RunConfig(scenario, sut, model)`` as before). The model's
    name stays each configuration's own required field for that reason."""

    model_path: str | None = None
    # the task (quantmark.tasks: classification, detection ...); "": read from the model
    task: str = ""
    # the model's own shape and preprocessing, where it is not the built-in model's
    # (quantmark.models.workload): "384" or "HEIGHTxWIDTH"; classes out (0: the model's own);
    # the preprocessing recipe as data (a preset, a recipe file's keys, the flags' values)
    input_size: str = ""
    num_classes: int = 0
    preprocess: dict[str, Any] = field(default_factory=dict)
    dataset_path: str | None = None
    # class names in the model's output order, one a line: maps a class-per-folder dataset's
    # folder names (or a val_map's) to the model's indices
    labels: str | None = None
    calibration_list: str | None = None
    # a text model's sequence length (0: the task's default), its padding ("": fixed) and
    # its tokenizer (a tokenizer.json or its folder; None: beside the model file)
    seq_len: int = 0
    padding: str = ""
    tokenizer: str | None = None


@dataclass
class RunConfig(WorkloadFields):
    """One LoadGen test: which SUT, model, scenario, mode and where to write (and the
    workload's fields: ``WorkloadFields``)."""

    scenario: str
    sut: str
    model: str
    mode: str = "performance"  # "performance" | "accuracy"
    audit: str = ""  # "" | "TEST01" | "TEST04": a compliance test (needs its audit.config)
    quick: bool = True
    user_conf: str | None = None
    output: str = "results"
    batch_size: int = 1
    threads: int = 0
    workers: int = 0  # 0: the backend's preferred_workers (OpenVINO streams), else 1
    quick_duration_ms: int = 5_000
    system_id: str = ""
    sut_options: dict[str, str] = field(default_factory=dict)  # --sut-option KEY=VALUE
    # one run of a repeat set: written to performance/run_<repeat>; the set's id ties its runs
    repeat: int = 1
    repeats: int = 1
    repeat_set: str = ""
    # --until-stable's target (percent) for a set run under that stopping rule, else None:
    # its interval is the rule's (quantmark.report.stopping), also when a report reads it
    until_stable: float | None = None
    # an ensemble (--ensemble MODEL@SUT,...): sut is then "ensemble-<mode>[-vote]" and model
    # the members joined with "+"
    ensemble: str = ""
    ensemble_mode: str = "sequential"  # "sequential" | "concurrent"
    ensemble_combine: str = "mean"  # "mean" (of softmax probabilities) | "vote"
    # a quick run rerun once at the rate its INVALID first run met (quantmark.run.rerun): why,
    # and that rate; empty for every other run
    rerun: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data = json.loads(text)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_json(Path(path).read_text())
