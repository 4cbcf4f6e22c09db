"""``run.py profile``: where one SUT's inference time goes, layer by layer, against another's.

Both SUTs are built exactly as a run builds them, on real samples of the run's dataset; each
framework's ``profile`` module reads its own profiler (``quantmark.sut.profiling``); the layers
are paired and the answers computed in ``layer_times``. A framework that cannot profile is one
line in the record, and the other side still reports.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from quantmark.diagnosis import layer_times
from quantmark.diagnosis.steps import build, open_data
from quantmark.ground.errors import SutError, UserError
from quantmark.models.workload import resolve_spec
from quantmark.sut.profiling import Profile
from quantmark.sut.registry import fp32_baseline, require_available


@dataclass
class ProfileConfig:
    """What ``run.py profile`` was asked (plain data, from the CLI)."""

    model: str
    sut: str
    against: str | None = None  # None: the SUT's framework's FP32
    batch_size: int = 1
    iterations: int = 50
    warmup: int = 10
    worst: int = 10
    threads: int = 0
    output: str = "results"
    dataset_path: str | None = None
    model_path: str | None = None
    calibration_list: str | None = None
    input_size: str = ""
    num_classes: int = 0
    preprocess: dict[str, Any] = field(default_factory=dict)
    labels: str | None = None


def profiler(info: Any) -> ModuleType | None:
    """The ``profile`` module of the SUT's framework folder, or None where it has none."""
    try:
        return importlib.import_module(f"{info.package}.profile")
    except ModuleNotFoundError as exc:
        if exc.name != f"{info.package}.profile":
            raise
        return None


def check(config: ProfileConfig) -> str:
    """The reference SUT; one line for a request that cannot be profiled."""
    if config.iterations < 3 or config.warmup < 0 or config.batch_size < 1 or config.worst < 1:
        raise UserError("--iterations must be at least 3 (a median), --warmup at least 0, "
                        "--batch-size and --worst at least 1")
    reference = config.against or fp32_baseline(config.sut)
    if reference is None:
        raise UserError(f"{config.sut} has no FP32 SUT of its own framework to compare with: "
                        "pass --against SUT")
    if reference == config.sut:
        raise UserError(f"profile {config.sut} against itself: pass --against another SUT")
    return reference


def profile_one(config: ProfileConfig, name: str, spec: Any, data: Any,
                calibration: Any) -> tuple[Profile | None, str | None]:
    """One SUT's profile, or why there is none (its framework has no profiler here)."""
    info = require_available(name)
    module = profiler(info)
    if module is None:
        return None, f"{info.framework} ({name}) has no per-layer profiler in quantmark yet"
    backend, _ = build(config, name, spec, calibration)
    try:
        samples = data.batch(backend.layout, 0, config.batch_size)
        return module.profile(backend, samples, config.iterations, config.warmup), None
    except SutError as exc:  # the framework's profiler or tool is missing here
        return None, str(exc)
    finally:
        backend.close()


def run(config: ProfileConfig) -> dict[str, Any]:
    """Profile the SUT and its reference; return the record (written by the caller)."""
    reference = check(config)
    spec = resolve_spec(config)
    data, calibration = open_data(config, spec)
    if len(data.labels) < config.batch_size:
        raise UserError(f"--batch-size {config.batch_size} is more than the dataset's "
                        f"{len(data.labels)} samples; pass a smaller batch")
    test, test_why = profile_one(config, config.sut, spec, data, calibration)
    ref, ref_why = profile_one(config, reference, spec, data, calibration)
    record: dict[str, Any] = {
        "model": spec.name, "sut": config.sut,
        "against": reference, "batch_size": config.batch_size,
        "iterations": config.iterations, "warmup": config.warmup,
        "unsupported": {name: why for name, why in ((config.sut, test_why),
                                                   (reference, ref_why)) if why}}
    for key, found in (("test", test), ("reference", ref)):
        if found is not None:
            record[key] = {**asdict(found), "shares": layer_times.shares(found),
                           "sum_check": layer_times.sum_check(found)}
    if test is not None and ref is not None:
        rows = layer_times.compare(test, ref)
        record["layers"] = [row_record(row) for row in rows]
        record["slower"] = [row_record(row) for row in layer_times.slower(rows, config.worst)]
    return record


def row_record(row: layer_times.Row) -> dict[str, Any]:
    """One paired layer, as the record and the tables hold it."""
    def side(layer: layer_times.Layer | None) -> dict[str, Any] | None:
        if layer is None:
            return None
        return {"name": layer.name, "op_type": layer.op_type, "kernel": layer.kernel,
                "precision": layer.precision, "compute_ms": layer.compute_ms,
                "overhead_ms": layer.overhead_ms, "total_ms": layer.total_ms,
                "overhead": [o.name for o in layer.overhead]}

    return {"test": side(row.test), "reference": side(row.reference),
            "matched_by": row.matched_by, "ratio": row.ratio, "ms_lost": row.ms_lost}
