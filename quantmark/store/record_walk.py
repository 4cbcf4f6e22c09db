"""The record files under a results folder, a run folder or a sweep, for the store to record.

A run's and a diagnosis' or profile's ``results.json``, a recommendation's
``recommendation.json``; a folder holding a sweep's ``sweep.json`` makes each run its manifest
lists a sweep cell. Hidden folders (a run in progress, ``.<name>.tmp-<pid>``) and
``<name>.failed`` folders (a run that failed: its logs kept, never a result) are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.ground.paths import path_problem
from quantmark.ground.records import RESULTS, SWEEP_MANIFEST, UnreadableRecord, load_manifest
from quantmark.report.recommend_section import RECOMMENDATION

RECORD_NAMES = (RESULTS, RECOMMENDATION)
FAILED_SUFFIX = ".failed"
NOT_RESULTS = (f"holds no quantmark record ({RESULTS}, {RECOMMENDATION} or a sweep's "
               f"{SWEEP_MANIFEST}); pass a results folder, a run folder or a sweep folder")


def record_files(path: Path) -> list[tuple[Path, str | None]]:
    """Each record file under ``path`` (a folder or one record file) with its sweep cell id:
    the id, "" for a run of a sweep that does not list it, None where no sweep was seen
    (``quantmark.store.job_facts`` then looks above the run). Nothing there: UserError."""
    problem = path_problem(path, "folder" if path.is_dir() else "file")
    if problem is not None:
        raise UserError(f"{path} {problem}; pass a results folder, a run folder or a sweep "
                        "folder")
    if path.is_file():
        if path.name == SWEEP_MANIFEST:
            return record_files(path.parent)
        return [(path, None)]
    found: list[tuple[Path, str | None]] = []
    cells: dict[Path, str] = {}
    sweep_roots: list[Path] = []
    for folder, subfolders, files in os.walk(path):
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and not d.endswith(FAILED_SUFFIX))
        if SWEEP_MANIFEST in files:
            sweep_roots.append(here)
            cells.update(_cells(here))
        for name in sorted(files):
            if name in RECORD_NAMES:
                file = here / name
                in_sweep = any(root in file.parents for root in sweep_roots)
                found.append((file, cells.get(here, "") if in_sweep else None))
    if not found:
        raise UserError(f"{path} {NOT_RESULTS}")
    return found


def _cells(root: Path) -> dict[Path, str]:
    """A sweep's finished cells: run folder -> cell id (an unreadable manifest: none)."""
    try:
        manifest = load_manifest(root)
    except UnreadableRecord:
        return {}
    entries = manifest.cells if manifest else {}
    return {root / entry["run_dir"]: cell_id for cell_id, entry in entries.items()
            if isinstance(entry, dict) and entry.get("run_dir")}
