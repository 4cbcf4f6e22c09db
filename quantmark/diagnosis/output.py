"""A diagnosis on disk, like a run: ``<output>/<host-sut>/<model>/diagnose-<against>/`` holding
``results.json``, ``layers.csv``, ``layers.md``, ``recovery.csv`` (with ``--recover``) and one
figure, ``diagnosis.png``. Every file is written atomically; ``results.json`` last, so a folder
without it is an interrupted diagnosis. ``run.py report`` reads them back
(``report.diagnosis_section``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quantmark.ground import fingerprint
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.layout import system_id
from quantmark.ground.records import RESULTS, DiagnosisRecord, write_record
from quantmark.report import diagnosis_section as tables
from quantmark.store.recording import record as record_in_store
from quantmark.sut.registry import get_sut


def folder_for(output: str, model: str, sut: str, against: str) -> Path:
    return Path(output) / system_id(sut) / model / f"diagnose-{against}"


def write(found: dict[str, Any], config: Any, started: float) -> Path:
    """Write the diagnosis ``found`` (``steps.run``'s) as its typed record, with its tables and
    figure; the folder."""
    folder = folder_for(config.output, found["model"], found["sut"], found["against"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULTS).unlink(missing_ok=True)  # an older diagnosis is replaced whole
    distributions = tuple(dict.fromkeys(
        get_sut(found["sut"]).distributions + get_sut(found["against"]).distributions))
    record = DiagnosisRecord.from_dict({
        **found, "config": {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in vars(config).items()},
        "system_id": system_id(found["sut"]), "machine": fingerprint.machine(),
        "software": fingerprint.software(distributions),
        "times": {"started_at": started, "ended_at": time.time(),
                  "wall_s": round(time.time() - started, 2)}}, str(folder))
    atomic_write_text(folder / "layers.csv", tables.layers_csv(record))
    atomic_write_text(folder / "layers.md", "\n".join(tables.markdown(record)) + "\n")
    if record.recovery:
        atomic_write_text(folder / "recovery.csv", tables.recovery_csv(record))
    figure = tables.draw(record, folder / "diagnosis.png")
    record.figure = figure.name if figure else None
    write_record(folder / RESULTS, record)
    record_in_store(folder / RESULTS)
    return folder
