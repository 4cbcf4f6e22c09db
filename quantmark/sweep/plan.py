"""What a sweep runs: its settings (from flags or a YAML/TOML file: ``spec_file``) and the cells
they expand to.

A cell is one LoadGen test: a model (at an input size, on a dataset: ``quantmark.sweep.axes``;
a text model at a sequence length: ``quantmark.sweep.lengths``),
a SUT, a scenario, a batch size and a repeat, or the accuracy run of a (model, SUT). Cells are
ordered so each SUT's accuracy run comes first (it builds and caches the artifact, so no timed
run pays a conversion) and a framework's FP32 SUT runs just before its other precisions (ratios
then compare runs minutes apart). Repeats go round the whole sweep, so their spread shows the
machine's drift, not one moment's.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.sweep import axes, lengths, variants
from quantmark.sweep.spec import SweepSpec
from quantmark.sweep.spec_file import KEY_TYPES, LIMITS, is_whole, load_sweep_file, out_of_range
from quantmark.sweep.variants import Options, as_options, folder_suffix

__all__ = ["KEY_TYPES", "Cell", "SweepSpec", "build_spec", "cells", "load_sweep_file",
           "spec_from_args"]

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
ACCURACY_BATCH = 8


@dataclass(frozen=True)
class Cell:
    """One LoadGen test of the sweep."""

    model: str
    sut: str
    scenario: str
    batch_size: int
    repeat: int = 1
    mode: str = "performance"  # "performance" | "accuracy"
    ensemble: str = ""  # an ensemble's members (MODEL@SUT,...): model and sut then name it
    ensemble_mode: str = "sequential"
    sut_options: Options = ()  # the variant: the --sut-option values this cell runs with
    input_size: str = ""  # "128" or "HxW" (--image-sizes); "": the model's own
    dataset: str = ""  # the dataset folder (--datasets); "": the sweep's --dataset-path
    seq_len: int = 0  # a text model's sequence length (--seq-lens); 0: the task's default

    @property
    def id(self) -> str:
        """``model/sut/test``; a variant's SUT part carries its options
        (``ov-int8+ov_api=async``) and the model part its size or sequence length and its
        dataset (``resnet50+size=128+data=flowers``, ``minilm+seq=32``), so no two cells share
        a folder or an entry."""
        model = self.model + axes.suffix(self.input_size, self.dataset, self.seq_len)
        sut = self.sut + folder_suffix(self.sut_options)
        if self.mode == "accuracy":
            return f"{model}/{sut}/accuracy"
        return f"{model}/{sut}/{self.scenario}-b{self.batch_size}-r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sut_options": dict(self.sut_options)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        """The cell of a manifest entry or a task's argument (extra keys ignored)."""
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        return cls(**{**known, "sut_options": as_options(known.get("sut_options"))})


def cells(spec: SweepSpec) -> list[Cell]:
    """Every cell in run order. SingleStream queries hold one sample, so it runs at batch 1
    only; the other scenarios run every batch size. Each dataset and input size (or
    sequence length) runs every SUT in turn, so a size's FP32 and INT8 cells run minutes
    apart."""
    out: list[Cell] = []
    for repeat in range(1, spec.repeats + 1):
        for model in spec.models:
            for dataset in spec.datasets or [""]:
                for size, seq in _shapes(spec, model):
                    for sut in spec.suts:
                        out.extend(_cells_of(spec, model, sut, repeat,
                                             workload=(size, dataset, seq)))
        out.extend(_ensemble_cells(spec, repeat))
    return out


def _shapes(spec: SweepSpec, model: str) -> list[tuple[str, int]]:
    """(input size, sequence length) of each of ``model``'s cells: an image model's sizes or
    a text model's lengths, never both (``lengths.check``); ``("", 0)`` for its own."""
    return [(size, seq) for size in axes.cell_sizes(spec.image_sizes, model, spec.model_path)
            for seq in lengths.cell_seq_lens(spec.seq_lens)]


def _cells_of(spec: SweepSpec, model: str, sut: str, repeat: int, ensemble: str = "",
              mode: str = "sequential", accuracy: bool = True,
              workload: tuple[str, str, int] = ("", "", 0)) -> list[Cell]:
    """One (model, SUT)'s cells of one repeat at one (input size, dataset, sequence length),
    each variant of its options in turn: its accuracy run first (repeat 1), then every
    scenario and batch size."""
    from quantmark.sut.ensemble.members import parse_members

    readers = [m.sut for m in parse_members(ensemble)] if ensemble else [sut]
    out: list[Cell] = []
    size, dataset, seq_len = workload
    for options in variants.variants(spec.sut_options, readers, bool(ensemble)):
        if spec.accuracy and accuracy and repeat == 1:
            batch = min(ACCURACY_BATCH, max(spec.batch_sizes))
            out.append(Cell(model, sut, "Offline", batch, mode="accuracy", ensemble=ensemble,
                            ensemble_mode=mode, sut_options=options, input_size=size,
                            dataset=dataset, seq_len=seq_len))
        for scenario in spec.scenarios:
            batches = [1] if scenario == "SingleStream" else spec.batch_sizes
            out.extend(Cell(model, sut, scenario, b, repeat, ensemble=ensemble,
                            ensemble_mode=mode, sut_options=options, input_size=size,
                            dataset=dataset, seq_len=seq_len) for b in batches)
    return out


def _ensemble_cells(spec: SweepSpec, repeat: int) -> list[Cell]:
    """Each ensemble's members alone (the baseline, where the models x SUTs product lacks
    them), then the ensemble in each mode; the first mode's accuracy run gives the top-1s."""
    from quantmark.sut.ensemble.members import ensemble_name, parse_members, sut_name

    done = {(model, sut) for model in spec.models for sut in spec.suts}
    out: list[Cell] = []
    for text in spec.ensembles:
        members = parse_members(text)
        for member in members:
            if (member.model, member.sut) not in done:
                done.add((member.model, member.sut))
                out.extend(_cells_of(spec, member.model, member.sut, repeat))
        for number, mode in enumerate(spec.ensemble_modes):
            out.extend(_cells_of(spec, ensemble_name(members), sut_name(mode, "mean"), repeat,
                                 text, mode, accuracy=number == 0))
    return out


def expand_suts(names: list[str]) -> list[str]:
    """SUT names, with ``cpu`` / ``gpu`` / ``all`` standing for every SUT of that kind, each
    framework's FP32 first. Unknown names are a one-line error listing the valid ones."""
    from quantmark.sut.registry import FP32_BASELINE, SUTS, get_sut

    chosen: list[str] = []
    for name in names:
        if name in ("cpu", "gpu", "all"):
            chosen.extend(info.name for info in SUTS.values()
                          if name == "all" or info.device == name)
        else:
            chosen.append(get_sut(name).name)
    chosen = list(dict.fromkeys(chosen))
    frameworks = list(dict.fromkeys(SUTS[n].framework for n in chosen))
    return sorted(chosen, key=lambda n: (frameworks.index(SUTS[n].framework),
                                         n != FP32_BASELINE.get(SUTS[n].framework)))


def _as_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise UserError(f"{name}: give a comma-separated list, e.g. --{name} a,b")
    if not items:
        raise UserError(f"{name}: the list is empty")
    return items


def spec_from_args(args: Any, file_settings: dict[str, Any]) -> SweepSpec:
    """The sweep ``run.py sweep`` asks for: its flags (argparse's namespace, a flag not given
    being None) over its file's settings (``load_sweep_file``). ``--sut-option`` (the
    namespace's ``sut_option``, "KEY=VALUE" or "KEY=V1,V2" strings) replaces those keys of
    the file's ``sut_options``; ``workers``, ``model_path`` and the rest replace the key."""
    flags = {key: value for key, value in vars(args).items()
             if value is not None and key not in ("file", "retry_failed")}
    # one dataset or several: the flag given replaces the file's either way
    replaced = {"datasets": "dataset_path", "dataset_path": "datasets"}
    dropped = {replaced[key] for key in flags if key in replaced}
    return build_spec({**{k: v for k, v in file_settings.items() if k not in dropped}, **flags})


def build_spec(settings: dict[str, Any]) -> SweepSpec:
    """Check and normalise settings (from a file, flags overriding) into a SweepSpec."""
    from quantmark.tasks.catalog import builtin_models

    ensembles, modes = _ensembles(settings)
    settings = _model_of_file(settings, ensembles)
    if not ensembles and ("models" not in settings or "suts" not in settings):
        raise UserError("a sweep needs --models and --suts, or --ensemble (or models and "
                        "suts, or ensembles, in the file)")
    models = _as_list(settings["models"], "models") if "models" in settings else []
    known = builtin_models()
    for model in models:
        if model not in known and not settings.get("model_path"):
            raise UserError(f"unknown model '{model}'; valid models: {', '.join(known)}")
    scenarios = _as_list(settings.get("scenarios", "Offline,SingleStream"), "scenarios")
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise UserError(f"unknown scenario '{scenario}'; valid: {', '.join(SCENARIOS)}")
    numbers = _numbers(settings)
    spec = SweepSpec(
        models=list(dict.fromkeys(models)),
        suts=expand_suts(_as_list(settings["suts"], "suts")) if "suts" in settings else [],
        ensembles=ensembles, ensemble_modes=modes,
        scenarios=list(dict.fromkeys(scenarios)),
        batch_sizes=sorted(set(numbers.pop("batch_sizes"))), **numbers,
        output=str(settings.get("output") or "sweep"),
        official=_flag(settings, "official", False),
        accuracy=_flag(settings, "accuracy", True),
        model_path=settings.get("model_path"), sut_options=variants.from_settings(settings),
        dataset_path=settings.get("dataset_path"),
        image_sizes=axes.image_sizes(_given(settings, "image_sizes", "input_size")),
        datasets=axes.datasets(settings.get("datasets")),
        seq_lens=lengths.given_seq_lens(settings), padding=lengths.padding(settings),
        tokenizer=settings.get("tokenizer"),
        preprocess=axes.recipe(settings), labels=settings.get("labels"),
        calibration_list=settings.get("calibration_list"),
        user_conf=settings.get("user_conf"),
        **_cluster(settings),
    )
    _check_model_path(spec)
    axes.check(spec)
    lengths.check(spec)
    variants.check(spec.sut_options, _sweep_suts(spec), bool(spec.ensembles))
    _check_batches_fit(spec)
    return spec


def _numbers(settings: dict[str, Any]) -> dict[str, Any]:
    """The numeric settings, each checked against its range (a refusal names the flag)."""
    raw_batches = settings.get("batch_sizes", "8")
    try:
        numbers: dict[str, Any] = {
            "batch_sizes": [int(b) for b in _as_list(
                [raw_batches] if is_whole(raw_batches) else raw_batches, "batch-sizes")],
            "repeats": int(settings.get("repeats", 1)),
            "seconds": float(settings.get("seconds", 10.0)),
            "timeout": float(settings.get("timeout", 1800.0)),
            "threads": int(settings.get("threads", 0)),
            "workers": int(settings.get("workers", 0)),
            "num_classes": int(settings.get("num_classes", 0))}
    except (TypeError, ValueError) as exc:
        raise UserError(f"sweep settings: a number was expected ({exc})") from None
    for key, value in numbers.items():
        bad = out_of_range(key, value)
        if bad is not None:
            raise UserError(f"--{key.replace('_', '-')} {bad:g}: must be {LIMITS[key][2]}")
    return numbers


def _model_of_file(settings: dict[str, Any], ensembles: list[str]) -> dict[str, Any]:
    """With ``--model-path`` and no models, the model an exported file records (as run.py's
    --model may be left out on the device)."""
    path = settings.get("model_path")
    if not path or ensembles or "models" in settings:
        return settings
    from quantmark.models.exported import exported_model
    from quantmark.models.workload import file_model_name

    found = exported_model(str(path)) or file_model_name(str(path))
    return {**settings, "models": found} if found else settings


def _check_model_path(spec: SweepSpec) -> None:
    """``--model-path`` is one model's file: one model, no ensembles, a file every SUT of
    the sweep can read."""
    from quantmark.run.checks import check_model_path

    if not spec.model_path:
        return
    if spec.ensembles:
        raise UserError("--model-path is one model's file, and an ensemble names its members' "
                        "models (MODEL@SUT): drop --model-path or --ensemble")
    if len(spec.models) != 1:
        raise UserError(f"--model-path is one model's file, but --models names "
                        f"{len(spec.models)} ({', '.join(spec.models)}): give the one model "
                        "the file is")
    for sut in spec.suts:
        check_model_path(spec.model_path, spec.models[0], sut)


def _sweep_suts(spec: SweepSpec) -> list[str]:
    """Every registry SUT the sweep runs: its SUTs and its ensembles' members."""
    from quantmark.sut.ensemble.members import parse_members

    members = [m.sut for text in spec.ensembles for m in parse_members(text)]
    return list(dict.fromkeys(spec.suts + members))


def _flag(settings: dict[str, Any], key: str, default: bool) -> bool:
    """A real boolean: the string "false" is not False, and must not turn into True."""
    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"sweep setting {key} = {value!r}: must be true or false")
    return value


def _given(settings: dict[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the settings give (a sweep's ``--image-sizes``, else the shared
    run flag ``--input-size``); None when none is."""
    return next((settings[key] for key in keys if settings.get(key) not in (None, "")), None)


def _check_batches_fit(spec: SweepSpec) -> None:
    """The largest batch must be one the samples of every dataset can fill and the memory
    hold, for every model at its largest size: found now, not as a crashed cell an hour in.
    (SingleStream cells run batch 1.)"""
    from quantmark.models.zoo import get_model
    from quantmark.qsl.footprint import check_memory
    from quantmark.run.checks import (
        MEMINFO,
        available_memory,
        check_batch_fits,
        check_dataset,
        dataset_size,
    )
    from quantmark.sut.ensemble.members import parse_members

    folders = spec.datasets or [spec.dataset_path]
    members = [m.model for text in spec.ensembles for m in parse_members(text)]
    batched = any(scenario != "SingleStream" for scenario in spec.scenarios)
    batch = max(spec.batch_sizes) if batched else 1  # a SingleStream-only sweep runs batch 1
    for model in dict.fromkeys(spec.models + members):
        specs = axes.sized_specs(spec, model) if model in spec.models else [get_model(model)]
        largest = max(specs, key=lambda s: s.channels * s.input_size * s.input_width)
        for folder in folders:
            images = None
            if largest.task == "classification":  # a folder of labelled images
                check_dataset(folder, spec.labels)
            else:  # another task's folder (COCO, YOLO, texts) is its task's to read
                images = len(_task_dataset(spec, model, folder, largest).all_items)
            check_batch_fits(batch, largest, folder, flag="--batch-sizes", images=images)
            if largest.task != "text":  # an image set: its loaded samples fit in memory
                # (the built-in set holds a performance set at least: that bounds what loads)
                count = images or (dataset_size(folder) if folder
                                   else largest.performance_sample_count)
                check_memory(largest, count, available_memory(MEMINFO))


def _task_dataset(spec: SweepSpec, model: str, folder: str | None, model_spec: Any) -> Any:
    """The dataset a model's task opens for ``folder`` (its built-in one for None); a text
    model's tokenized at its longest length, which the model's positions must hold."""
    from quantmark.ground.config import RunConfig
    from quantmark.tasks.catalog import task_for

    config = RunConfig(scenario="Offline", sut="", model=model, model_path=spec.model_path,
                       dataset_path=folder, labels=spec.labels, tokenizer=spec.tokenizer)
    try:
        return task_for(config).open_dataset(config, model_spec)
    except UserError as exc:
        if spec.seq_lens and getattr(model_spec, "seq_len", 0):
            raise UserError(f"{lengths.SEQ_LENS_FLAG}: {exc}") from None
        raise


def _ensembles(settings: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The sweep's ensembles (each checked, in canonical form) and the modes they run in."""
    from quantmark.sut.ensemble.members import MODES, canonical, parse_members

    raw = settings.get("ensembles") or []
    texts = [raw] if isinstance(raw, str) else [str(text) for text in raw]
    ensembles = list(dict.fromkeys(canonical(parse_members(text)) for text in texts))
    modes = _as_list(settings.get("ensemble_modes", ",".join(MODES)), "ensemble-modes")
    for mode in modes:
        if mode not in MODES:
            raise UserError(f"unknown ensemble mode '{mode}'; valid: {', '.join(MODES)}")
    return ensembles, list(dict.fromkeys(modes))


def _cluster(settings: dict[str, Any]) -> dict[str, Any]:
    """The Ray cluster to run on and the placement rules (checked; rules need a cluster)."""
    from quantmark.sweep.placement import parse_rule

    cluster = str(settings.get("cluster") or "").strip()
    raw = settings.get("placement") or []
    rules = [raw] if isinstance(raw, str) else [str(rule) for rule in raw]
    for rule in rules:
        parse_rule(rule)
    if rules and not cluster:
        raise UserError("--place decides where cells run on a Ray cluster: add --cluster auto "
                        "(or --cluster HOST:PORT), or drop --place")
    if cluster and cluster != "auto" and not re.fullmatch(r"(ray://)?[^\s:/]+:\d+", cluster):
        raise UserError(f"--cluster {cluster}: use auto (the cluster this machine joined), "
                        "HOST:PORT (its head) or ray://HOST:PORT (Ray Client)")
    return {"cluster": cluster, "placement": list(dict.fromkeys(rules))}
