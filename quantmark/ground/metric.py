"""A task's quality metric as plain data: what every layer above the tasks reads from a record
(a name, a unit, a direction) instead of saying "top-1" itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    """How a task scores a run: ``key`` is the field of the record's accuracy that holds the
    figure (in ``unit``), ``name`` what tables print, ``higher_is_better`` its direction."""

    key: str
    name: str
    unit: str = "%"
    higher_is_better: bool = True

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, data: dict[str, Any] | None) -> Metric:
        """The metric a record names; a record written before tasks existed is top-1."""
        if not data:
            return TOP1
        return cls(key=str(data["key"]), name=str(data["name"]), unit=str(data.get("unit", "%")),
                   higher_is_better=bool(data.get("higher_is_better", True)))

    def change_word(self, delta: float) -> str:
        """"better" or "worse" for a change of ``delta`` in this metric's units."""
        return "better" if (delta > 0) == self.higher_is_better else "worse"


#: classification's metric, and what records without a named metric were scored by
TOP1 = Metric(key="top1", name="top-1", unit="%")


class PointsChange:
    """The verdict of a change in a metric's points with its interval, shared by every kind
    of change (classification's ``report.stats.AccuracyChange``, a task's ``QualityChange``):
    significant only when the interval excludes zero. A subclass is a dataclass with
    ``delta_points``, ``low`` and ``high``."""

    delta_points: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def resolves(self) -> float:
        """The interval's half-width in points: the smallest change this evaluation set tells
        from none (set by its independent units and how often the two runs disagree)."""
        return max(0.0, (self.high - self.low) / 2)

    def resolving_text(self) -> str:
        """``the set resolves ±4.5 pt``: printed with every change, so a verdict of "no
        measurable change" says how large a change could have hidden in it."""
        return f"the set resolves ±{self.resolves:.2g} pt"

    @property
    def verdict(self) -> str:
        if not self.significant:
            return "no measurable change"
        return "better" if self.delta_points > 0 else "worse"
