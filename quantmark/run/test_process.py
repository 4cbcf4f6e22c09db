"""The child process: one LoadGen test, start to finish.

``python -m quantmark.run.test_process CONFIG.json STATUS.json``. Builds the SUT (artifact
prepared or taken from the cache), the QSL and the TestSettings, runs LoadGen into a temporary
folder, and only when the run finished moves it over the final ``run_1``/``accuracy`` folder,
so a failed or interrupted run never destroys an earlier good one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground import logs
from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError
from quantmark.ground.faults import environment_fault
from quantmark.ground.hashing import atomic_write_json
from quantmark.ground.layout import run_dir, system_id
from quantmark.ground.lifetime import die_with_parent
from quantmark.models.zoo import MODEL_NAMES
from quantmark.qsl.calibration_sets import CalibrationProvider
from quantmark.qsl.library import QuerySampleLibrary
from quantmark.run.folder import RunFolder
from quantmark.run.record import record
from quantmark.scenarios.settings import BuiltSettings, Measurement, SettingsPlan, build_settings
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.registry import load_factory, require_available
from quantmark.sut.warmup import measure
from quantmark.tasks.catalog import get_task, task_for
from quantmark.tasks.contract import Task

# A quick performance run's LoadGen window may last this many times what it should take (at
# least QUICK_WALL_MIN_S): a SUT far slower than its warm-up estimate fails instead of running
# for many minutes. A 2-core machine shared with other work ran quick runs 4-5x slower than
# their warm-up; the seed issue's fast model took 47x.
QUICK_WALL_FACTOR = 12
QUICK_WALL_MIN_S = 120.0


@dataclass
class Prepared:
    """Everything built before LoadGen starts."""

    spec: Any
    info: Any
    dataset: Any
    calibration: CalibrationProvider
    backend: Any
    qsl: Any
    workers: int
    measurement: Any
    built: Any
    times: dict[str, float]
    task: Task


@dataclass
class Ran:
    """What LoadGen's run left: the SUT adapter, its wall time and the board around it."""

    sut: Any
    audit_config: Path
    started: float
    wall_s: float
    thermal_before: dict[str, Any]
    thermal_after: dict[str, Any]


def build_sut(config: RunConfig) -> tuple[Any, Any, Any, CalibrationProvider, Backend,
                                          dict[str, float]]:
    """The model, the SUT's registry entry, the dataset, the calibration set and the loaded
    backend (its artifact prepared or taken from the cache), with what that took.

    A ``keep_float`` option (a mixed-precision point) builds the backend through its
    framework's ``rebuild`` with those layers excluded, as ``run.py diagnose --recover``
    does: the framework's own exclusion, its artifact cached under its own key."""
    import importlib

    from quantmark.sut.layers import Recipe
    from quantmark.sut.registry import keep_float_layers

    task = task_for(config)
    spec = task.resolve_spec(config)
    info = require_available(config.sut)
    dataset = task.open_dataset(config, spec)
    calibration = task.calibration(dataset, spec, task.calibration_list(config, dataset))
    options = SutOptions(model=config.model, scenario=config.scenario,
                         batch_size=config.batch_size, threads=config.threads,
                         model_path=task.model_file(config), extra=dict(config.sut_options))
    kept = keep_float_layers(config.sut_options)  # the registry admitted only its takers
    times: dict[str, float] = {}
    start = time.perf_counter()
    if kept:
        rebuild = importlib.import_module(f"{info.package}.diagnose").rebuild
        backend = rebuild(info.name, options, spec, calibration, Recipe(exclude=kept))
    else:
        backend = load_factory(info)(info.name, options, spec, calibration)
    times["prepare_s"] = time.perf_counter() - start
    start = time.perf_counter()
    backend.load()
    times["load_s"] = time.perf_counter() - start
    return spec, info, dataset, calibration, backend, times


def plan_settings(config: RunConfig, spec: Any, backend: Backend, qsl: QuerySampleLibrary,
                  times: dict[str, float], task: Task) -> tuple[int, Measurement,
                                                                BuiltSettings]:
    """Workers, the warm-up measurement, and LoadGen's TestSettings made from them."""
    # OpenVINO's throughput mode runs several streams: it needs that many requests in flight
    workers = config.workers or max(1, int(backend.preferred_workers))
    measurement = measure(backend, qsl, config.batch_size, config.scenario, workers, times,
                          respond=task.respond(spec))
    plan = SettingsPlan(scenario=config.scenario, mode=config.mode, quick=config.quick,
                        loadgen_model=spec.mlperf_name,
                        known_models=tuple(dict.fromkeys([*MODEL_NAMES, spec.mlperf_name])),
                        user_conf=config.user_conf,
                        quick_min_duration_ms=config.quick_duration_ms, workers=workers,
                        met_rate=float(config.rerun.get("met_samples_per_s") or 0.0))
    return workers, measurement, build_settings(plan, measurement)


def prepare(config: RunConfig, on_fatal: Callable[[str], None] | None = None) -> Prepared:
    """Build the SUT (or an ensemble of them), open the QSL, plan the settings: everything
    before LoadGen starts. ``on_fatal`` ends the process if the backend sees a hang."""
    task = get_task("classification") if config.ensemble else task_for(config)
    if config.ensemble:  # ensembles combine classifiers' scores
        from quantmark.sut.ensemble.build import build_ensemble

        ensemble = build_ensemble(config)
        spec, info, dataset = ensemble.spec, ensemble.info, ensemble.dataset
        calibration, backend, qsl = ensemble.calibration, ensemble.backend, ensemble.qsl
        times = ensemble.times
    else:
        spec, info, dataset, calibration, backend, times = build_sut(config)
        qsl = task.sample_library(dataset, spec, backend)
    # the task as this SUT runs it (a detector's NMS on its framework's op): the warm-up, the
    # run's responses and the record all use this one
    task = task.for_sut(info)
    if on_fatal is not None:
        backend.arm(on_fatal)
    workers, measurement, built = plan_settings(config, spec, backend, qsl, times, task)
    return Prepared(spec, info, dataset, calibration, backend, qsl, workers, measurement, built,
                    times, task)


def quick_wall_bound_s(config: RunConfig, settings: Any, measurement: Any) -> float | None:
    """How long a quick performance run's LoadGen window may last, or None (unbounded:
    official runs, and accuracy runs, whose length is the dataset's). The run should take the
    longer of its minimum duration and its minimum queries at the measured latency; the bound
    is QUICK_WALL_FACTOR times that, never under QUICK_WALL_MIN_S, so a busy machine that
    halves the SUT's speed never trips it."""
    if not config.quick or config.mode != "performance":
        return None
    per_query = {"SingleStream": measurement.latency_s,
                 "MultiStream": measurement.query_latency_s(
                     settings.multi_stream_samples_per_query or 8)}.get(config.scenario, 0.0)
    if config.scenario == "Server" and settings.server_target_qps > 0:
        per_query = 1.0 / settings.server_target_qps  # its queries arrive on that schedule
    expected_s = max(settings.min_duration_ms / 1000, settings.min_query_count * per_query)
    return max(QUICK_WALL_MIN_S, QUICK_WALL_FACTOR * expected_s)


def run_loadgen(config: RunConfig, prepared: Prepared, folder: RunFolder,
                status_path: Path) -> Ran:
    """Run LoadGen into the folder's temp folder. A ``predict`` that raised, or a quick run that
    overran its bound, ends the process with exit 3 and the logs kept as ``.failed``."""
    import mlperf_loadgen as lg

    from quantmark.ground.board import thermal_snapshot
    from quantmark.sut.base import LoadGenSUT

    work = folder.start()

    def end_process(message: str) -> None:
        failed = folder.keep_failed(None)
        _write_status(status_path, "failed", str(failed), {}, f"{message}; logs in {failed}")
        os._exit(3)

    sut = LoadGenSUT(prepared.backend.predict, prepared.qsl, batch_size=config.batch_size,
                     workers=prepared.workers, label_offset=prepared.backend.label_offset,
                     inline_single=config.scenario == "SingleStream",
                     on_fatal=lambda exc: end_process(f"predict raised: {exc!r}"),
                     submit=getattr(prepared.backend, "submit", None),
                     respond=prepared.task.respond(prepared.spec))
    prepared.backend.arm(end_process)  # a hang from here on keeps LoadGen's logs
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(work)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    # LoadGen applies any audit.config it finds in the working directory, so a normal run names
    # a file that cannot exist and an audit run the one the launcher put in its working folder.
    audit_config = (Path.cwd() / "audit.config" if config.audit
                    else work / "no-audit-config-for-this-run")
    bound_s = quick_wall_bound_s(config, prepared.built.settings, prepared.measurement)
    watchdog = None if bound_s is None else threading.Timer(bound_s, end_process, args=(
        f"quick run still running after {bound_s:.0f} s (the SUT ran far slower than its "
        f"warm-up measurement, {prepared.measurement.offline_rate(prepared.workers):.0f} "
        "samples/s); set target_qps / target_latency in a --user-conf",))
    sut_handle, qsl_handle = sut.start(), prepared.qsl.construct()
    before = thermal_snapshot()  # a board that throttles gives other numbers: the report says
    started = time.time()
    try:
        if watchdog is not None:
            watchdog.daemon = True
            watchdog.start()
        lg.StartTestWithLogSettings(sut_handle, qsl_handle, prepared.built.settings,
                                    log_settings, str(audit_config))
    finally:
        if watchdog is not None:
            watchdog.cancel()
        sut.stop()
        prepared.qsl.destroy()
    return Ran(sut, audit_config, started, time.time() - started, before, thermal_snapshot())


def check_run(config: RunConfig, ran: Ran, folder: RunFolder) -> None:
    """Raise (keeping the logs as ``.failed``) unless every sample was answered, the audit
    config was applied exactly when asked for, and LoadGen's logs are complete."""
    from quantmark.audit.configs import audit_was_applied

    sut = ran.sut
    if sut.error is not None or not sut.all_completed:
        failed = folder.keep_failed(sut.error_traceback)
        if sut.error is not None:
            raise SutError(f"predict raised {sut.error!r}; all {sut.completed} issued samples "
                           f"were completed with class -1 so LoadGen could finish; logs in "
                           f"{failed}")
        raise SutError(f"{sut.issued} samples issued but {sut.completed} completed; logs in "
                       f"{failed}")
    folder.check_logs()
    applied = audit_was_applied(folder.work / "mlperf_log_detail.txt")
    if applied != bool(config.audit):
        failed = folder.keep_failed(None)
        raise SutError(f"{config.audit} run but LoadGen did not apply {ran.audit_config}; logs "
                       f"in {failed}" if config.audit else
                       f"LoadGen applied an audit.config to a normal run; logs in {failed}")


def run_test(config: RunConfig, status_path: Path) -> dict[str, Any]:
    """Run one test; returns the results dict written as results.json."""
    system = config.system_id or system_id(config.sut)
    final = run_dir(config.output, system, config.model, config.scenario, config.mode,
                    config.audit, config.repeat)

    def end_before_loadgen(message: str) -> None:
        _write_status(status_path, "failed", None, {}, message)
        os._exit(3)

    with RunFolder(final) as folder:
        prepared = prepare(config, end_before_loadgen)
        ran = run_loadgen(config, prepared, folder, status_path)
        check_run(config, ran, folder)
        results = record(config, system, prepared, ran, folder.work)
        if config.mode == "accuracy" and results["accuracy"].get("missing"):
            failed = folder.keep_failed(None)
            raise SutError(f"{results['accuracy']['missing']} of {prepared.qsl.total_count} "
                           f"samples have no response in the accuracy log; logs in {failed}")
        folder.promote()
    results["run_dir"] = str(final)
    return results


def _write_status(path: Path, status: str, run_dir_: str | None, results: dict[str, Any],
                  message: str = "") -> None:
    atomic_write_json(path, {"status": status, "run_dir": run_dir_, "results": results,
                             "message": message})


def main(argv: list[str]) -> int:
    die_with_parent()
    logs.setup()
    config_path, status_path = Path(argv[0]), Path(argv[1])
    config = RunConfig.load(config_path)
    try:
        results = run_test(config, status_path)
    except UserError as exc:
        _write_status(status_path, "user_error", None, {}, str(exc))
        return 2
    except SutError as exc:
        _write_status(status_path, "failed", None, {}, str(exc))
        return 3
    except Exception as exc:  # noqa: BLE001 - report any crash as one line to the parent
        fault = environment_fault(exc)  # disk full, permissions, a file in the way: not the SUT
        if fault is not None:
            _write_status(status_path, "user_error", None, {}, fault)
            return 2
        traceback.print_exc(file=sys.stderr)
        _write_status(status_path, "failed", None, {}, f"{type(exc).__name__}: {exc}")
        return 1
    _write_status(status_path, "ok", results["run_dir"], results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
