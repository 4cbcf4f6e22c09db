"""The MLPerf system description (``systems/<system_id>.json``), filled from the machine.

The machine's facts come from ``submission.machine`` (left out when it cannot tell);
``build_system_json`` fills
the gaps with "N/A" only where that is true (no accelerator, one socket, one node) and with
``UNKNOWN`` where only the submitter knows (cooling, memory configuration); ``missing_user_fields``
lists those so the packager can warn. The user's system file wins over everything.
"""

from __future__ import annotations

import difflib
import json
import platform
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import package_version
from quantmark.ground.hashing import atomic_write_json
from quantmark.ground.version import VERSION
from quantmark.submission.machine import ACCELERATOR_TEXT_KEYS, NA, UNKNOWN, _int, detect_machine

# Every field the v6.x submission checker requires, in its order.
REQUIRED_KEYS: tuple[str, ...] = (
    "division", "submitter", "status", "system_name", "number_of_nodes",
    "host_processor_model_name", "host_processors_per_node", "host_processor_core_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
    "host_memory_capacity", "host_memory_configuration", "host_storage_capacity",
    "host_storage_type", "host_networking", "host_networking_topology", "host_network_card_count",
    "accelerators_per_node", "accelerator_model_name", "accelerator_memory_capacity",
    "accelerator_memory_configuration", "accelerator_frequency", "accelerator_host_interconnect",
    "accelerator_interconnect", "accelerator_interconnect_topology",
    "accelerator_on-chip_memories", "cooling", "framework", "operating_system",
    "other_software_stack", "system_type", "system_type_detail", "hw_notes", "sw_notes",
)
# Counts, written as JSON numbers; every other field is a string.
INT_KEYS: tuple[str, ...] = ("number_of_nodes", "host_processors_per_node",
                             "host_processor_core_count", "accelerators_per_node")
# Fields the checker knows beyond the required ones (power and network-mode submissions): a
# user's file may set them; nothing here fills them.
OPTIONAL_KEYS: tuple[str, ...] = (
    "host_processor_vcpu_count", "system_power_capacity", "power_management", "filesystem",
    "boot_firmware_version", "management_firmware_version", "other_hardware",
    "number_of_type_nics_installed", "nics_enabled_firmware", "nics_enabled_os",
    "nics_enabled_connected", "network_speed_mbit", "power_supply_quantity_and_rating_watts",
    "power_supply_details", "disk_drives", "disk_controllers", "system_power_only",
)
DIVISIONS = ("closed", "open")
STATUSES = ("available", "preview", "rdi")
SYSTEM_TYPES = ("edge", "datacenter", "datacenter,edge")


def software_stack(frameworks: dict[str, str]) -> dict[str, str]:
    """``framework`` (the inference engines given) and ``other_software_stack`` (what else the
    result depends on: Python, numpy, LoadGen, quantmark, and the engines again)."""
    engines = [f"{name} {version}".strip() for name, version in frameworks.items()]
    stack = [f"Python {platform.python_version()}"]
    stack += [f"{dist} {version}" for dist in ("numpy", "mlcommons-loadgen")
              if (version := package_version(dist))]
    stack += [f"quantmark {VERSION}", *engines]
    found = {"other_software_stack": ", ".join(stack)}
    if engines:
        found["framework"] = ", ".join(engines)
    return found


def _load_user_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read system file {path}: {exc.strerror or exc}; "
                        "pass the path of an existing JSON file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else exc
        raise UserError(f"system file {path} is not valid JSON ({where}); fix its syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"system file {path} holds a JSON {type(data).__name__}; it must be an "
                        'object of MLPerf fields, e.g. {"cooling": "air"}')
    known = REQUIRED_KEYS + OPTIONAL_KEYS
    unknown = [key for key in data if key not in known]
    if unknown:
        hints = [f"{key!r}" + "".join(f" (did you mean {match!r}?)" for match in
                                      difflib.get_close_matches(key, known, n=1))
                 for key in unknown]
        raise UserError(f"system file {path} has unknown field(s) {', '.join(hints)}; "
                        "use the MLPerf system-description field names")
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UserError(f"system file {path}: {key} must be a string or a number, "
                            f"not {json.dumps(value)}")
        if isinstance(value, str) and not value.strip():
            raise UserError(f"system file {path}: {key} is empty; write what it is, "
                            "or N/A if it does not apply")
        if key in INT_KEYS:
            number = _int(value) if not isinstance(value, float) or value.is_integer() else None
            least = 0 if key == "accelerators_per_node" else 1
            if number is None or number < least:
                raise UserError(f"system file {path}: {key} must be a whole number >= {least}, "
                                f"not {json.dumps(value)}")
            data[key] = number
    return data


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    text = ",".join(sorted(part.strip() for part in str(value).lower().split(",")))
    if text not in allowed:
        raise UserError(f"{name} {value!r} is not valid; use one of: {', '.join(allowed)}")
    return text


def build_system_json(*, submitter: str, division: str, system_name: str,
                      frameworks: dict[str, str], user_file: str | Path | None = None,
                      status: str = "available", system_type: str = "edge",
                      machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, then what the machine tells, then the user's file: the last word is theirs.

    ``submitter`` and ``division`` name the submission's folders, so a user file may repeat them
    but not contradict them. Read ``system_type`` back from the result: the file may change it.
    """
    machine = detect_machine() if machine is None else machine
    system: dict[str, Any] = dict.fromkeys(REQUIRED_KEYS, UNKNOWN)
    system.update(number_of_nodes=1, host_networking_topology=NA, hw_notes=NA, sw_notes=NA)
    if machine.get("host_processors_per_node") == 1:
        system["host_processor_interconnect"] = NA
    if machine.get("accelerators_per_node") == 1:
        system.update(accelerator_interconnect=NA, accelerator_interconnect_topology=NA)
    system.update({key: value for key, value in machine.items() if key in REQUIRED_KEYS})
    system.update(software_stack(frameworks))
    system.update(submitter=submitter, division=division, system_name=system_name,
                  status=status, system_type=system_type)
    user = _load_user_file(Path(user_file)) if user_file is not None else {}
    if user:
        for key in ("submitter", "division"):
            if key in user and str(user[key]).strip().lower() != str(system[key]).strip().lower():
                raise UserError(f"system file {user_file} sets {key} {user[key]!r} but the "
                                f"submission is for {system[key]!r}; make them agree")
        system.update(user)
    per_node = system["accelerators_per_node"]
    if isinstance(per_node, int) and per_node > 0:  # "N/A" from "none found" no longer holds
        moot = ("accelerator_interconnect", "accelerator_interconnect_topology")
        for key in ACCELERATOR_TEXT_KEYS:
            if system[key] == NA and key not in user and not (per_node == 1 and key in moot):
                system[key] = UNKNOWN
    for key in ("submitter", "system_name"):
        if not str(system[key]).strip():
            raise UserError(f"{key} is empty; give the name the submission is published under")
    system["division"] = _choice("division", system["division"], DIVISIONS)
    system["status"] = _choice("status", system["status"], STATUSES)
    system["system_type"] = _choice("system_type", system["system_type"], SYSTEM_TYPES)
    # The checker rejects falsy values as "empty": no accelerators is written as the string "0".
    if system["accelerators_per_node"] == 0:
        system["accelerators_per_node"] = "0"
    return system


def missing_user_fields(system: dict[str, Any]) -> list[str]:
    """Fields only the submitter can fill (still the UNKNOWN placeholder, or absent)."""
    return [key for key in REQUIRED_KEYS if system.get(key, UNKNOWN) == UNKNOWN]


def write_system_json(system: dict[str, Any], path: Path) -> None:
    """Write atomically: a packager interrupted mid-write never leaves half a system file."""
    atomic_write_json(path, system)
