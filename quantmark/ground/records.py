"""The records quantmark writes, typed and versioned, and the one loader every reader uses.

A run's ``results.json``, a diagnosis' ``results.json`` (in ``diagnose-<against>/``), a
train-bench JSON, a sweep's ``sweep.json`` and the ``interference.json`` the launcher writes
beside a run's logs each carry ``kind`` and ``schema``. ``load_record`` refuses, in one line, a
schema newer than this quantmark's (``SCHEMA_VERSION``) and a kind it does not know, upgrades
older schemas in memory and returns the typed record; ``write_record`` writes one atomically.

Schema 1 is what quantmark wrote before records were typed: its fields are schema 2's, but a
run and a sweep manifest had no ``kind`` (and a run or a diagnosis no ``schema``). Top-level
fields are typed attributes; nested sections stay dicts where they are free-form evidence (a
framework's own description, the machine's facts, LoadGen's summary). A top-level key this
version does not know is kept in ``extra`` and written back as it was.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from quantmark.ground import record_fields
from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json
from quantmark.ground.version import VERSION

if TYPE_CHECKING:  # typing.Self is Python 3.11+; quantmark runs on 3.10
    from typing import Self

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
RESULTS = "results.json"  # a run's record, and a diagnosis' (in its diagnose-<against>/)
INTERFERENCE = "interference.json"  # what the launcher saw beside the run, in its folder
SWEEP_MANIFEST = "sweep.json"
# a record that names no kind (schema 1's runs and manifests): a sweep's manifest by its file
# name, any other a run's
_UNNAMED_KIND = {SWEEP_MANIFEST: "sweep-manifest"}
_NOT_FIELDS = ("kind", "schema", "extra", "source")


class UnreadableRecord(UserError):
    """A record file that is missing, not JSON, or whose fields are not what its kind holds:
    readers that walk folders may skip it (and say so); a newer schema is never skipped."""


@dataclass(kw_only=True)
class Record:
    """What every record shares: its kind, its schema, the keys this version does not know
    and, once loaded, the file it came from."""

    KIND: ClassVar[str] = ""
    schema: int = field(default=SCHEMA_VERSION, init=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    source: Path | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return self.KIND

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON holds it: kind and schema first, then its fields; an optional
        section it does not have (None) is left out, as before records were typed."""
        own = {f.name: value for f in fields(self) if f.name not in _NOT_FIELDS
               and ((value := getattr(self, f.name)) is not None or f.default is not None)}
        return {"kind": self.KIND, "schema": self.schema, **self.extra, **own}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "a record") -> Self:
        """The typed record of an upgraded dict; a field of the wrong type, or a required one
        missing, is an UnreadableRecord naming ``where``. ``null`` means "not recorded"."""
        hints = record_fields.hints(cls)
        named = {f.name: f for f in fields(cls) if f.init and f.name not in _NOT_FIELDS}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("kind", "schema"):
                continue
            if key not in named:
                extra[key] = value
            elif value is not None or record_fields.optional(hints[key]):
                allowed = record_fields.accepts(hints[key])
                if not isinstance(value, allowed):
                    raise UnreadableRecord(
                        f"{where}: {cls.KIND} field {key!r} is a {type(value).__name__}, not "
                        f"{' or '.join(sorted({t.__name__ for t in allowed}))}; restore the "
                        "file or run it again")
                values[key] = value
        missing = [name for name, f in named.items() if name not in values
                   and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise UnreadableRecord(f"{where}: a {cls.KIND} record without {', '.join(missing)}; "
                                   "restore the file or run it again")
        return cls(**values, extra=extra)

    def after_load(self, path: Path) -> None:
        """What a kind adds from beside its file once loaded (a run: its interference)."""


@dataclass(kw_only=True)
class RunRecord(Record):
    """One LoadGen test's ``results.json`` (an ensemble's too: its ``ensemble`` section)."""

    KIND: ClassVar[str] = "run"
    config: dict[str, Any] = field(default_factory=dict)  # the RunConfig it ran, as JSON
    system_id: str = ""
    sut: dict[str, Any] = field(default_factory=dict)  # the SUT and what the backend describes
    model: dict[str, Any] = field(default_factory=dict)  # the artifact (an ensemble: members)
    dataset: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None  # None: the SUT does not calibrate
    settings: dict[str, Any] = field(default_factory=dict)  # quick/official, quantmark's set
    times: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)  # report.loadgen_log's of the log
    machine: dict[str, Any] = field(default_factory=dict)  # with the thermal verdict
    software: dict[str, Any] = field(default_factory=dict)
    speed_settings: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    repeat: dict[str, Any] | None = None  # a performance run's place in its repeat set
    audit: dict[str, Any] | None = None  # a compliance test's
    accuracy: dict[str, Any] | None = None  # an accuracy run's figure (the task's metric)
    # the task (quantmark.tasks): name, metric, postprocessing; None in records written
    # before tasks, which were all classification
    task: dict[str, Any] | None = None
    ensemble: dict[str, Any] | None = None
    # the interference monitor's verdict: the parent's, from the file the record names (schema
    # 1 held it inline); None when no monitor watched the run
    interference: dict[str, Any] | None = None
    interference_file: str | None = None

    @classmethod
    def of(cls, results: RunRecord | dict[str, Any]) -> RunRecord:
        """A run's record as the launcher's caller holds it (the child's dict) or typed."""
        if isinstance(results, RunRecord):
            return results
        return cls.from_dict(upgrade(dict(results), cls.KIND), "the run's results")

    @property
    def validity(self) -> str | None:
        """LoadGen's VALID / INVALID; None where the summary has none."""
        return self.summary.get("validity")

    @property
    def repeat_index(self) -> int | None:
        """Which repeat of its set the run was, or None where that is not recorded."""
        index = (self.repeat or {}).get("index")
        return index if isinstance(index, int) and not isinstance(index, bool) else None

    def after_load(self, path: Path) -> None:
        """Merge the interference file the record names, when it is this run's."""
        name = self.interference_file
        if self.interference is not None or not name or Path(name).name != name:
            return
        beside = path.parent / name
        if not beside.is_file():
            return
        try:
            found = load_record(beside, kind=InterferenceRecord.KIND)
        except UnreadableRecord as exc:
            log.warning("%s; the run's interference is unknown", exc)
            return
        assert isinstance(found, InterferenceRecord)
        if found.loadgen_started_at == self.times.get("loadgen_started_at"):
            self.interference = found.summary


@dataclass(kw_only=True)
class InterferenceRecord(Record):
    """What other processes took from the machine during one run's LoadGen window
    (``quantmark.run.interference``), written by the parent after the child's record."""

    KIND: ClassVar[str] = "interference"
    loadgen_started_at: float | None  # the run it belongs to
    summary: dict[str, Any]


@dataclass(kw_only=True)
class JobRecord(Record):
    """The tail a diagnosis and a profile each record beside their findings: what the job was
    asked, where it ran and when, and its figure. Declared once, so the two kinds cannot
    drift apart; the field names, and so the files, are as before."""

    config: dict[str, Any] = field(default_factory=dict)  # the job's configuration, as JSON
    system_id: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    times: dict[str, Any] = field(default_factory=dict)
    figure: str | None = None  # the figure's file name beside the record
    # the task (quantmark.tasks) as a run's results.json names it: name, metric ...; None in
    # records written before tasks, which were all classification
    task: dict[str, Any] | None = None


@dataclass(kw_only=True)
class DiagnosisRecord(JobRecord):
    """``run.py diagnose``'s ``results.json``: where a SUT loses accuracy, layer by layer."""

    KIND: ClassVar[str] = "diagnosis"
    model: str
    sut: str
    against: str
    samples: int
    layers: list[Any]
    worst: list[Any]
    capture: dict[str, Any]
    damage: list[Any] = field(default_factory=list)
    matched: dict[str, Any] = field(default_factory=dict)
    unmatched: dict[str, Any] = field(default_factory=dict)
    first_jump: str | None = None
    jump_rule: dict[str, Any] = field(default_factory=dict)
    exclusion: str = ""
    describe: dict[str, Any] = field(default_factory=dict)
    recovery: dict[str, Any] | None = None
    recovery_failed: str | None = None
    # what the layers' errors come to at the end where the task's answer is not one class (a
    # detector): the final output's error and both SUTs' metric; None for a classifier
    quality: dict[str, Any] | None = None

    @property
    def folder(self) -> Path | None:
        """The diagnosis' folder (its tables and figure), once loaded from it."""
        return self.source.parent if self.source else None


@dataclass(kw_only=True)
class TrainBenchRecord(Record):
    """One train-bench configuration (framework, model, batch, image size, precision)."""

    KIND: ClassVar[str] = "train-bench"
    framework: str
    model: str
    precision: str
    device: str
    batch_size: int
    image_size: int
    steps: int
    warmup_steps: int
    executed_precision: str
    times: dict[str, Any]
    step_time_s: dict[str, Any]
    images_per_s: float
    memory: dict[str, Any]
    amp: dict[str, Any]
    loss_first: float
    loss_last: float
    loss_finite: bool
    device_name: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""


@dataclass(kw_only=True)
class ProfileRecord(JobRecord):
    """``run.py profile``'s ``results.json``: where a SUT's time goes, layer by layer."""

    KIND: ClassVar[str] = "profile"
    model: str
    sut: str
    against: str
    batch_size: int
    iterations: int
    warmup: int
    unsupported: dict[str, Any] = field(default_factory=dict)
    test: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    layers: list[Any] = field(default_factory=list)
    slower: list[Any] = field(default_factory=list)
    #: every --against SUT (``against`` is the first: the reference of ratios and ranking)
    references: list[Any] = field(default_factory=list)
    #: the model the references ran instead of the test's (--against-model-path)
    against_model_path: str | None = None
    #: the canonical FP32 ONNX the layers are named by ("" where rows keep their own names)
    onnx_model: str = ""
    vocabulary: str = ""
    #: the further references' profiles, by label, and every SUT's layers side by side
    others: dict[str, Any] = field(default_factory=dict)
    side_by_side: list[Any] = field(default_factory=list)


@dataclass(kw_only=True)
class RecommendationRecord(Record):
    """``run.py recommend``'s ``recommendation.json``: the answer and every candidate's evidence
    (plain summaries: ``quantmark.recommend.answer``), so a report needs no search to read it."""

    KIND: ClassVar[str] = "recommendation"
    model: str
    scenario: str
    verdict: str  # winner | tied | undecided | infeasible | cannot tell
    objective: str
    higher_is_better: bool
    limits: dict[str, Any] = field(default_factory=dict)
    recommended: dict[str, Any] | None = None
    tied: list[Any] = field(default_factory=list)  # candidate keys, best point first
    excluded: list[Any] = field(default_factory=list)
    binding: str = ""
    closest: str | None = None
    candidates: list[Any] = field(default_factory=list)
    commands: dict[str, Any] = field(default_factory=dict)
    search: dict[str, Any] = field(default_factory=dict)  # rounds, spent_s, budget_s, notes
    figure: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    times: dict[str, Any] = field(default_factory=dict)
    # the task of the runs it judged (name, metric), as their results.json name it; None in
    # records written before tasks, which were all classification's
    task: dict[str, Any] | None = None
    # candidates that might beat the answer but whose limits the evidence cannot judge: key ->
    # a line per such limit (its figure, interval, and what would tell it)
    cannot_tell: dict[str, list[str]] = field(default_factory=dict)


@dataclass(kw_only=True)
class SweepManifest(Record):
    """A sweep's ``sweep.json``: the settings it measures with, its spec, every cell's entry."""

    KIND: ClassVar[str] = "sweep-manifest"
    settings: dict[str, Any] = field(default_factory=dict)
    cells: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)


KINDS: dict[str, type[Record]] = {cls.KIND: cls for cls in (
    RunRecord, InterferenceRecord, DiagnosisRecord, TrainBenchRecord, ProfileRecord,
    RecommendationRecord, SweepManifest)}


def _from_schema_1(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """Schema 1 -> 2: the same fields; the kind is named."""
    return {**data, "kind": kind, "schema": 2}


# schema N -> N + 1, applied in turn up to SCHEMA_VERSION
UPGRADES: dict[int, Callable[[dict[str, Any], str], dict[str, Any]]] = {1: _from_schema_1}


def upgrade(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """``data`` (of ``kind``, at its schema, 1 when unnamed) at SCHEMA_VERSION."""
    schema = data.get("schema", 1)
    while schema < SCHEMA_VERSION:
        data = UPGRADES[schema](data, kind)
        schema = data["schema"]
    return data


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UnreadableRecord(f"{path} does not exist; run the test again") from None
    except OSError as exc:
        raise UnreadableRecord(f"cannot read {path} ({exc.strerror}); fix its permissions"
                               ) from None
    except ValueError:
        raise UnreadableRecord(f"{path} is not valid JSON (cut short or edited?); restore it "
                               "or run it again") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(f"{path} holds a JSON {type(data).__name__}, not a quantmark "
                               "record; move it away or run it again")
    return data


def load_record(path: str | Path, kind: str | None = None) -> Record:
    """The typed record in ``path``: the one way a record is read. Refuses (one line) a newer
    schema and an unknown kind (UserError: upgrade quantmark), another kind than ``kind``
    (UserError) and an unreadable file (UnreadableRecord)."""
    path = Path(path)
    data = _read(path)
    schema = data.get("schema", 1)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise UnreadableRecord(f"{path}: record schema {schema!r} is not a version number; "
                               "restore the file or run it again")
    if schema > SCHEMA_VERSION:
        raise UserError(f"{path} is a record of schema {schema}, newer than the schema "
                        f"{SCHEMA_VERSION} quantmark {VERSION} reads; upgrade quantmark to read "
                        "it")
    found = data.get("kind", _UNNAMED_KIND.get(path.name, RunRecord.KIND))
    if found not in KINDS:
        raise UserError(f"{path} is a record of kind {found!r} (schema {schema}), which "
                        f"quantmark {VERSION} does not know ({', '.join(KINDS)}); upgrade "
                        "quantmark to read it")
    if kind is not None and found != kind:
        raise UserError(f"{path} is a {found} record where a {kind} record belongs; move it "
                        "away or pass the folder it belongs to")
    record = KINDS[found].from_dict(upgrade(data, found), str(path))
    record.source = path
    record.after_load(path)
    return record


def load_run(path: str | Path) -> RunRecord:
    """``load_record(path, kind="run")``, typed as a run's."""
    record = load_record(path, RunRecord.KIND)
    assert isinstance(record, RunRecord)
    return record


def load_manifest(root: str | Path) -> SweepManifest | None:
    """The sweep manifest in folder ``root``; None when the folder holds no sweep."""
    path = Path(root) / SWEEP_MANIFEST
    if not path.is_file():
        return None
    record = load_record(path, SweepManifest.KIND)
    assert isinstance(record, SweepManifest)
    return record


def write_record(path: str | Path, record: Record) -> None:
    """Write ``record`` atomically (readers never see half a file): the one writer."""
    atomic_write_json(path, record.to_dict())
