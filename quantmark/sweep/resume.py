"""Which finished cells a sweep keeps: by what they measured, never by their names.

A cell's id names its model, SUT, test and its dataset folder's *name*; two folders called
``data`` are one id. So every entry records its inputs by content (``contents``: the dataset's
fingerprint, the model file's and each settings file's bytes, the hardware) and, for a cell
with results, a hash of each of its run folder's files and of the entry itself (its seal).
Resuming, a finished cell is kept only when its inputs are today's and its files are as it
left them:

* damaged (a file edited, cut short or gone; its entry edited): it runs again, with one
  warning; its folder is moved aside (``.damaged-*``, which reports skip), never deleted;
* measured with other inputs and without results (it failed): it runs again, said in one line;
* measured with other inputs, with results: the sweep is refused in one line naming the
  difference and the fix (a new ``--output``). Re-running would replace a finished result
  the user may still want (it is the only measurement of the old dataset), and keeping it
  would put two datasets under one name in one report; refusing loses nothing and mixes
  nothing, as the sweep already does for a changed setting (``driver._open_manifest``).
  Finished cells this sweep does not run but whose rows its report would show under one of
  its labels (another SUT's, on a dataset folder of the same name) are held to the same rule.

An entry written before inputs were recorded is checked against what its run's
``results.json`` says (dataset fingerprint, hardware), and the settings' paths as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.ground.records import RESULTS, RunRecord, load_record
from quantmark.sweep.contents import (
    BUILTIN,
    dataset_identity,
    file_identity,
    hardware,
    this_hardware,
)
from quantmark.sweep.plan import Cell
from quantmark.sweep.spec import SweepSpec, absolute

#: settings that name a file: compared by its content, cell by cell (their flags)
FILE_SETTINGS = {"model_path": "--model-path", "labels": "--labels",
                 "calibration_list": "--calibration-list", "user_conf": "--user-conf",
                 "tokenizer": "--tokenizer"}
PATH_SETTINGS = (*FILE_SETTINGS, "dataset_path")
DAMAGED = ".damaged-"  # a damaged run folder's new name starts so (reports skip dot-folders)
SHOWN = 2  # cell ids named per reason in a one-line message


class Inputs:
    """Each cell's inputs by content (``contents``), each dataset and file hashed once."""

    def __init__(self, spec: SweepSpec) -> None:
        self.spec = spec
        self._memo: dict[Any, Any] = {}

    def _once(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def of(self, cell: Cell) -> dict[str, str | None]:
        """What ``cell`` measures besides its settings: its dataset, the model file and each
        settings file by content, and this machine's hardware (a local sweep's)."""
        spec = self.spec
        found: dict[str, str | None] = {"dataset": self.dataset(cell)}
        for key in FILE_SETTINGS:
            found[key] = self._once(key, lambda key=key: file_identity(getattr(spec, key)))
        if not spec.cluster:  # a fleet's cells run where placement puts them
            found["hardware"] = self._once("hardware", this_hardware)
        return found

    def dataset(self, cell: Cell) -> str:
        from quantmark.sut.ensemble.members import parse_members

        spec = self.spec
        folder = cell.dataset or spec.dataset_path
        model = parse_members(cell.ensemble)[0].model if cell.ensemble else cell.model
        return self._once(("dataset", model, folder, cell.input_size, cell.seq_len),
                          lambda: dataset_identity(
                              model, folder, model_path=spec.model_path,
                              input_size=cell.input_size, num_classes=spec.num_classes,
                              preprocess=dict(spec.preprocess), labels=spec.labels,
                              seq_len=cell.seq_len, padding=spec.padding,
                              tokenizer=spec.tokenizer))


# ----------------------------------------------------------------------------- the seal


def _plain(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry as sweep.json gives it back (tuples as lists), so its seal reads the same."""
    return json.loads(json.dumps(entry, sort_keys=True, default=str))


def _entry_seal(entry: dict[str, Any]) -> str:
    return hash_json({k: v for k, v in _plain(entry).items() if k != "seal"}, 32)


def run_files(folder: Path) -> dict[str, str]:
    """sha256 of every file of a run folder (none hidden), by its path inside the folder."""
    return {f.relative_to(folder).as_posix(): hash_file(f, 32)
            for f in sorted(folder.rglob("*")) if f.is_file()
            and not any(part.startswith(".") for part in f.relative_to(folder).parts)}


def sealed(root: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (a finished cell's, all its fields set) with its run folder's file hashes and
    its seal: what ``damage`` checks before the cell is trusted again."""
    if entry.get("status") == "ok" and entry.get("run_dir"):
        entry = {**entry, "files": run_files(root / entry["run_dir"])}
    return {**entry, "seal": _entry_seal(entry)}


def damage(root: Path, entry: dict[str, Any]) -> str | None:
    """Why an ``ok`` cell's results cannot be trusted (None: they are as it left them)."""
    run_dir = entry.get("run_dir")
    if not run_dir:
        return "its entry names no run folder"
    folder = root / run_dir
    if not folder.is_dir():
        return f"its run folder {run_dir} is missing"
    files = entry.get("files")
    if not isinstance(files, dict):  # written before cells were sealed: its record must read
        try:
            load_record(folder / RESULTS, RunRecord.KIND)
        except UserError as exc:
            return str(exc).split(";")[0]
        return None
    if entry.get("seal") != _entry_seal(entry):
        return "its entry in sweep.json was edited"
    for rel, want in sorted(files.items()):
        path = folder / rel
        if not path.is_file():
            return f"{rel} is missing"
        if hash_file(path, 32) != want:
            return f"{rel} changed after the cell finished (edited or cut short)"
    return None


def set_aside(root: Path, entry: dict[str, Any]) -> str | None:
    """Move a damaged cell's run folder out of every report's way, kept; its new path."""
    folder = root / str(entry.get("run_dir") or "")
    if not entry.get("run_dir") or not folder.is_dir():
        return None
    aside = folder.with_name(f"{DAMAGED}{folder.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(aside)
    return str(aside.relative_to(root))


# ----------------------------------------------------------------------------- the decision


@dataclass
class Resume:
    """The sweep's cells sorted: to run (new, unfinished, damaged, or failed with other
    inputs) and kept; why each finished one runs again."""

    todo: list[Cell] = field(default_factory=list)
    kept: int = 0
    rerun: dict[str, str] = field(default_factory=dict)  # cell id -> the difference
    damaged: dict[str, str] = field(default_factory=dict)  # cell id -> what is wrong


def decide(root: Path, spec: SweepSpec, plan: list[Cell], entries: dict[str, Any],
           settings: dict[str, Any], inputs: Inputs, done: tuple[str, ...]) -> Resume:
    """Sort ``plan`` against the manifest's ``entries`` (``settings``: the manifest's, for
    entries from before inputs were recorded); a finished result of other inputs is a
    one-line UserError (see the module's docstring)."""
    found, conflicts = Resume(), {}
    for cell in plan:
        entry = entries.get(cell.id)
        if not entry or entry.get("status") not in done:
            found.todo.append(cell)
            continue
        ok = entry["status"] == "ok"
        wrong = damage(root, entry) if ok else None
        if wrong:
            found.damaged[cell.id] = wrong
            found.todo.append(cell)
            continue
        why = differences(root, spec, cell, entry, settings, inputs.of(cell))
        if not why:
            found.kept += 1
        elif ok:
            conflicts[cell.id] = why[0]
        else:
            found.rerun[cell.id] = why[0]
            found.todo.append(cell)
    conflicts.update(_beside(root, spec, plan, entries, settings, inputs))
    if conflicts:
        raise UserError(_refusal(root, spec, conflicts))
    return found


def _workload(cell: dict[str, Any]) -> tuple[Any, ...]:
    """What a report labels a cell's row by besides its SUT and test: its model, dataset
    folder's name, input size and sequence length (``report.workloads``)."""
    return (cell.get("model"), Path(str(cell.get("dataset") or "")).name,
            cell.get("input_size") or "", cell.get("seq_len") or 0, cell.get("ensemble") or "")


def _beside(root: Path, spec: SweepSpec, plan: list[Cell], entries: dict[str, Any],
            settings: dict[str, Any], inputs: Inputs) -> dict[str, str]:
    """Finished cells this sweep does not run but reports beside its own (another SUT, a
    scenario dropped since) under one of its workloads' labels: of other inputs, they would
    put two datasets (or two model files) under one name in one report."""
    twins = {_workload(cell.to_dict()): cell for cell in plan}
    planned = {cell.id for cell in plan}
    found = {}
    for cell_id, entry in entries.items():
        twin = twins.get(_workload(entry))
        if cell_id in planned or twin is None or entry.get("status") != "ok" \
                or damage(root, entry):
            continue
        why = differences(root, spec, twin, entry, settings, inputs.of(twin))
        if why:
            found[cell_id] = why[0]
    return found


def differences(root: Path, spec: SweepSpec, cell: Cell, entry: dict[str, Any],
                settings: dict[str, Any], now: dict[str, str | None]) -> list[str]:
    """How ``entry``'s inputs differ from ``now``'s, in words; only what both know."""
    then = entry.get("inputs")
    if not isinstance(then, dict):
        return _legacy_differences(root, spec, cell, entry, settings, now)
    if entry.get("node"):  # measured on a fleet node: its hardware is the node's
        then = {k: v for k, v in then.items() if k != "hardware"}
    return [_reason(key, then[key], now[key]) for key in sorted(set(then) & set(now))
            if then[key] != now[key]]


def _legacy_differences(root: Path, spec: SweepSpec, cell: Cell, entry: dict[str, Any],
                        settings: dict[str, Any], now: dict[str, str | None]) -> list[str]:
    """An entry from before inputs were recorded: its dataset and hardware as its run's
    record states them, its files' settings by their paths (all it kept of them)."""
    found = [f"setting {flag} changed (another file)" for key, flag in FILE_SETTINGS.items()
             if settings.get(key) != absolute(getattr(spec, key))]
    record = _record(root, entry)
    if record is None:  # no results: the folder it named is all it says
        then_folder = absolute(entry.get("dataset") or settings.get("dataset_path"))
        if then_folder != absolute(cell.dataset or spec.dataset_path):
            found.append("dataset changed (another folder)")
        return found
    dataset = BUILTIN if record.dataset.get("builtin") else record.dataset.get("fingerprint")
    if dataset != now["dataset"]:
        found.append(_reason("dataset", dataset, now["dataset"]))
    if now.get("hardware") and not entry.get("node") \
            and hardware(record.machine) != now["hardware"]:
        found.append(_reason("hardware", hardware(record.machine), now["hardware"]))
    return found


def _record(root: Path, entry: dict[str, Any]) -> RunRecord | None:
    if entry.get("status") != "ok" or not entry.get("run_dir"):
        return None
    record = load_record(root / entry["run_dir"] / RESULTS, RunRecord.KIND)
    assert isinstance(record, RunRecord)
    return record


def _reason(key: str, then: Any, now: Any) -> str:
    if key == "dataset":
        return "dataset content changed"
    if key == "model_path":
        return "model file changed"
    if key == "hardware":
        return f"measured on other hardware ({then}; this machine: {now})"
    return f"setting {FILE_SETTINGS.get(key, key)} changed (its file's content)"


def grouped(cells: dict[str, str]) -> str:
    """``reason (id, id and N more); reason (...)``: cells by why, in one line."""
    by_reason: dict[str, list[str]] = {}
    for cell_id, why in cells.items():
        by_reason.setdefault(why, []).append(cell_id)
    parts = []
    for why, ids in by_reason.items():
        more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
        parts.append(f"{why} ({', '.join(ids[:SHOWN])}{more})")
    return "; ".join(parts)


def _refusal(root: Path, spec: SweepSpec, conflicts: dict[str, str]) -> str:
    """One line: which finished cells measured what, and the fix that keeps them."""
    first = next(iter(conflicts.values()))
    if first.startswith("measured on other hardware"):
        fix = ("use a new --output for this machine's sweep (run.py report OLD NEW shows both "
               "machines)")
    elif first.startswith("dataset") and spec.datasets:
        fix = ("use a new --output to keep both, or give the changed dataset folder another "
               "name (--datasets names cells by folder); restore the dataset to resume")
    elif first.startswith("dataset"):
        fix = "use a new --output to keep both; restore the dataset to resume"
    else:
        fix = "use a new --output to keep both; restore the file to resume"
    count = len(conflicts)
    return (f"{root} holds {count} finished cell{'s' if count > 1 else ''} measured with other "
            f"inputs: {grouped(conflicts)}; {fix}")
