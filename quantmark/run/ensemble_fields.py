"""What an ensemble run adds to results.json, and, for an accuracy run, each member's own logs.

An accuracy run keeps every member's output per sample in ``members/<MODEL@SUT>/``:
``mlperf_log_accuracy.json`` (its class per sample, in LoadGen's format, scored by the same
accuracy tool as any run, with the run's ``val_map.txt`` copied beside it) and
``probabilities.npz`` (``qsl_idx`` and the member's float32 probabilities, what the ensemble
combined). From them come each member's top-1, the members' agreement and a check, sample by
sample, that the ensemble answered what its combination rule gives.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.hashing import atomic_write_json


def ensemble_record(prepared: Any, work: Path, accuracy: dict[str, Any] | None
                    ) -> dict[str, Any]:
    """results.json's "ensemble": every member's artifact, hash, executed precision, input and
    time share; the inputs' cost; for accuracy runs, the members' accuracy and agreement."""
    from quantmark.models.artifacts import artifact_record
    from quantmark.sut.registry import get_sut

    backend, qsl = prepared.backend, prepared.qsl
    members = []
    for run, share in zip(backend.members, backend.time_shares(), strict=True):
        info = get_sut(run.member.sut)
        members.append({"member": run.member.label, "model": run.member.model,
                        "sut": run.member.sut, "framework": info.framework,
                        "precision": info.precision, "device": info.device,
                        "threads": run.threads, "artifact": artifact_record(run.backend.artifact),
                        "executed": run.backend.describe(), "input": run.input,
                        "calls": run.calls, "busy_s": round(run.busy_s, 4),
                        "time_share": round(share, 4)})
    record: dict[str, Any] = {
        "name": prepared.spec.name, "mode": backend.mode, "combine": backend.combine,
        "members": members,
        "inputs": {"tensors": len(qsl.libraries), "bytes_per_sample": qsl.sample_bytes,
                   "load_s": round(qsl.load_s, 3)}}
    if accuracy is not None and backend.members[0].outputs is not None:
        record["accuracy"] = member_accuracy(backend, qsl.labels, work, accuracy)
    return record


def member_accuracy(backend: Any, labels: np.ndarray, work: Path,
                    ensemble: dict[str, Any]) -> dict[str, Any]:
    """Write each member's logs; top-1 per member, agreement, and the combination check."""
    from quantmark.report.accuracy import decode_predictions

    indices = np.array(sorted(backend.members[0].outputs), dtype=np.int64)
    classes: dict[str, np.ndarray] = {}
    probabilities = []
    for run in backend.members:
        probs = np.stack([run.outputs[i] for i in indices]).astype(np.float32)
        probabilities.append(probs)
        classes[run.member.label] = probs.argmax(axis=1)
        write_member_logs(work / "members" / run.member.label, indices, probs, work)
    truth = np.asarray(labels)[indices]
    tops = {label: _top1(found, truth) for label, found in classes.items()}
    logged, _ = decode_predictions(work / "mlperf_log_accuracy.json")
    answered = np.array([logged.get(int(i), np.nan) for i in indices])
    expected = backend.combined(probabilities)
    return {"members": tops, "ensemble": {key: ensemble.get(key) for key in ("top1", "good",
                                                                           "total")},
            "agreement": agreement(classes),
            "combined_check": {"checked": int(len(indices)),
                               "mismatches": int(np.count_nonzero(answered != expected))}}


def _top1(found: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
    good = int(np.count_nonzero(found == truth))
    return {"top1": round(100.0 * good / len(truth), 3) if len(truth) else None,
            "good": good, "total": int(len(truth))}


def agreement(classes: dict[str, np.ndarray]) -> dict[str, Any]:
    """Percent of samples on which all members chose the same class, and each pair did."""
    stacked = np.stack(list(classes.values()))
    count = stacked.shape[1] or 1
    pairs = {f"{a} vs {b}": round(100.0 * np.count_nonzero(classes[a] == classes[b]) / count, 2)
             for a, b in itertools.combinations(classes, 2)}
    everyone = np.count_nonzero((stacked == stacked[0]).all(axis=0))
    return {"all": round(100.0 * everyone / count, 2), "pairs": pairs}


def write_member_logs(folder: Path, indices: np.ndarray, probs: np.ndarray, work: Path) -> None:
    """The member's accuracy log (LoadGen's format: its class as one float32 per sample), its
    probabilities, and the run's val_map, so ``quantmark.report.accuracy`` scores it alone."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = [{"seq_id": n, "qsl_idx": int(i),
                "data": np.float32(cls).tobytes().hex().upper()}
               for n, (i, cls) in enumerate(zip(indices, probs.argmax(axis=1), strict=True))]
    atomic_write_json(folder / "mlperf_log_accuracy.json", entries)
    temporary = folder / "probabilities.tmp.npz"
    np.savez(temporary, qsl_idx=indices, probabilities=probs)
    temporary.replace(folder / "probabilities.npz")
    for name in ("val_map.txt", "val_groups.txt", "classes.txt"):  # images, sources, names
        if (work / name).is_file():
            shutil.copyfile(work / name, folder / name)
