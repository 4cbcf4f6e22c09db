"""LoadGen's ``mlperf_log_accuracy.json``, read once for every task: a JSON list of entries
``{seq_id, qsl_idx, data}``, ``data`` the SUT's response bytes in hex. What the bytes mean is
the task's (a class, a detector's boxes); a file or entry that is not LoadGen's is one line."""

from __future__ import annotations

import json
from pathlib import Path

from quantmark.ground.errors import UserError

ACCURACY_LOG = "mlperf_log_accuracy.json"


def read_log_entries(log_path: str | Path) -> list[dict]:
    """The accuracy log's entries; a file that is not LoadGen's is a one-line UserError."""
    path = Path(log_path)
    try:
        entries = json.loads(path.read_text() or "[]")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read accuracy log {path} ({type(exc).__name__}); pass the "
                        "mlperf_log_accuracy.json of a finished LoadGen run") from None
    if not isinstance(entries, list):
        raise UserError(f"{path} is not a LoadGen accuracy log (a JSON list of "
                        "{seq_id, qsl_idx, data}); pass mlperf_log_accuracy.json")
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UserError(f"{path}: entry {number} is {type(entry).__name__} "
                            f"{_short(entry)}, not an object {{seq_id, qsl_idx, data}}; pass "
                            "the mlperf_log_accuracy.json LoadGen wrote")
        lacking = [key for key in ("qsl_idx", "data") if key not in entry]
        if lacking:
            raise UserError(f"{path}: entry {number} has no {' or '.join(lacking)} (got "
                            f"{_short(sorted(entry))}); pass the mlperf_log_accuracy.json "
                            "LoadGen wrote")
    return entries


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def response_bytes(hex_data: object, where: str = "response") -> bytes:
    """A response's bytes; ``data`` that is not LoadGen's hex (another type, odd length,
    non-hex digits) is a one-line UserError."""
    if not isinstance(hex_data, str):
        raise UserError(f"{where}: data is {type(hex_data).__name__} {_short(hex_data)}, not a "
                        "hex string; pass the mlperf_log_accuracy.json LoadGen wrote")
    try:
        return bytes.fromhex(hex_data)
    except ValueError:
        raise UserError(f"{where}: data {_short(hex_data)} is not hex bytes (odd length or "
                        "non-hex digits); pass the mlperf_log_accuracy.json LoadGen wrote"
                        ) from None


def sample_index(entry: dict, where: str) -> int:
    index = entry["qsl_idx"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UserError(f"{where}: qsl_idx {_short(index)} is not a sample index (an integer "
                        ">= 0); pass the mlperf_log_accuracy.json LoadGen wrote")
    return index
