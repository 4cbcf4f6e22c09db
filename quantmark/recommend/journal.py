"""What a search has measured, kept on disk as it goes: Ctrl-C (or a crash) loses no finished
run, and the same command run again resumes where it stopped.

``evidence.json`` in the search's folder holds the settings the search measures with (the
command's flags but ``--budget`` and ``--output``) and every candidate's evidence so far; it is
rewritten atomically after every measurement (``RecordingMeasurer``: the measurer the search
calls, wrapping the real one, and the search's checkpoint). A rerun with other settings in the
same folder is refused in one line (two searches' runs are not one search's evidence), as a
sweep refuses one; a larger ``--budget`` is not another setting: it continues the search.

The flags that name a file or a dataset are compared by what they name, not by their paths
(``sweep.contents``): the dataset's fingerprint, the model file's bytes (with an OpenVINO
``.bin`` or ONNX external data), each settings file's. A renamed or copied dataset resumes; a
folder or model file changed in place is refused in one line naming the change, for the same
reason a sweep refuses it: the saved runs are the only measurement of the old one, and one
search's evidence must be of one dataset and one model. The file carries a hash of what it
holds (its seal): one edited or cut short is not trusted, but moved aside with one warning,
and the search starts afresh.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json, hash_json
from quantmark.recommend.candidates import (
    AccuracyResult,
    Candidate,
    Evidence,
    Measurement,
    Measurer,
    accuracy_suts_due,
)

log = logging.getLogger(__name__)

EVIDENCE = "evidence.json"
KIND = "recommend-evidence"
FORMAT = 1  # the file's own version: a newer one is refused, not misread
#: flags naming a file or a dataset: compared by content (``contents_of``), never by path
CONTENT_FLAGS = ("dataset_path", "model_path", "labels", "calibration_list", "tokenizer",
                 "preprocess")
#: what ``contents_of`` passes on to the model's task to read the dataset as the runs do
_SHAPE_FLAGS = ("input_size", "num_classes", "labels", "seq_len", "padding", "tokenizer")


def plain(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` as JSON gives them back (tuples become lists), so a comparison with the
    file's is of like with like."""
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def resumable(known: Sequence[Evidence], candidates: Sequence[Candidate]) -> list[Evidence]:
    """The saved evidence a search of ``candidates`` resumes with: each candidate's, and the
    mixed-precision points the search added itself (the space does not hold them)."""
    keys = {candidate.key for candidate in candidates}
    return [item for item in known if item.candidate.key in keys or item.candidate.keep_float]


class Journal:
    """The evidence file of one search folder, for the settings it was made with."""

    def __init__(self, folder: Path, settings: dict[str, Any]) -> None:
        self.path = Path(folder) / EVIDENCE
        self.settings = plain(settings)
        self._contents: dict[str, str | None] | None = None

    @property
    def contents(self) -> dict[str, str | None]:
        """What the flags naming files and a dataset name, by content (hashed once)."""
        if self._contents is None:
            self._contents = contents_of(self.settings)
        return self._contents

    def load(self) -> list[Evidence]:
        """The evidence an earlier search of the same settings left ([] when none); another
        search's, or a file this quantmark cannot read, is a one-line error; a damaged one is
        moved aside with one warning (the search starts afresh)."""
        if not self.path.is_file():
            return []
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return self._set_aside("it is not readable JSON (cut short or edited?)")
        if not isinstance(data, dict) or data.get("kind") != KIND \
                or not isinstance(data.get("format"), int) or data["format"] > FORMAT:
            raise UserError(f"{self.path} is not a search's evidence this quantmark reads; move "
                            "it away or use another --output")
        if "seal" in data and data["seal"] != _seal(data):
            return self._set_aside("what it holds changed after it was written (edited or "
                                   "cut short)")
        self._check_settings(data)
        try:
            return [Evidence.from_dict(item) for item in data.get("evidence", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{self.path}: evidence unreadable ({exc}); move it away to start "
                            "the search afresh") from None

    def _check_settings(self, data: dict[str, Any]) -> None:
        """Refuse (one line) evidence measured with other settings or of other inputs."""
        found = data.get("settings") or {}
        theirs = data.get("contents")
        by_content = isinstance(theirs, dict)  # a file from before: its paths compared
        changed = sorted(key for key in {*found, *self.settings}
                         if found.get(key) != self.settings.get(key)
                         and not (by_content and key in CONTENT_FLAGS))
        if changed:
            raise UserError(f"{self.path.parent} holds a search measured with other settings "
                            f"({', '.join(changed)}); keep them to resume, or use a new --output")
        if not by_content:
            return
        differ = [_reason(key) for key in CONTENT_FLAGS
                  if key in theirs and theirs[key] != self.contents.get(key)]
        if differ:
            raise UserError(f"{self.path.parent} holds a search measured with other inputs "
                            f"({', '.join(differ)}); use a new --output to keep both, or "
                            "restore the original to resume")

    def _set_aside(self, why: str) -> list[Evidence]:
        """A damaged file: kept beside, out of the way; the search starts with nothing."""
        aside = self.path.with_name(f"{EVIDENCE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        self.path.rename(aside)
        log.warning("%s cannot be trusted: %s; moved to %s, the search starts afresh",
                    self.path, why, aside.name)
        return []

    def save(self, evidence: list[Evidence]) -> None:
        """Write every candidate's evidence, atomically (a reader never sees half a file)."""
        data = {"kind": KIND, "format": FORMAT, "settings": self.settings,
                "contents": self.contents, "saved_at": time.time(),
                "evidence": [item.to_dict() for item in evidence]}
        atomic_write_json(self.path, {**data, "seal": _seal(data)})


def _seal(data: dict[str, Any]) -> str:
    """A hash of what an evidence file holds (as JSON reads it back), but its time."""
    held = {key: data.get(key) for key in ("settings", "contents", "evidence")}
    return hash_json(json.loads(json.dumps(held, sort_keys=True, default=str)), 32)


def _reason(flag: str) -> str:
    if flag == "dataset_path":
        return "dataset content changed"
    if flag == "model_path":
        return "model file changed"
    return f"--{flag.replace('_', '-')} file's content changed"


def contents_of(settings: dict[str, Any]) -> dict[str, str | None]:
    """The search's files and dataset by content: each file's hash (a preset's or a hub
    tokenizer's name stands for itself) and the dataset's fingerprint as the model's task
    reads it. A dataset that cannot be read here (a fleet's driver may not hold it) is named
    by its path: the runs will say what is wrong with it."""
    from quantmark.models.workload import file_model_name
    from quantmark.models.zoo import DEFAULT_MODEL
    from quantmark.sweep.contents import dataset_identity, file_identity

    found = {key: file_identity(settings.get(key)) for key in CONTENT_FLAGS
             if key != "dataset_path"}
    model = str(settings.get("model") or file_model_name(settings.get("model_path"))
                or DEFAULT_MODEL)
    folder = settings.get("dataset_path")
    shape = {key: settings[key] for key in _SHAPE_FLAGS if settings.get(key)}
    try:
        found["dataset_path"] = dataset_identity(model, folder,
                                                 model_path=settings.get("model_path"), **shape)
    except UserError:
        found["dataset_path"] = f"unreadable:{folder}"
    return found


class RecordingMeasurer:
    """The measurer the search calls, ``inner`` measuring. ``checkpoint`` (the search calls it
    after every run and round, with every candidate's evidence) writes the journal; an
    accuracy result is written at once too (an accuracy run takes minutes, and the search
    checkpoints only after the run that follows it). An artifact's accuracy known already is
    returned, not measured again: it depends on the artifact only."""

    def __init__(self, inner: Measurer, journal: Journal, known: list[Evidence]) -> None:
        self.inner = inner
        self.journal = journal
        self.evidence: dict[str, Evidence] = {item.candidate.key: item for item in known}
        self.runs = 0  # measured by this process (not resumed)
        self.accuracies = 0

    def checkpoint(self, evidence: list[Evidence]) -> None:
        """Keep ``evidence`` (the search's own, updated in place as it measures)."""
        self.evidence = {item.candidate.key: item for item in evidence}
        self.journal.save(evidence)

    def _artifact_accuracy(self, candidate: Candidate) -> AccuracyResult | None:
        for item in self.evidence.values():
            if item.candidate.artifact == candidate.artifact and item.accuracy is not None:
                return item.accuracy
        return None

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        found = self.inner.run(candidate, seconds)
        self.runs += 1
        return found

    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        found = self._artifact_accuracy(candidate)
        if found is None:
            found = self.inner.accuracy(candidate)
            self.accuracies += 1
        self.evidence.setdefault(candidate.key, Evidence(candidate)).accuracy = found
        self.journal.save(list(self.evidence.values()))
        return found

    def accuracy_suts_due(self, candidate: Candidate) -> tuple[str, ...]:
        """None when its artifact's accuracy is known here, else what ``inner`` says."""
        if self._artifact_accuracy(candidate) is not None:
            return ()
        return accuracy_suts_due(self.inner, candidate)

    @property
    def measured_runs(self) -> int:
        """Every run kept, resumed ones included."""
        return sum(len(item.runs) for item in self.evidence.values())
