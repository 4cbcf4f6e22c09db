"""The child process: one LoadGen test, start to finish.

``python -m quantmark.runner CONFIG.json STATUS.json``. Builds the SUT (artifact prepared or
taken from the cache), the QSL and the TestSettings, runs LoadGen into a temporary folder, and
only when the run finished moves it over the final ``run_1``/``accuracy`` folder, so a failed or
interrupted run never destroys an earlier good one.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from models.artifacts import artifact_size_bytes
from quantmark.config import RunConfig
from quantmark.errors import SutError, UserError
from quantmark.hashing import atomic_write_json, atomic_write_text
from quantmark.layout import run_dir, system_id
from quantmark.paths import pid_alive

WARMUP_SECONDS = 1.0  # per measured batch shape
CALIBRATION_COUNT = {"builtin": 256, "imagenet": 500}


class CalibrationProvider:
    """Calibration data for INT8 SUTs, chosen before the QSL exists and decoded only on use.

    The same images are held out of an ImageNet folder whatever the SUT, so FP32 and INT8 are
    scored on the same evaluation set: at most 500 (MLPerf's calibration list size), at most a
    tenth of the folder. ``--calibration-list`` holds nothing out.
    """

    def __init__(self, dataset: Any, spec: Any, list_file: str | None) -> None:
        from qsl.calibration import calibration_for

        if dataset.builtin:
            count = CALIBRATION_COUNT["builtin"]
        else:  # a hold-out size; a --calibration-list uses all its entries instead
            count = min(CALIBRATION_COUNT["imagenet"], len(dataset) // 10)
        self._dataset_size = len(dataset)
        self._set = None
        if count > 0 or list_file:
            self._set = calibration_for(dataset, count=max(count, 1), seed=0,
                                        list_file=list_file, recipe=recipe_for(spec, "NCHW"))

    def _require(self):
        if self._set is None:
            raise UserError(f"the dataset has only {self._dataset_size} images, too few to hold "
                            "out calibration images; pass --calibration-list FILE")
        return self._set

    def arrays(self, layout: str):
        """float32 calibration batch in ``layout`` (the set itself is kept NCHW)."""
        data = self._require().arrays()
        return data if layout == "NCHW" else np.ascontiguousarray(data.transpose(0, 2, 3, 1))

    def hash(self) -> str:
        return self._require().hash()

    def describe(self) -> dict[str, Any] | None:
        if self._set is None:
            return None
        return {"source": self._set.source, "count": self._set.count, "seed": self._set.seed,
                "hash": self._set.hash(), "items_sample": self._set.items[:5]}


def uses_calibration(info: Any) -> bool:
    """Static INT8 paths calibrate on the shared set; dynamic ones and float paths do not."""
    return "int8" in info.precision and "dynamic" not in info.precision


def recipe_for(spec: Any, layout: str):
    from qsl.preprocess import PreprocessRecipe

    return PreprocessRecipe(resize_short=spec.resize_short, crop=spec.input_size,
                            mean=tuple(spec.mean), std=tuple(spec.std), layout=layout)


def measure(backend: Any, qsl: Any, batch_size: int, scenario: str,
            times: dict[str, float] | None = None):
    """Warm up, then time batch 1 and batch ``batch_size`` on real samples (and, for Server,
    single-sample queries through the SUT's worker path). ``times["warmup_s"]`` gets the
    warm-up's duration: where a framework compiles on first use (torch.compile, XLA), that is
    its compile time."""
    from scenarios.settings import Measurement
    from sut.base import measure_query_path_s, time_predict

    indices = list(range(min(qsl.total_count, max(batch_size, 8))))
    qsl.load(indices)
    try:
        one = qsl.batch(indices[:1])
        full = qsl.batch([indices[i % len(indices)] for i in range(batch_size)])
        started = time.perf_counter()
        backend.warmup(full)
        if times is not None:
            times["warmup_s"] = time.perf_counter() - started
        latency = statistics.median(time_predict(backend.predict, one, WARMUP_SECONDS))
        batch_latency = (latency if batch_size == 1 else
                         statistics.median(time_predict(backend.predict, full, WARMUP_SECONDS)))
        query_path = (statistics.median(measure_query_path_s(backend.predict, qsl, indices[0],
                                                             WARMUP_SECONDS))
                      if scenario == "Server" else 0.0)
    finally:
        qsl.unload(indices)
    return Measurement(latency_s=latency, batch_latency_s=batch_latency, batch_size=batch_size,
                       query_path_s=query_path)


def run_test(config: RunConfig, status_path: Path) -> dict[str, Any]:
    """Run one test; returns the results dict written as results.json."""
    import mlperf_loadgen as lg

    from audit.configs import audit_was_applied
    from models.zoo import MODEL_NAMES, get_model
    from qsl import open_dataset
    from qsl.library import QuerySampleLibrary
    from quantmark import fingerprint
    from quantmark.board import thermal_snapshot, throttling_verdict
    from report.accuracy import accuracy_text, compute_accuracy, read_val_map_labels
    from report.loadgen_log import summarize_file
    from scenarios.settings import SettingsPlan, build_settings
    from sut.base import LoadGenSUT
    from sut.interface import SutOptions
    from sut.registry import fp32_baseline, load_factory, require_available

    spec = get_model(config.model)
    info = require_available(config.sut)
    dataset = open_dataset(config.dataset_path)
    calibration = CalibrationProvider(dataset, spec, config.calibration_list)
    options = SutOptions(model=config.model, scenario=config.scenario,
                         batch_size=config.batch_size, threads=config.threads,
                         model_path=config.model_path, extra=dict(config.sut_options))
    times: dict[str, float] = {}
    start = time.perf_counter()
    backend = load_factory(info)(info.name, options, spec, calibration)
    times["prepare_s"] = time.perf_counter() - start
    start = time.perf_counter()
    backend.load()
    times["load_s"] = time.perf_counter() - start

    # OpenVINO's throughput mode runs several streams: it needs that many requests in flight
    workers = config.workers or max(1, int(getattr(backend, "preferred_workers", 1)))
    qsl = QuerySampleLibrary.from_dataset(dataset, recipe_for(spec, backend.layout),
                                          spec.performance_sample_count)
    measurement = measure(backend, qsl, config.batch_size, config.scenario, times)
    plan = SettingsPlan(scenario=config.scenario, mode=config.mode, quick=config.quick,
                        loadgen_model=spec.mlperf_name, known_models=tuple(MODEL_NAMES),
                        user_conf=config.user_conf,
                        quick_min_duration_ms=config.quick_duration_ms, workers=workers)
    built = build_settings(plan, measurement)

    system = config.system_id or system_id(config.sut)
    final = run_dir(config.output, system, config.model, config.scenario, config.mode,
                    config.audit)
    work = final.parent / f".{final.name}.tmp-{os.getpid()}"
    _remove_abandoned(final)
    work.mkdir(parents=True)  # LoadGen silently runs nothing if the folder is missing

    def fatal(exc: BaseException) -> None:
        """predict failed and LoadGen keeps issuing: report and end the process."""
        _write_status(status_path, "failed", str(work), {}, f"predict raised: {exc!r}")
        os._exit(3)

    sut = LoadGenSUT(backend.predict, qsl, batch_size=config.batch_size,
                     workers=workers, label_offset=backend.label_offset,
                     inline_single=config.scenario == "SingleStream", on_fatal=fatal)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(work)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    sut_handle = sut.start()
    qsl_handle = qsl.construct()
    # LoadGen applies any audit.config it finds in the working directory, so a normal run names
    # a file that cannot exist and an audit run the one the launcher put in its working folder.
    audit_config = (Path.cwd() / "audit.config" if config.audit
                    else work / "no-audit-config-for-this-run")
    before = thermal_snapshot()  # a board that throttles gives other numbers: the report says
    started = time.time()
    try:
        lg.StartTestWithLogSettings(sut_handle, qsl_handle, built.settings, log_settings,
                                    str(audit_config))
    finally:
        sut.stop()
        qsl.destroy()
    wall_s = time.time() - started
    after = thermal_snapshot()
    if sut.error is not None or not sut.all_completed:
        failed = _keep_failed(work, final, sut.error_traceback)
        if sut.error is not None:
            raise SutError(f"predict raised {sut.error!r}; all {sut.completed} issued samples "
                           f"were completed with class -1 so LoadGen could finish; logs in "
                           f"{failed}")
        raise SutError(f"{sut.issued} samples issued but {sut.completed} completed; logs in "
                       f"{failed}")

    audit_applied = audit_was_applied(work / "mlperf_log_detail.txt")
    if audit_applied != bool(config.audit):
        failed = _keep_failed(work, final, None)
        raise SutError(f"{config.audit} run but LoadGen did not apply {audit_config}; logs in "
                       f"{failed}" if config.audit else
                       f"LoadGen applied an audit.config to a normal run; logs in {failed}")
    summary = summarize_file(work / "mlperf_log_detail.txt")
    results: dict[str, Any] = {
        "config": dict(vars(config)),
        "system_id": system,
        "sut": {"name": info.name, "framework": info.framework, "precision": info.precision,
                "device": info.device, "fp32_baseline": fp32_baseline(info.name),
                **backend.describe()},
        "model": {"name": spec.name, **_artifact_record(backend.artifact)},
        "dataset": {"path": str(dataset.root), "builtin": dataset.builtin,
                    "fingerprint": dataset.fingerprint(), "evaluation_count": len(dataset),
                    "held_out_for_calibration": dataset.held_out_count},
        "calibration": calibration.describe() if uses_calibration(info) else None,
        "settings": {"mode": "quick" if config.quick else "official",
                     "quantmark_set": built.applied, "notes": built.notes, "workers": workers,
                     "measurement": vars(measurement)},
        # the epoch times let a tracker outside the process (energy) cut LoadGen's window
        "times": {**times, **(backend.artifact.times or {}), "loadgen_wall_s": wall_s,
                  "loadgen_started_at": started, "loadgen_ended_at": started + wall_s},
        "summary": summary.to_dict(),
        "machine": {**fingerprint.machine(), "thermal": {
            "before": before, "after": after, **throttling_verdict(before, after)}},
        "software": fingerprint.software((info.framework,)),
    }
    if config.audit:
        results["audit"] = {"test": config.audit, "config": str(audit_config),
                            "applied": audit_applied}
    if config.mode == "accuracy" or config.audit == "TEST01":
        # line qsl_idx of this file is the label of sample qsl_idx: what the accuracy tool reads
        atomic_write_text(work / "val_map.txt",
                          "".join(f"{rel} {label}\n" for rel, label in dataset.items))
    if config.mode == "accuracy":
        accuracy = compute_accuracy(work / "mlperf_log_accuracy.json",
                                    read_val_map_labels(work / "val_map.txt"),
                                    expected_count=qsl.total_count)
        if accuracy.missing:
            failed = _keep_failed(work, final, None)
            raise SutError(f"{accuracy.missing} of {qsl.total_count} samples have no response "
                           f"in the accuracy log; logs in {failed}")
        atomic_write_text(work / "accuracy.txt", accuracy_text(accuracy))
        results["accuracy"] = {"top1": accuracy.percent, "good": accuracy.good,
                               "total": accuracy.total, "duplicates": accuracy.duplicates}
    atomic_write_text(work / "user.conf",
                      built.effective_user_conf(spec.mlperf_name, config.scenario,
                                                config.user_conf))
    not_valid = [note for note in built.notes if "NOT VALID FOR SUBMISSION" in note]
    if not_valid:
        atomic_write_text(work / "NOT_VALID_FOR_SUBMISSION.txt",
                          "\n".join(not_valid) + "\n(see user.conf beside this file)\n")
    atomic_write_json(work / "results.json", results)
    _replace_dir(work, final)
    results["run_dir"] = str(final)
    return results


def _artifact_record(artifact: Any) -> dict[str, Any]:
    return {"artifact": str(artifact.path), "size_bytes": artifact_size_bytes(artifact),
            "format": artifact.format,
            "precision": artifact.precision, "key": artifact.key, "weights": artifact.weights,
            "source_hash": artifact.source_hash, "meta": artifact.meta}


def _remove_abandoned(final: Path) -> None:
    """Delete temp folders of runs whose process is gone (killed, Ctrl-C): never a live one."""
    for folder in final.parent.glob(f".{final.name}.tmp-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)



def _keep_failed(work: Path, final: Path, traceback_text: str | None) -> Path:
    """A failed run's logs (and predict's traceback) go to ``<final>.failed``; the last good
    run stays untouched."""
    if traceback_text:
        atomic_write_text(work / "predict_error.txt", traceback_text)
    failed = final.with_name(final.name + ".failed")
    shutil.rmtree(failed, ignore_errors=True)
    work.rename(failed)
    return failed


def _replace_dir(work: Path, final: Path) -> None:
    """Swap the finished run in; the old one is removed only after the new one is in place."""
    old = final.parent / f".{final.name}.old-{os.getpid()}"
    if final.exists():
        final.rename(old)
    work.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def _write_status(path: Path, status: str, run_dir_: str | None, results: dict[str, Any],
                  message: str = "") -> None:
    atomic_write_json(path, {"status": status, "run_dir": run_dir_, "results": results,
                             "message": message})


def main(argv: list[str]) -> int:
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
        traceback.print_exc(file=sys.stderr)
        _write_status(status_path, "failed", None, {}, f"{type(exc).__name__}: {exc}")
        return 1
    _write_status(status_path, "ok", results["run_dir"], results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
