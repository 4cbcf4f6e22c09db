"""Exported artifacts: a model file plus the JSON record that travels with it to another device.

``run.py export`` writes ``<model>-<sut>.tflite`` and ``<model>-<sut>.json`` side by side. The
record says what the file is (model, SUT, precision, sha256), how it was made (recipe, weights,
conversion times, the calibration set's source, size, seed and hash) and where (the exporting
machine and its software). A device that runs the file with ``--model-path`` finds the record
beside it, checks the file is the one described, and copies the record into its results, so a
result measured on a Pi still names the calibration that produced its INT8 weights.

Only the standard library here: a Raspberry Pi reads records with no framework installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError

SCHEMA = 1
KIND = "quantmark-export"


def record_path(model_file: str | Path) -> Path:
    """The record beside an exported file: same name, ``.json`` suffix."""
    return Path(model_file).with_suffix(".json")


def read_record(model_file: str | Path) -> dict[str, Any] | None:
    """The export record beside ``model_file``; None when there is none (a user's own file).

    A JSON file there that is not an export record is ignored: it may be anything of the user's.
    """
    path = record_path(model_file)
    if path == Path(model_file) or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        return None
    if data.get("schema") != SCHEMA:
        raise UserError(f"{path}: export record schema {data.get('schema')}, this quantmark "
                        f"reads {SCHEMA}; re-export with the same quantmark version on both sides")
    return data


def verify_record(record: dict[str, Any], model_file: str | Path, sha256: str) -> None:
    """The record must describe this very file: a stale record would misname the calibration."""
    if record.get("sha256") != sha256:
        raise UserError(f"{record_path(model_file)} describes another file (sha256 "
                        f"{str(record.get('sha256'))[:12]}..., this file {sha256[:12]}...): "
                        "copy the pair that run.py export wrote together, or delete the .json")


def exported_model(model_file: str | None) -> str | None:
    """The model an exported file was made for, so ``--model`` can be left out on the device."""
    if not model_file or not str(model_file).endswith(".tflite"):
        return None
    record = read_record(model_file)
    return str(record["model"]) if record and record.get("model") else None
