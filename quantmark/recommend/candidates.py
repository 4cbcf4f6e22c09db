"""What ``run.py recommend`` searches and what it measures: the plain data the search
(``search``), the measurements (``measure``) and the answer (``answer``) share.

A candidate is one deployable configuration: a SUT and the settings that change its speed
(batch size, intra-op threads, the SUT's own ``--sut-option`` values) or its model (a
mixed-precision point of the diagnosis). Its artifact is what decides accuracy and size: the
SUT and the model variant, not the batch or threads, so accuracy is run once per artifact.
What the search is asked (``SearchConfig``: objective, limits, budget) is here too: the judging,
the staging and the mixed points read it below the search that runs them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from quantmark.ground.errors import UserError

#: scenario -> the objective it implies and whether higher is better
OBJECTIVES = {"SingleStream": ("latency_ms", False), "MultiStream": ("latency_ms", False),
              "Offline": ("samples_per_s", True), "Server": ("samples_per_s", True)}
#: scenario -> the batch of each SUT's base candidate, measured before its other settings
#: (``staging``); a SUT without that batch in the space has its first batch as its base
BASE_BATCH = {"SingleStream": 1, "MultiStream": 8, "Offline": 8, "Server": 8}
#: what ``--objective`` may name
OBJECTIVE_NAMES = ("latency_ms", "samples_per_s")


#: ``--recover``'s default: mixed-precision points with 1, 2, 4 and 8 layers kept in float
DEFAULT_RECOVER = 8
#: SUT options that change the model a SUT runs (TensorRT's INT8 route builds another
#: engine), so its accuracy and size; batch, threads and the other options never change them
ARTIFACT_OPTIONS = ("trt_int8_route",)


@dataclass(frozen=True)
class Candidate:
    """One configuration the search may recommend."""

    sut: str
    batch_size: int = 1
    threads: int = 0  # intra-op threads; 0: the framework's default
    #: the SUT's own options (``--sut-option KEY=VALUE``), sorted by key
    settings: tuple[tuple[str, str], ...] = ()
    #: a mixed-precision point of the diagnosis: the layers kept in float ("" = none)
    keep_float: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """A stable id: ``ov-int8 b8 t2 ov_api=async``."""
        parts = [self.sut, f"b{self.batch_size}", f"t{self.threads or 'auto'}"]
        parts += [f"{k}={v}" for k, v in self.settings]
        if self.keep_float:
            parts.append(f"float[{len(self.keep_float)}]")
        return " ".join(parts)

    @property
    def artifact(self) -> str:
        """What accuracy and model size depend on: the SUT, the options that change its
        model (``ARTIFACT_OPTIONS``) and the layers kept in float."""
        parts = [self.sut, *(f"{k}={v}" for k, v in self.settings if k in ARTIFACT_OPTIONS)]
        if self.keep_float:
            parts.append(f"float={','.join(self.keep_float)}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: settings as a mapping, keep_float as a list."""
        return {"sut": self.sut, "batch_size": self.batch_size, "threads": self.threads,
                "settings": dict(self.settings), "keep_float": list(self.keep_float)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        """The inverse of ``to_dict``; a damaged entry is a ``UserError``."""
        with _reading("candidate"):
            settings = data.get("settings") or {}
            return cls(sut=str(data["sut"]), batch_size=int(data.get("batch_size", 1)),
                       threads=int(data.get("threads", 0)),
                       settings=tuple(sorted((str(k), str(v)) for k, v in settings.items())),
                       keep_float=tuple(str(x) for x in data.get("keep_float") or ()))


@dataclass(frozen=True)
class Limits:
    """The user's limits (None: no limit)."""

    max_accuracy_drop: float | None = None  # points of the task's metric against the best FP32
    latency_ms: float | None = None  # the scenario's latency percentile (p90 SingleStream)
    min_throughput: float | None = None  # samples/s
    max_memory_mb: float | None = None  # peak RSS of the run
    max_model_size_mb: float | None = None  # the artifact on disk


@dataclass(frozen=True)
class Measurement:
    """One short run of a candidate."""

    latency_ms: float | None  # the scenario's percentile latency (SingleStream p90 ...)
    samples_per_s: float | None
    valid: bool  # LoadGen's verdict; an INVALID run never enters a figure
    disturbed: bool  # the interference monitor's verdict
    memory_mb: float | None = None
    seconds: float = 0.0  # wall time the run took, for the budget
    run_dir: str = ""
    why: str = ""  # a failed run's one line
    #: the dataset's evaluation count (an accuracy run's length; None: not recorded)
    samples: int | None = None

    @property
    def rate(self) -> float:
        """Samples per second: the run's own figure, else one sample per percentile latency
        (a slow bound: SingleStream's rate); 0 when it measured neither."""
        if self.samples_per_s:
            return self.samples_per_s
        return 1000.0 / self.latency_ms if self.latency_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """The inverse of ``to_dict``; a damaged entry is a ``UserError``."""
        with _reading("measurement"):
            return cls(**_numbers(cls, data, ("latency_ms", "samples_per_s", "memory_mb",
                                               "seconds")))


@dataclass(frozen=True)
class AccuracyResult:
    """One artifact's accuracy against the best FP32, with its paired interval, in its task's
    metric (``metric``: its key, ``top1`` or ``map``; the figure keeps the field name ``top1``
    it had before tasks, so journals and callers of then still read)."""

    top1: float  # the figure in ``metric`` (a detector's mAP)
    change_points: float  # against the reference FP32 (negative: a drop)
    low: float
    high: float
    reference: str  # the FP32 SUT it is paired with
    model_size_mb: float | None = None
    seconds: float = 0.0
    why: str = ""  # a failed accuracy run's one line (then the numbers are NaN)
    metric: str = "top1"  # the key of the task's metric (a journal of before tasks: top-1)
    units: int = 0  # the independent units the change's interval rests on (0: not recorded)
    #: False where those units are too few for the interval to hold (clustered crops of fewer
    #: than ``report.stats.MIN_VERDICT_GROUPS`` sources): no limit is judged on it
    decides: bool = True
    #: the label-free top-1 agreement with the reference, with its interval, in words ("" for
    #: a task with no one class per sample, or a journal of before it)
    agreement: str = ""

    @property
    def figure(self) -> float:
        """The artifact's figure in its task's metric."""
        return self.top1

    def to_dict(self) -> dict[str, Any]:
        """NaN (a failed run) is written as null: JSON has no NaN."""
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AccuracyResult:
        """The inverse of ``to_dict``: null numbers read back as NaN, ``model_size_mb`` None."""
        with _reading("accuracy result"):
            values = _numbers(cls, data, ("top1", "change_points", "low", "high",
                                          "model_size_mb", "seconds"))
            for name in ("top1", "change_points", "low", "high"):
                values[name] = math.nan if values[name] is None else values[name]
            values["seconds"] = values["seconds"] or 0.0
            return cls(**values)


class Measurer(Protocol):
    """What the search calls to measure: the real runs (``measure.LoadGenMeasurer``) or a
    stand-in with planted values (the tests)."""

    def run(self, candidate: Candidate, seconds: float) -> Measurement: ...

    def accuracy(self, candidate: Candidate) -> AccuracyResult: ...


def accuracy_suts_due(measurer: object, candidate: Candidate) -> tuple[str, ...]:
    """The SUTs whose accuracy runs ``measurer.accuracy(candidate)`` would make now, where the
    measurer says (``accuracy_suts_due``: the real one runs the FP32 references with its
    first), else the candidate's own: what the search prices before it asks."""
    due = getattr(measurer, "accuracy_suts_due", None)
    return tuple(due(candidate)) if callable(due) else (candidate.sut,)


@dataclass
class Evidence:
    """Everything measured of one candidate so far."""

    candidate: Candidate
    runs: list[Measurement] = field(default_factory=list)
    accuracy: AccuracyResult | None = None
    dropped: str = ""  # why the search stopped measuring it ("" while it races)
    dropped_round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, so an interrupted search can be resumed from a file."""
        return {"candidate": self.candidate.to_dict(),
                "runs": [run.to_dict() for run in self.runs],
                "accuracy": self.accuracy.to_dict() if self.accuracy else None,
                "dropped": self.dropped, "dropped_round": self.dropped_round}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        """The inverse of ``to_dict``; a damaged entry is a ``UserError``."""
        with _reading("evidence"):
            accuracy = data.get("accuracy")
            dropped_round = data.get("dropped_round")
            return cls(candidate=Candidate.from_dict(data["candidate"]),
                       runs=[Measurement.from_dict(run) for run in data.get("runs") or ()],
                       accuracy=AccuracyResult.from_dict(accuracy) if accuracy else None,
                       dropped=str(data.get("dropped") or ""),
                       dropped_round=None if dropped_round is None else int(dropped_round))


#: ``Outcome.verdict`` values
VERDICTS = ("winner", "tied", "infeasible", "undecided")


@dataclass
class Excluded:
    """The best candidate a limit excluded, and by how much it misses the limit."""

    limit: str  # a ``Limits`` field name
    evidence: Evidence
    value: float  # its figure for that limit (points of drop, ms, samples/s, MB)
    bound: float  # the limit
    margin: float  # how far beyond the limit (positive: by this much)
    #: how much better it is on the objective than the recommendation (the limit's cost), as
    #: a ratio of objective figures (>1: it would have been better)
    objective_ratio: float | None = None


@dataclass
class Outcome:
    """The search's answer.

    * ``winner``: ``recommended`` beats every other candidate that meets the limits (their
      intervals do not overlap its), ``tied`` is empty;
    * ``tied``: the best candidates cannot be told apart (overlapping intervals):
      ``recommended`` is None and ``tied`` names them all (the best point estimate first, but
      no pick);
    * ``undecided``: the budget ran out before the leaders could be told apart; as ``tied``;
    * ``infeasible``: no candidate meets the limits: ``binding`` names the limit that excludes
      most, ``closest`` the candidate nearest to meeting them all;
    * ``cannot tell``: none is known to meet the limits, and ``cannot_tell`` names those whose
      evidence cannot judge a limit (none known to break one): nothing is recommended.
    """

    verdict: str
    objective: str  # "latency_ms" | "samples_per_s"
    higher_is_better: bool
    limits: Limits
    recommended: Evidence | None
    tied: list[Evidence]
    excluded: list[Excluded]
    binding: str = ""
    closest: Evidence | None = None
    evidence: list[Evidence] = field(default_factory=list)  # every candidate, measured or not
    rounds: int = 0
    spent_s: float = 0.0
    budget_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: candidates that might beat the answer but whose limits the evidence cannot judge
    cannot_tell: list[Evidence] = field(default_factory=list)
    cannot_tell_why: dict[str, list[str]] = field(default_factory=dict)  # key -> its lines


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turns a damaged saved entry (a missing key, a wrong type) into one line for the user
    instead of a traceback: the file is the user's (a resumed search's evidence)."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UserError(f"saved search evidence: a damaged {what} entry ({type(error).__name__}: "
                        f"{error}); delete the file to start the search afresh") from error


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """NaN and infinities as null: JSON has none of them."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in values.items()}


def _numbers(cls: type, data: dict[str, Any], numeric: tuple[str, ...]) -> dict[str, Any]:
    """The dataclass's fields from ``data`` (unknown keys refused), numbers as floats."""
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise KeyError(f"unknown field(s) {sorted(unknown)}")
    values = dict(data)
    for name in numeric:
        if values.get(name) is not None:
            values[name] = float(values[name])
    return values


@dataclass(frozen=True)
class SearchConfig:
    """What the search optimizes, under which limits, and how long it may take."""

    objective: str  # "latency_ms" | "samples_per_s"
    higher_is_better: bool
    limits: Limits = field(default_factory=Limits)
    budget_s: float = 900.0  # measured seconds of runs and accuracy runs, all together
    run_seconds: float = 10.0  # each run's LoadGen duration (``--seconds``)
    start_s: float = 5.0  # a run's wall time beyond its duration, until one was timed
    min_runs: int = 3  # VALID undisturbed runs before a candidate may be dropped on its figures
    max_rounds: int = 30  # the budget usually ends a search first
    confidence: float = 0.95  # of every interval the search judges
    accuracy_seconds: float = 0.0  # one accuracy run's expected time, until a rate is known
    #: how much batch, threads and options may move one SUT's speed (a factor): a SUT's
    #: other settings are measured only while its base, so widened, reaches the leader
    settings_spread: float = 2.0
    #: each SUT's base batch (``staging``); None: the SUT's first batch in the space
    base_batch: int | None = None
    recover: int = DEFAULT_RECOVER  # --recover K: 1, 2, 4 ... K layers kept in float

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVE_NAMES:
            raise UserError(f"unknown objective {self.objective!r}; choose one of "
                            f"{', '.join(OBJECTIVE_NAMES)}")
        if self.min_runs < 3:
            raise UserError(f"min_runs {self.min_runs}: a candidate needs at least 3 runs "
                            "before it may be dropped (an interval of 2 is too wide to drop on)")
        if self.max_rounds < self.min_runs:
            raise UserError(f"max_rounds {self.max_rounds} is below min_runs {self.min_runs}: "
                            "nothing could ever be dropped")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"confidence {self.confidence} must lie in [0.5, 1)")
        if not all(math.isfinite(value) for value in (self.budget_s, self.run_seconds,
                                                       self.accuracy_seconds, self.start_s)) \
                or not self.budget_s > 0 or not self.run_seconds > 0 \
                or self.accuracy_seconds < 0 or self.start_s < 0:
            raise UserError("the budget and the seconds per run must be positive and finite")
        if not self.settings_spread >= 1:
            raise UserError(f"settings_spread {self.settings_spread} must be at least 1 (a "
                            "factor the settings may move a SUT's speed by)")

    @property
    def accuracy_round(self) -> int:
        """The round before whose run a candidate's artifact gets its accuracy measured."""
        limited = (self.limits.max_accuracy_drop is not None
                   or self.limits.max_model_size_mb is not None)
        return 2 if limited else self.min_runs

    @classmethod
    def for_scenario(cls, scenario: str, objective: str | None = None, **kwargs: object
                     ) -> SearchConfig:
        """The objective the scenario implies (``OBJECTIVES``) unless ``objective`` names one."""
        if scenario not in OBJECTIVES:
            raise UserError(f"unknown scenario {scenario!r}; choose one of {', '.join(OBJECTIVES)}")
        objective = objective or OBJECTIVES[scenario][0]
        kwargs.setdefault("base_batch", BASE_BATCH[scenario])
        return cls(objective=objective, higher_is_better=objective == "samples_per_s",
                   **kwargs)  # type: ignore[arg-type]
