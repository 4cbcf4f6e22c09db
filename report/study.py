"""The characterization's data: one run, one configuration with its repeats, one that has no
result, and the study that holds them; and the parts of a SUT name (family, variant) that rows
are grouped by.

Kept apart from ``characterize``, which finds the runs and derives the figures, so the modules
that compute parts of those figures (``intervals``, ``measured``, ``setup_identity``,
``best_points``) read these types without importing the module that imports them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.records import RunRecord
from quantmark.report.loadgen_log import RunSummary
from quantmark.report.workloads import Workload
from quantmark.sut.info import SutInfo

ENSEMBLE = "ensemble"  # the framework (and family) of the ensemble SUTs


@dataclass
class Run:
    """One finished LoadGen performance run (one repeat of one configuration)."""

    folder: Path
    summary: RunSummary
    results: RunRecord
    tracked: dict[str, Any] = field(default_factory=dict)  # the sweep's entry for the cell


@dataclass
class Explained:
    """A configuration that has no result, and why."""

    system: str
    model: str
    sut: str
    scenario: str
    batch_size: int
    mode: str
    status: str
    message: str


@dataclass
class Config:
    """One (system, model, SUT, scenario, batch size): its repeats and derived figures."""

    system: str
    model: str
    sut: str
    scenario: str
    batch_size: int
    runs: list[Run]
    derived: dict[str, Any] = field(default_factory=dict)
    workload: Workload | None = None  # the model's size and dataset (``report.workloads``)

    @property
    def family(self) -> str:
        return family(self.sut)

    @property
    def variant(self) -> str:
        return variant(self.sut)

    @property
    def first(self) -> RunRecord:
        return self.runs[0].results

    @property
    def latency_metric(self) -> bool:
        return self.runs[0].summary.metric_unit == "ns"

    def valid_runs(self) -> list[Run]:
        """The runs a figure may use: an INVALID run (LoadGen's own verdict) measured
        something other than what was asked, so it is left out, and the validity column
        says how many were."""
        return [r for r in self.runs if r.summary.validity == "VALID"]

    def metric_values(self) -> list[float]:
        return [r.summary.metric_value for r in self.valid_runs()
                if r.summary.metric_value is not None]

    @property
    def metric(self) -> float | None:
        """The median over repeats: one run disturbed by another process moves it least."""
        values = self.metric_values()
        return statistics.median(values) if values else None


@dataclass
class Study:
    """Everything the report shows."""

    configs: list[Config]
    explained: list[Explained]
    accuracy: dict[tuple[str, str, str], dict[str, Any]]  # (system, model, sut) -> record
    machines: dict[str, dict[str, Any]]
    folders: list[Path]
    training: list[dict[str, Any]] = field(default_factory=list)  # train-bench records
    verdicts: int = 0  # speedup verdicts the report makes: what their intervals correct for
    #: one line per run whose results.json disagrees with LoadGen's logs (``logged_run``): the
    #: report's figures are LoadGen's
    disagreements: list[str] = field(default_factory=list)

    def keys(self, *names: str) -> list[tuple]:
        """Distinct values of the named Config attributes, in first-seen order."""
        return list(dict.fromkeys(tuple(getattr(c, n) for n in names) for c in self.configs))


def known_sut(sut: str) -> SutInfo | None:
    """The registry's entry for ``sut``; None for a name it does not know (results written by an
    older quantmark, or by a framework plugin not installed here)."""
    from quantmark.sut.registry import SUTS

    return SUTS.get(sut)


def family(sut: str) -> str:
    """The framework (and device) part of a SUT name: ``ort`` of ``ort-int8``, ``ort-cuda`` of
    ``ort-cuda-fp16``. As its framework declares it; an unknown name up to its last dash."""
    sut = sut.partition(" ")[0]  # a label's SUT: ov-int8 of "ov-int8 ov_api=async"
    info = known_sut(sut)
    if info:
        return info.family
    return ENSEMBLE if sut.startswith(f"{ENSEMBLE}-") else sut.rsplit("-", 1)[0]


def variant(sut: str) -> str:
    """The precision part of a SUT name (``int8`` of ``ort-int8``, ``fp16`` of
    ``torch-cuda-fp16``). As its framework declares it; an unknown name after its last dash."""
    sut = sut.partition(" ")[0]
    info = known_sut(sut)
    if info:
        return info.variant
    if sut.startswith(f"{ENSEMBLE}-"):  # ensemble-sequential-vote -> sequential-vote
        return sut[len(ENSEMBLE) + 1:]
    return sut.rsplit("-", 1)[1] if "-" in sut else sut
