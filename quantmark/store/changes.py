"""What changed between the newest job's environment and its baseline's, most likely cause of
a speed change first.

The baseline's value of a key is the majority over the baseline jobs (the most recent of the
tied values on a tie). Every key whose newest value differs is a change, ranked by ``RANKS``,
which is plain data: the run's own settings and the artifact first (they change the work
itself), then the SUT's own framework, the machine (CPU, kernel, governor), other software,
quantmark, the dataset. Within a rank, a key that was the same in every baseline job and
changed only at the newest job comes before one that already varied in the baseline.
Measurements and paths (``IGNORED``) are not environment and never listed.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from quantmark.store.points import Point

# (what the rank is, the keys in it as fnmatch patterns); a key belongs to the rank of its
# most specific matching pattern (most literal characters), so software.quantmark is
# quantmark's rank although software.* is "other software". SUT_FRAMEWORK stands for the
# software keys of the series' own framework.
SUT_FRAMEWORK = "<the SUT's framework>"
RANKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run settings", ("settings.threads", "settings.workers", "settings.batch_size",
                      "settings.sut_option*", "sut.threads", "sut.*threads*", "sut.workers",
                      "sut.batch*", "speed.*", "speed_settings.*", "config.threads",
                      "config.workers", "config.batch_size", "config.sut_option*",
                      "settings.*", "config.*")),
    ("the artifact", ("fingerprint.*", "model.sha256", "model.key", "model.*sha256*",
                      "model.*", "calibration.*")),
    ("the SUT's framework", (SUT_FRAMEWORK, "sut.framework*")),
    ("the CPU", ("machine.cpu*", "machine.arch", "machine.logical_cpus", "machine.usable_cpus",
                 "machine.hostname", "machine.id", "machine.system_id", "machine.board*",
                 "machine.gpu*", "machine.*")),
    ("the kernel", ("machine.kernel*", "machine.os")),
    ("the governor", ("machine.*governor*", "machine.*turbo*", "machine.*smt*")),
    ("other software", ("software.*", "machine.python", "sut.*")),
    ("quantmark", ("software.quantmark", "version", "quantmark.*")),
    ("the dataset", ("dataset.*", "fingerprint.dataset*")),
    ("other", ("*",)),
)
# measurements and places, not the environment: they differ in every job by nature
IGNORED = ("settings.measurement.*", "settings.quantmark_set.target_qps", "settings.notes*",
           "times.*", "summary.*", "memory.*", "*path*", "*_file", "config.output",
           "model.artifact", "machine.thermal*", "*.started_at", "*_at")
# the software keys of a framework, by the SUT's framework name or its name's first word
FRAMEWORK_SOFTWARE = {
    "ort": ("onnxruntime", "onnxruntime-gpu"), "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "ov": ("openvino", "nncf"), "openvino": ("openvino", "nncf"),
    "tflite": ("tflite", "ai-edge-litert", "tensorflow"), "tf": ("tensorflow", "tf-keras"),
    "tensorflow": ("tensorflow", "tf-keras"), "torch": ("torch",), "pytorch": ("torch",),
}
MISSING = "(none)"
LIST_SUFFIXES = ("flags",)  # facts stored as a list joined with ","


@dataclass(frozen=True)
class Change:
    """One key whose value at the newest job differs from the baseline's."""

    key: str
    old: Any
    new: Any
    rank: int  # index into RANKS
    only_newest: bool  # the same in every baseline job: it changed at the newest job

    @property
    def group(self) -> str:
        return RANKS[self.rank][0]

    def text(self) -> str:
        """``settings.threads 2 -> 1``; a list (the CPU flags, stored joined with ",") shows
        what it gained and lost."""
        old, new = _items(self.key, self.old), _items(self.key, self.new)
        if old is not None and new is not None:
            gained = [f"+{v}" for v in new if v not in old]
            lost = [f"-{v}" for v in old if v not in new]
            return f"{self.key} " + " ".join(gained + lost)
        return f"{self.key} {_show(self.old)} -> {_show(self.new)}"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "old": self.old, "new": self.new, "group": self.group,
                "only_newest": self.only_newest, "text": self.text()}


def _items(key: str, value: Any) -> list[str] | None:
    """A list's items: a list, or a flags fact joined with "," (None: not a list)."""
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if isinstance(value, str) and key.endswith(LIST_SUFFIXES):
        return [v for v in value.split(",") if v]
    return None


def _show(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _framework_patterns(newest: Point) -> tuple[str, ...]:
    names = {str(newest.environment.get("sut.framework", "")).lower(),
             newest.series.sut.split("-")[0].lower()}
    software = {s for name in names for s in FRAMEWORK_SOFTWARE.get(name, (name,)) if s}
    return tuple(f"software.{s}" for s in sorted(software))


def rank_of(key: str, framework: tuple[str, ...] = ()) -> int:
    """The rank of ``key`` (an index into RANKS): that of its most specific pattern."""
    best, best_literal = len(RANKS) - 1, -1
    for index, (_, patterns) in enumerate(RANKS):
        for pattern in patterns:
            for concrete in (framework if pattern == SUT_FRAMEWORK else (pattern,)):
                literal = len(concrete.replace("*", ""))
                if fnmatch.fnmatchcase(key, concrete) and literal > best_literal:
                    best, best_literal = index, literal
    return best


def ignored(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in IGNORED)


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str)


def baseline_value(key: str, baseline: Sequence[Point]) -> tuple[Any, bool]:
    """The majority value of ``key`` over ``baseline`` (oldest first; the most recent of
    the tied values on a tie) and whether every baseline job had it."""
    values = [p.environment.get(key) for p in baseline]
    counts = Counter(_hashable(v) for v in values)
    top = max(counts.values())
    chosen = next(v for v in reversed(values) if counts[_hashable(v)] == top)
    return chosen, len(counts) == 1


def what_changed(newest: Point, baseline: Sequence[Point]) -> list[Change]:
    """Every environment key whose newest value differs from the baseline's, ranked (see
    the module); an empty list when nothing recorded differs or there is no baseline."""
    if not baseline:
        return []
    framework = _framework_patterns(newest)
    keys = set(newest.environment).union(*(p.environment for p in baseline))
    changes = []
    for key in sorted(k for k in keys if not ignored(k)):
        old, constant = baseline_value(key, baseline)
        new = newest.environment.get(key)
        if _hashable(old) != _hashable(new):
            changes.append(Change(key, old, new, rank_of(key, framework), constant))
    return sorted(changes, key=lambda c: (c.rank, not c.only_newest, c.key))


def changes_text(changes: Sequence[Change], limit: int = 6) -> str:
    """``what changed: settings.threads 2 -> 1; software.onnxruntime 1.19 -> 1.20``."""
    if not changes:
        return "what changed: nothing recorded in the environment"
    shown = "; ".join(c.text() for c in changes[:limit])
    more = f"; and {len(changes) - limit} more" if len(changes) > limit else ""
    return f"what changed: {shown}{more}"
