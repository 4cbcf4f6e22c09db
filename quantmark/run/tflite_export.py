"""``run.py export``: make TFLite artifacts on an x86 machine for a device that cannot convert.

A Raspberry Pi runs .tflite files with ai-edge-litert alone; converting and calibrating needs
TensorFlow, which the Pi install leaves out. Export builds each artifact exactly as a run of that
SUT would (same converter, recipe and calibration set, through the same cache), then writes into
the output folder, for each SUT:

* ``<model>-<sut>.tflite``: the file the SUT would run;
* ``<model>-<sut>.json``: its export record (``models.exported``): sha256, recipe, weights,
  calibration source / count / seed / hash, conversion times, exporting machine and software;

and, when the built-in dataset was used, ``dataset/``: its evaluation images, ``val_map.txt``
and ``val_groups.txt`` (the source photo of each crop, so accuracy there is judged per photo,
not per crop), since the Pi install leaves out the packages whose photos the built-in dataset
is cut from. Every file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_bytes, atomic_write_json, hash_file
from quantmark.models.exported import KIND, SCHEMA, record_path

EXPORTABLE = ("tflite-fp32", "tflite-fp16", "tflite-int8dyn", "tflite-int8")
DATASET_DIR = "dataset"


def parse_suts(text: str) -> list[str]:
    """Comma-separated TFLite SUT names; one line naming the choices for anything else."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in EXPORTABLE]
    if not names or bad:
        raise UserError(f"export makes .tflite files for a device: --sut {', '.join(bad) or text!r}"
                        f" is not one of {', '.join(EXPORTABLE)} (the ONNX Runtime and OpenVINO "
                        "SUTs convert on the device itself from an .onnx --model-path)")
    return list(dict.fromkeys(names))


def export(suts: list[str], model: str, output: str, model_path: str | None = None,
           dataset_path: str | None = None, calibration_list: str | None = None
           ) -> list[Path]:
    """Build and write each SUT's artifact and record; returns the written model files."""
    from quantmark.models.zoo import get_model
    from quantmark.qsl import open_dataset
    from quantmark.qsl.calibration_sets import CalibrationProvider
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.interface import SutOptions
    from quantmark.sut.registry import load_factory, require_available

    spec = get_model(model)
    infos = [require_available(name) for name in suts]  # every SUT checked before any work
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    dataset = open_dataset(dataset_path, builtin=spec.builtin_dataset)
    calibration = CalibrationProvider(dataset, spec, calibration_list)
    written = []
    for info in infos:
        options = SutOptions(model=model, scenario="SingleStream", batch_size=1,
                             model_path=model_path)
        backend = load_factory(info)(info.name, options, spec, calibration)
        artifact = backend.artifact
        target = folder / f"{model}-{info.name}.tflite"
        atomic_write_bytes(target, Path(artifact.path).read_bytes())
        record = {
            "kind": KIND, "schema": SCHEMA, "model": model, "sut": info.name,
            "file": target.name, "sha256": hash_file(target, 64),
            "size_bytes": target.stat().st_size,
            "precision": artifact.precision,
            "executed_precision": (artifact.meta or {}).get("executed_precision"),
            "input": (artifact.meta or {}).get("input"),
            "preprocess": vars(recipe_for(spec, backend.layout)),
            "artifact": artifact.to_json(),
            "calibration": calibration.describe() if info.needs_calibration else None,
            "dataset_fingerprint": dataset.fingerprint(),
            "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "exported_on": _machine(),
            "software": _software(),
        }
        atomic_write_json(record_path(target), record)
        written.append(target)
    if dataset.builtin:
        _copy_dataset(Path(dataset.root), folder / DATASET_DIR)
    return written


def _copy_dataset(root: Path, target: Path) -> None:
    """The built-in evaluation split as a plain ImageNet-format folder, with the source photo
    of each image (once; reused while its val_map and groups are the same)."""
    from quantmark.qsl.groups import VAL_GROUPS

    lists = [name for name in ("val_map.txt", VAL_GROUPS) if (root / name).is_file()]
    if all(_same_file(root / name, target / name) for name in ("val_map.txt", VAL_GROUPS)):
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(root / "val", tmp / "val")
    for name in lists:
        shutil.copyfile(root / name, tmp / name)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _same_file(source: Path, copy: Path) -> bool:
    """Both absent, or both there with the same bytes."""
    if not source.is_file() or not copy.is_file():
        return source.is_file() == copy.is_file()
    return source.read_bytes() == copy.read_bytes()


def _machine() -> dict[str, Any]:
    from quantmark.ground import fingerprint

    facts = fingerprint.machine()
    return {key: facts.get(key) for key in ("hostname", "cpu_model", "arch", "os", "python")}


def _software() -> dict[str, Any]:
    from quantmark.ground import fingerprint

    return fingerprint.software(("tensorflow", "ai-edge-litert", "torch", "onnx"))
