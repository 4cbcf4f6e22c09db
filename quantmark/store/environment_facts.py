"""A record's environment as flat ``section.key`` facts: what ``regress`` names as "what changed".

Only what can change a figure is kept: the machine (CPU model and flags, kernel, governor,
board, GPU), every distribution's version, the settings that decide speed (threads, batch,
workers, SUT options, the harness's placement), the artifact's hashes and the dataset's
fingerprint. What differs between two runs of the same thing without changing it is left out:
paths (a temp folder, an output folder), times, temperatures, commands. Values are JSON
scalars (str, int, float, bool); a list of scalars is joined with ",", anything nested deeper
is its JSON text, so two environments compare key by key.
"""

from __future__ import annotations

import json
from typing import Any

from quantmark.ground.records import DiagnosisRecord, ProfileRecord, Record, RunRecord

#: machine facts that vary run to run without changing the machine
_MACHINE_SKIPPED = ("thermal",)
#: the RunConfig fields that decide a run's speed (its model, SUT and scenario are the series)
_CONFIG_SETTINGS = ("threads", "batch_size", "workers", "sut_options", "quick",
                    "quick_duration_ms", "input_size", "num_classes", "preprocess",
                    "ensemble", "ensemble_mode", "ensemble_combine")
#: what the SUT describes of itself that is a setting, not a path or a long proof
_SUT_SKIPPED = ("model_file", "model_dir", "name", "fp32_baseline")
#: speed settings that are commands or paths, not settings
_SPEED_SKIPPED = ("vendor_command", "reference_command", "scenario")
#: the artifact's identity: what was built, from what, by which recipe
_ARTIFACT = {"key": "artifact_key", "source_hash": "source_hash", "format": "format",
             "precision": "precision", "weights": "weights", "size_bytes": "size_bytes"}


def scalar(value: Any) -> str | int | float | bool | None:
    """One fact's stored form: a scalar as it is, a list of scalars joined, else JSON."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str | int | float)
                                               for v in value):
        return ",".join(str(v) for v in value)
    return json.dumps(value, sort_keys=True, default=str)


def flatten(prefix: str, section: dict[str, Any], skipped: tuple[str, ...] = (),
            depth: int = 2) -> dict[str, Any]:
    """``{prefix.key: value}`` of a section, nested dicts to ``depth`` levels; None dropped."""
    facts: dict[str, Any] = {}
    for key, value in section.items():
        if key in skipped:
            continue
        name = f"{prefix}.{key}"
        if isinstance(value, dict) and depth > 1:
            facts.update(flatten(name, value, depth=depth - 1))
        elif (stored := scalar(value)) is not None:
            facts[name] = stored
    return facts


def kernel(machine: dict[str, Any]) -> str | None:
    """The kernel release, cut from ``platform.platform()`` ("Linux-6.8.0-45-generic-x86_64-
    with-glibc2.39" -> "6.8.0-45-generic"): the machine facts carry no field of its own."""
    text, arch = str(machine.get("os") or ""), str(machine.get("arch") or "")
    system, _, rest = text.partition("-")
    if not rest or system not in ("Linux", "Darwin", "FreeBSD"):
        return None
    release = rest.split(f"-{arch}", 1)[0] if arch and f"-{arch}" in rest else rest
    return release or None


def machine_facts(machine: dict[str, Any]) -> dict[str, Any]:
    """``machine.*``: the CPU, its flags, kernel, governor, board and GPU."""
    facts = flatten("machine", machine, _MACHINE_SKIPPED)
    board = machine.get("board") or {}
    if board.get("governor"):
        facts["machine.governor"] = board["governor"]
    if (release := kernel(machine)) is not None:
        facts["machine.kernel"] = release
    return facts


def run_facts(record: RunRecord) -> dict[str, Any]:
    """A run's environment (``quantmark.store.points.Point.environment``)."""
    config = record.config
    facts = machine_facts(record.machine)
    facts.update(flatten("software", record.software))
    facts.update({f"settings.{name}": stored for name in _CONFIG_SETTINGS
                  if (stored := scalar(config.get(name))) is not None})
    # the workers a run used (0 asks the backend), and quick or official
    if isinstance(record.settings.get("workers"), int):
        facts["settings.workers"] = record.settings["workers"]
    if record.settings.get("mode"):
        facts["settings.mode"] = record.settings["mode"]
    facts.update(flatten("sut", record.sut, _SUT_SKIPPED, depth=1))
    facts.update(flatten("speed", record.speed_settings, _SPEED_SKIPPED, depth=1))
    facts.update(artifact_facts(record.model))
    facts.update({f"dataset.{key}": record.dataset[key] for key in
                  ("fingerprint", "builtin", "evaluation_count", "num_classes")
                  if record.dataset.get(key) is not None})
    facts.update({f"calibration.{key}": (record.calibration or {})[key]
                  for key in ("count", "seed", "hash")  # its source may be a path
                  if scalar((record.calibration or {}).get(key)) is not None})
    return facts


def artifact_facts(model: dict[str, Any]) -> dict[str, Any]:
    """``fingerprint.*``: the artifact a run loaded, by its hashes (never by its path)."""
    facts = {f"fingerprint.{name}": model[key] for key, name in _ARTIFACT.items()
             if scalar(model.get(key)) is not None}
    meta = model.get("meta") or {}
    if meta.get("sha256"):
        facts["fingerprint.artifact_sha256"] = meta["sha256"]
    if isinstance(meta.get("recipe"), dict):
        facts["fingerprint.recipe"] = scalar(meta["recipe"])
    if model.get("members"):
        facts["fingerprint.members"] = scalar(model["members"])
    return facts


def without_paths(facts: dict[str, Any]) -> dict[str, Any]:
    """``facts`` less any value that is an absolute path (a backend may describe its files):
    the same run from another folder is the same environment."""
    return {key: value for key, value in facts.items()
            if not (isinstance(value, str) and value.startswith(("/", "~"))
                    and len(value) > 1)}


def record_facts(record: Record) -> dict[str, Any]:
    """Any stored kind's environment: a run's in full; a diagnosis' or profile's machine,
    software and settings; a recommendation's machine. Never a path."""
    if isinstance(record, RunRecord):
        return without_paths(run_facts(record))
    facts = machine_facts(getattr(record, "machine", {}) or {})
    facts.update(flatten("software", getattr(record, "software", {}) or {}))
    if isinstance(record, DiagnosisRecord | ProfileRecord):
        config = record.config
        facts.update({f"settings.{name}": stored for name in _CONFIG_SETTINGS
                      if (stored := scalar(config.get(name))) is not None})
    return without_paths(facts)
