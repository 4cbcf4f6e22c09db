"""What a search has measured, kept on disk as it goes: Ctrl-C (or a crash) loses no finished
run, and the same command run again resumes where it stopped.

``evidence.json`` in the search's folder holds the settings the search measures with (the
command's flags but ``--budget`` and ``--output``) and every candidate's evidence so far; it is
rewritten atomically after every measurement (``RecordingMeasurer``: the measurer the search
calls, wrapping the real one, and the search's checkpoint). A rerun with other settings in the
same folder is refused in one line (two searches' runs are not one search's evidence), as a
sweep refuses one; a larger ``--budget`` is not another setting: it continues the search.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json
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

    def load(self) -> list[Evidence]:
        """The evidence an earlier search of the same settings left ([] when none); another
        search's, or a file this quantmark cannot read, is a one-line error."""
        if not self.path.is_file():
            return []
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            raise UserError(f"{self.path} is not readable JSON (cut short or edited?); move it "
                            "away to start the search afresh") from None
        if not isinstance(data, dict) or data.get("kind") != KIND \
                or not isinstance(data.get("format"), int) or data["format"] > FORMAT:
            raise UserError(f"{self.path} is not a search's evidence this quantmark reads; move "
                            "it away or use another --output")
        found = data.get("settings") or {}
        changed = sorted(key for key in {*found, *self.settings}
                         if found.get(key) != self.settings.get(key))
        if changed:
            raise UserError(f"{self.path.parent} holds a search measured with other settings "
                            f"({', '.join(changed)}); keep them to resume, or use a new --output")
        try:
            return [Evidence.from_dict(item) for item in data.get("evidence", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{self.path}: evidence unreadable ({exc}); move it away to start "
                            "the search afresh") from None

    def save(self, evidence: list[Evidence]) -> None:
        """Write every candidate's evidence, atomically (a reader never sees half a file)."""
        atomic_write_json(self.path, {"kind": KIND, "format": FORMAT, "settings": self.settings,
                                      "saved_at": time.time(),
                                      "evidence": [item.to_dict() for item in evidence]})


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
