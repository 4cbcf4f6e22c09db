"""What the store gives its readers: one job's figure of one series, with where it came from.

``history`` prints these, ``regress`` tests the newest against the rest, the dashboard draws
them. A *series* is one model on one SUT in one scenario (``SeriesKey``); everything else about
a run (the machine, its CPU and kernel, framework versions, threads, batch, the artifact's
hash, the dataset) is its ``environment``: a change there is what ``regress`` reports as
"what changed", so it must not split the series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class SeriesKey:
    """What makes results comparable over time."""

    model: str
    sut: str
    scenario: str
    metric: str  # "latency_ms" (the scenario's percentile) or "samples_per_s"

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "samples_per_s"

    def label(self) -> str:
        return f"{self.model} {self.sut} {self.scenario} {self.metric}"


@dataclass(frozen=True)
class Point:
    """One job's figure of a series: a single run, or a repeat set summarised."""

    series: SeriesKey
    job_id: str  # the job's identity in the store (stable across imports)
    when: str  # ISO 8601 UTC, the run's start
    value: float | None  # the figure (a repeat set's median); None: no VALID run
    low: float | None  # its interval (None: one run, no interval)
    high: float | None
    #: every VALID run's own figure in this job (what per-series noise is estimated from)
    runs: tuple[float, ...] = ()
    valid: bool = True  # False: the job's figure includes no VALID run
    disturbed: bool = False  # any run of the job was flagged by the interference monitor
    invalid_runs: int = 0  # runs left out of ``value`` as INVALID
    #: flat facts of the run's environment (quantmark.store.environment_facts), values str,
    #: int, float or bool: "machine.cpu_model", "machine.cpu_flags" (joined with ","),
    #: "machine.kernel", "machine.governor", "machine.hostname", "machine.board.*",
    #: "machine.gpu.*", "software.<distribution>" (every one: "software.quantmark",
    #: "software.onnxruntime", ...), "settings.threads", "settings.batch_size",
    #: "settings.workers" (the workers the run used), "settings.sut_options" (JSON),
    #: "settings.mode" (quick | official), "sut.*" (what the backend describes: "sut.threads",
    #: "sut.framework_version", ...), "speed.*" (the harness' placement), "fingerprint.
    #: artifact_sha256", "fingerprint.artifact_key", "fingerprint.source_hash",
    #: "dataset.fingerprint", "dataset.evaluation_count"; never a path or a time
    environment: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    run_dir: str = ""  # the run's (or repeat set's) folder, for links
    version: str = ""  # quantmark's version that measured it
    #: the left-out (INVALID) runs' own figures: not in ``value``, drawn hollow by history
    left_out_runs: tuple[float, ...] = ()
    machine: str = ""  # its fleet node name, else its host name (what --machine filters by)
    #: its records recorded before the store checked figures against LoadGen's logs (a
    #: schema 1 store's): shown flagged until ``run.py store import`` of its folder checks them
    unchecked_runs: int = 0
