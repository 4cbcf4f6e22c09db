"""What decides a configuration's number besides its SUT, and whether the board kept its
speed: the report's fingerprint of a run's setup, and its throttling verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quantmark.ground.hashing import hash_json
from quantmark.ground.records import RunRecord

if TYPE_CHECKING:
    from quantmark.report.study import Run


def _gpu_identity(gpu: dict[str, Any]) -> list[Any]:
    """What of the GPU fingerprint decides a number: models and compute capability, driver,
    CUDA (not the memory size in MiB, which the model name already tells)."""
    return [[d.get("name"), d.get("compute_capability")] for d in gpu.get("devices", [])] + [
        gpu.get("driver"), gpu.get("cuda_driver_api"), gpu.get("cuda_runtime_torch")]


def fingerprint_id(results: RunRecord) -> str:
    """A short hash of what decides a number besides the SUT: software, machine (and its GPU),
    artifact, dataset, calibration and the run's settings. Equal ids: the same setup. A machine
    without a GPU hashes as before, so earlier results keep their ids."""
    machine, settings = results.machine, results.settings
    return hash_json({
        "software": results.software,
        "cpu": [machine.get("cpu_model"), machine.get("cpu_flags"), machine.get("usable_cpus")],
        **({"gpu": _gpu_identity(machine["gpu"])} if machine.get("gpu") else {}),
        "artifact": [results.model.get("key"), results.model.get("source_hash")],
        "dataset": results.dataset.get("fingerprint"),
        "calibration": (results.calibration or {}).get("hash"),
        "settings": [settings.get("mode"), settings.get("workers"),
                     results.config.get("threads")],
    }, length=12)


def throttling(runs: list[Run]) -> tuple[str, list[str]]:
    """"yes" (and why) if any run throttled, "no" if every run was seen not to, "" when that
    is unknown (folders from before the runner took thermal snapshots, no sensor)."""
    verdicts = [r.results.machine.get("thermal") or {} for r in runs]
    hot = [v for v in verdicts if v.get("throttled") is True]
    if hot:
        return "yes", list(dict.fromkeys(why for v in hot for why in v.get("why") or []))
    if verdicts and all(v.get("throttled") is False for v in verdicts):
        return "no", []
    return "", []
