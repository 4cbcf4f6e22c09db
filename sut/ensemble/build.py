"""Build an ensemble for the runner: every member's backend (through the registry, as a single
SUT's is built), one QSL input per distinct preprocessing, and the ``EnsembleBackend``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.sut.ensemble.backend import EnsembleBackend, MemberRun
from quantmark.sut.ensemble.members import (
    DEFAULT_MEMBER_TIMEOUT_S,
    LOADGEN_MODEL,
    MEMBER_TIMEOUT_OPTION,
    Member,
    ensemble_name,
    parse_members,
    split_threads,
)
from quantmark.sut.info import SutInfo
from quantmark.sut.interface import Backend, SutOptions


@dataclass(frozen=True)
class EnsembleModel:
    """What the runner reads of a model spec, for an ensemble."""

    name: str
    members: tuple[Member, ...]
    performance_sample_count: int
    mlperf_name: str = LOADGEN_MODEL


@dataclass
class BuiltEnsemble:
    """Everything ``run.test_process.prepare`` needs in place of a single SUT's parts."""

    spec: EnsembleModel
    info: SutInfo
    dataset: Any
    calibration: Any  # the first member's (results.json records each member's own)
    backend: EnsembleBackend
    qsl: Any
    times: dict[str, float]


def member_options(config: RunConfig, info: SutInfo) -> dict[str, str]:
    """The --sut-options this member reads (each option goes to the members that declare it)."""
    declared = {key for key, _ in info.options}
    return {k: v for k, v in config.sut_options.items() if k in declared}


def check_options(config: RunConfig, infos: list[SutInfo]) -> float:
    """Every --sut-option must be read by a member or the ensemble; returns the member
    timeout."""
    from quantmark.sut.registry import check_options as check_member

    declared = {key for info in infos for key, _ in info.options}
    for key, value in config.sut_options.items():
        if key != MEMBER_TIMEOUT_OPTION and key not in declared:
            raise UserError(f"--sut-option {key}={value}: no ensemble member reads {key!r} "
                            f"(the ensemble itself reads {MEMBER_TIMEOUT_OPTION})")
    for info in infos:
        check_member(info, member_options(config, info))
    raw = config.sut_options.get(MEMBER_TIMEOUT_OPTION, str(DEFAULT_MEMBER_TIMEOUT_S))
    try:
        timeout = float(raw)
    except ValueError:
        timeout = -1.0
    if timeout <= 0:
        raise UserError(f"--sut-option {MEMBER_TIMEOUT_OPTION}={raw}: give seconds > 0")
    return timeout


def ensemble_info(config: RunConfig, infos: list[SutInfo]) -> SutInfo:
    """The ensemble's registry-like entry: its name, and every member's distributions."""
    devices = sorted({info.device for info in infos})
    distributions = tuple(dict.fromkeys(d for info in infos for d in info.distributions))
    return SutInfo(config.sut, "ensemble", "ensemble", "+".join(devices), "", (), None,
                   distributions=distributions)


def _load_member(config: RunConfig, member: Member, info: SutInfo, threads: int,
                 dataset: Any, times: dict[str, float]) -> tuple[Backend, Any, Any]:
    """One member's backend, loaded, with its model spec (the run's input size, class count
    and preprocessing applied, as for a single model) and calibration set."""
    from quantmark.models.workload import resolve_spec
    from quantmark.qsl.calibration_sets import CalibrationProvider
    from quantmark.sut.registry import load_factory

    spec = resolve_spec(replace(config, model=member.model, model_path=None))
    calibration = CalibrationProvider(dataset, spec, config.calibration_list)
    options = SutOptions(model=member.model, scenario=config.scenario,
                         batch_size=config.batch_size, threads=threads,
                         extra=member_options(config, info), co_located=True)
    started = time.perf_counter()
    backend = load_factory(info)(info.name, options, spec, calibration)
    times[f"{member.label} prepare_s"] = time.perf_counter() - started
    started = time.perf_counter()
    backend.load()
    times[f"{member.label} load_s"] = time.perf_counter() - started
    return backend, spec, calibration


def build_ensemble(config: RunConfig) -> BuiltEnsemble:
    """Load every member, the ensemble's inputs (one per distinct preprocessing) and the
    ensemble backend itself."""
    from quantmark.qsl import open_dataset
    from quantmark.sut.registry import require_available

    members = parse_members(config.ensemble)
    infos = [require_available(m.sut) for m in members]
    timeout = check_options(config, infos)
    dataset = open_dataset(config.dataset_path)
    total = config.threads or len(os.sched_getaffinity(0))
    threads = (split_threads(total, len(members)) if config.ensemble_mode == "concurrent"
               else [config.threads] * len(members))
    times: dict[str, float] = {}
    runs, specs, calibrations = [], [], []
    for member, info, count in zip(members, infos, threads, strict=True):
        backend, spec, calibration = _load_member(config, member, info, count, dataset, times)
        runs.append(MemberRun(member, backend, 0, count))
        specs.append(spec)
        calibrations.append(calibration)
    started = time.perf_counter()
    qsl = _inputs(runs, specs, dataset)
    times["inputs_s"] = time.perf_counter() - started
    backend = EnsembleBackend(runs, config.ensemble_mode, config.ensemble_combine, timeout,
                              record_outputs=config.mode == "accuracy")
    backend.load()  # loaded, as a single SUT's backend is when the runner gets it
    name = ensemble_name(members)
    model = EnsembleModel(name, members, min(s.performance_sample_count for s in specs))
    return BuiltEnsemble(model, ensemble_info(config, infos), dataset, calibrations[0],
                         backend, qsl, times)


def _inputs(runs: list[MemberRun], specs: list[Any], dataset: Any) -> Any:
    """One QSL per distinct (preprocessing recipe, encoding); members point at theirs."""
    from quantmark.qsl.library import QuerySampleLibrary
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.ensemble.inputs import EnsembleSamples

    libraries: list[Any] = []
    keys: dict[Any, int] = {}
    for k, (run, spec) in enumerate(zip(runs, specs, strict=True)):
        recipe = recipe_for(spec, run.backend.layout)
        encodes = type(run.backend).encode_samples is not Backend.encode_samples
        key = (recipe.key(), k if encodes else None)  # an encoding is the member's own
        if key not in keys:
            keys[key] = len(libraries)
            libraries.append(QuerySampleLibrary.from_dataset(
                dataset, recipe, spec.performance_sample_count,
                encode=run.backend.encode_samples if encodes else None))
        run.input_index = keys[key]
        run.input = {"crop": recipe.crop, "resize_short": recipe.resize_short,
                     "layout": recipe.layout, "encoded": encodes, "tensor": keys[key],
                     "shape": list(recipe.input_shape()), "dtype": recipe.dtype}
    return EnsembleSamples(libraries)
