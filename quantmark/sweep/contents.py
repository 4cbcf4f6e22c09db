"""What a measurement was of, by content: a dataset's fingerprint, a model file's bytes, a
settings file's bytes, the hardware. Resuming compares these, never a path or a folder name
(``quantmark.sweep.resume``; ``recommend.journal`` too): a folder renamed or copied is the same
data, and a file changed in place is not.

The dataset's identity is its task's ``fingerprint()``, the one a run records in its
``results.json`` and the report tells datasets apart by (``report.workloads``), so a sweep's
cell and its run agree on which dataset it was. Its image hashes are memoised by stat in the
cache (``qsl.imagenet``), so a resume reads no image twice.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from quantmark.ground.hashing import hash_file, hash_json

log = logging.getLogger(__name__)

BUILTIN = "built-in"  # the model's own dataset, or a built-in model: quantmark's, verified
#: RunConfig fields that decide how a model's task reads a dataset folder
DATASET_FIELDS = ("model_path", "input_size", "num_classes", "preprocess", "labels",
                  "seq_len", "padding", "tokenizer")
#: the machine facts that decide a cell's speed; its host name is not one (a container's
#: changes at every start) and neither is its OS patch level
HARDWARE = ("cpu_model", "arch", "logical_cpus")


def file_identity(path: str | os.PathLike | None) -> str | None:
    """sha256 of a file's bytes, with the files a model format keeps beside it (an OpenVINO
    ``.xml``'s ``.bin``, an ONNX file's external data), or of every file of a folder (a
    SavedModel, a tokenizer); a name that is no path (a tokenizer's hub name) stands for
    itself. None where no path is given."""
    if not path:
        return None
    found = Path(path).expanduser()
    if found.is_dir():
        files = sorted(f for f in found.rglob("*") if f.is_file()
                       and not any(p.startswith(".") for p in f.relative_to(found).parts))
        return "sha256:" + hash_json({f.relative_to(found).as_posix(): hash_file(f, 64)
                                      for f in files}, 32)
    if not found.is_file():
        return f"name:{path}"
    parts = {found.name: hash_file(found, 64)}
    for side in _sidecars(found):
        parts[side.name] = hash_file(side, 64)
    return "sha256:" + (parts[found.name][:32] if len(parts) == 1 else hash_json(parts, 32))


def _sidecars(model: Path) -> list[Path]:
    """The files a model file reads beside it: its weights are part of what it is."""
    if model.suffix == ".xml":
        weights = model.with_suffix(".bin")
        return [weights] if weights.is_file() else []
    if model.suffix != ".onnx":
        return []
    try:
        import onnx

        proto = onnx.load(str(model), load_external_data=False)
    except Exception:  # noqa: BLE001 - not an ONNX file: its own bytes say so
        return []
    names = {entry.value for tensor in proto.graph.initializer for entry in tensor.external_data
             if entry.key == "location"}
    return [model.parent / name for name in sorted(names) if (model.parent / name).is_file()]


def hardware(machine: dict[str, Any]) -> str:
    """The hardware a machine's facts (``fingerprint.machine()``, a record's) describe."""
    return (f"{machine.get('cpu_model') or '?'} ({machine.get('arch') or '?'}, "
            f"{machine.get('logical_cpus') or '?'} CPUs)")


def this_hardware() -> str:
    """This machine's hardware, as ``hardware`` writes a record's."""
    import platform

    from quantmark.ground.fingerprint import cpu_model

    return hardware({"cpu_model": cpu_model(), "arch": platform.machine(),
                     "logical_cpus": os.cpu_count()})


def dataset_identity(model: str, folder: str | None, **fields: Any) -> str:
    """The fingerprint of ``folder`` as ``model``'s task reads it (``fields``: the run's
    DATASET_FIELDS); BUILTIN where no folder is given. A folder its task cannot read is a
    one-line UserError, as the run's would be."""
    if not folder:
        return BUILTIN
    from quantmark.ground.config import RunConfig
    from quantmark.sweep.axes import model_spec
    from quantmark.tasks.catalog import task_for

    shape = {key: value for key, value in fields.items() if key in DATASET_FIELDS and value}
    config = RunConfig(scenario="Offline", sut="", model=model, dataset_path=str(folder),
                       **shape)
    spec = model_spec(model, **shape)
    return str(task_for(config).open_dataset(config, spec).fingerprint())
