"""What a node of ``run.py recommend --cluster`` runs: the whole search, on itself, as one Ray
task holding its slot, with what it measured streamed back to the driver as it goes.

The task is a Ray streaming generator (``num_returns="streaming"``): the driver reads each
message as soon as it is yielded, so a node's evidence is on the driver's disk after every
measurement, not only at the end. Messages are plain dicts and bytes (a node with another
quantmark version answers "refused" in one line, not with an unpickling error):

* ``started``: the node's search folder and how much of the resumed evidence it kept;
* ``evidence``: every candidate's evidence, after each measurement (the search's checkpoint)
  and each accuracy result: what the driver writes as the node's ``evidence.json``;
* ``progress``: the search's ``on_progress``;
* ``answer``: the ``recommendation`` record and the runs' folders as one archive
  (``sweep.fleet.task.pack``); or ``error``: the search's one-line ``UserError`` on this node.

The search runs in a thread and the generator yields what it puts in a queue: the search calls
its checkpoint from inside, and a generator can only yield from its own frame.

Paths. A node searches in a folder of its own (``work_folder``), kept when a search is cut off
(a resumed attempt on the same node numbers its runs after the earlier ones) and removed once
its answer is sent; every path a message carries names that folder, and ``rebase`` moves them
to the driver's folder (the driver does, and moves its saved evidence here when it resumes). A
resumed run whose folder this node lacks (sent already, or measured before this node was
restarted) gets an empty folder while the search runs, so no new run takes its name.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.version import VERSION
from quantmark.recommend.candidates import Candidate, Evidence, Limits, Measurer
from quantmark.recommend.journal import Journal, RecordingMeasurer, resumable
from quantmark.sweep.fleet.task import NODE_ENV, pack

#: the factory of a node's space and measurer, ``module:function`` (``real_parts``): a name,
#: so the node imports it itself (the tests name their stand-ins' here)
DEFAULT_PARTS = "quantmark.recommend.cluster_node:real_parts"
WORK_PREFIX = "quantmark-recommend-"

Emit = Callable[[Any], None]
Parts = Callable[["FleetJob", Path], tuple[list[Candidate], Measurer]]


@dataclass(frozen=True)
class FleetJob:
    """What every node searches with, as plain data: the command's flags, made ready."""

    cluster: str
    output: str
    model: str
    scenario: str
    settings: dict[str, Any]  # what the search measures with: the journal's settings
    config: dict[str, Any]  # ``SearchConfig``'s fields, its limits as a dict
    space: dict[str, Any] = field(default_factory=dict)  # ``recommend.space.space``'s keywords
    measurer: dict[str, Any] = field(default_factory=dict)  # ``LoadGenMeasurer``'s keywords
    parts: str = DEFAULT_PARTS
    driver_host: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetJob:
        return cls(**data)

    def search_config(self) -> Any:
        from quantmark.recommend.candidates import SearchConfig

        return SearchConfig(**{**self.config, "limits": Limits(**self.config["limits"])})


def real_parts(job: FleetJob, folder: Path) -> tuple[list[Candidate], Measurer]:
    """This node's space (the SUTs that run here) and its LoadGen measurer under ``folder``."""
    from quantmark.recommend.measure import LoadGenMeasurer
    from quantmark.recommend.space import space

    return (space(job.scenario, job.model, **job.space),
            LoadGenMeasurer(job.scenario, job.model, folder, **job.measurer))


def load_parts(name: str) -> Parts:
    """The ``module:function`` that builds the space and the measurer."""
    module, _, function = name.partition(":")
    try:
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load the search's parts {name!r} on this node ({exc}); "
                        "install the same quantmark as the driver's") from None


def rebase(data: Any, old: str, new: str) -> Any:
    """``data`` (plain JSON) with every path in folder ``old`` moved to folder ``new``."""
    old, new = str(Path(old)), str(Path(new))
    if isinstance(data, str):
        if data == old or data.startswith(old + os.sep):
            return new + data[len(old):]
        return data
    if isinstance(data, dict):
        return {key: rebase(value, old, new) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [rebase(value, old, new) for value in data]
    return data


def work_folder(node: str, job: FleetJob, driver_folder: str) -> Path:
    """This node's folder for the driver's ``driver_folder``: the same one again when a cut-off
    search resumes here (its runs keep their numbers), another for another search."""
    key = json.dumps({"node": node, "driver": [job.driver_host, driver_folder],
                      "settings": job.settings}, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"{WORK_PREFIX}{digest}"


def hold_places(folder: Path, evidence: list[Evidence]) -> list[Path]:
    """An empty folder for each resumed run in ``folder`` that is not here: the measurer gives
    a new run the first number whose folder does not exist."""
    held = []
    for item in evidence:
        for run in item.runs:
            path = Path(run.run_dir) if run.run_dir else None
            if path is not None and path.is_relative_to(folder) and not path.exists():
                path.mkdir(parents=True)
                held.append(path)
    return held


def release_places(folder: Path, held: list[Path]) -> None:
    """Remove the empty folders ``hold_places`` made (and parents they alone filled)."""
    for path in held:
        while path != folder and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
            path = path.parent


class StreamedJournal(Journal):
    """The node's journal: each save is sent to the driver, which writes ``evidence.json``."""

    def __init__(self, folder: Path, settings: dict[str, Any], emit: Emit) -> None:
        super().__init__(folder, settings)
        self.emit = emit

    def save(self, evidence: list[Evidence]) -> None:
        self.emit({"kind": "evidence", "evidence": [item.to_dict() for item in evidence]})


def search_on_node(job: dict[str, Any], resume: dict[str, Any], driver_version: str
                   ) -> Iterator[dict[str, Any]]:
    """The Ray task: ``node_messages`` under this node's name (its runs' fingerprint names it)."""
    from quantmark.sweep.fleet.task import this_node

    node = this_node()
    os.environ[NODE_ENV] = node
    yield from node_messages(node, job, resume, driver_version)


def node_messages(node: str, job: dict[str, Any], resume: dict[str, Any],
                  driver_version: str) -> Iterator[dict[str, Any]]:
    """The search of ``job`` on this node, resumed from ``resume`` (``root``: the driver's
    folder, ``evidence``: what it saved), as the messages the driver reads."""
    if driver_version != VERSION:
        yield {"kind": "refused", "message": f"node {node} runs quantmark {VERSION}, the driver "
                                             f"{driver_version}: install the same version on both"}
        return
    the_job = FleetJob.from_dict(job)
    folder = work_folder(node, the_job, resume["root"])
    outbox: queue.Queue[Any] = queue.Queue()
    worker = threading.Thread(target=_search_into, args=(the_job, folder, resume, outbox.put),
                              name="recommend-search", daemon=True)
    worker.start()
    answered = False
    while (message := outbox.get()) is not None:
        if isinstance(message, BaseException):
            raise message
        answered = answered or message["kind"] == "answer"
        yield message
    worker.join()
    if answered:  # the runs travelled with the answer
        shutil.rmtree(folder, ignore_errors=True)


def _search_into(job: FleetJob, folder: Path, resume: dict[str, Any], emit: Emit) -> None:
    """``run_search``, its one-line error a message and any other exception handed over
    (raised again by the generator: the driver explains it); then the end (None)."""
    try:
        run_search(job, folder, resume, emit)
    except UserError as exc:
        emit({"kind": "error", "message": str(exc)})
    except BaseException as exc:  # noqa: BLE001 - raised again in the task's own frame
        emit(exc)
    finally:
        emit(None)


def run_search(job: FleetJob, folder: Path, resume: dict[str, Any], emit: Emit) -> None:
    """The local search of ``run.py recommend``, in ``folder``, its journal streamed."""
    from quantmark.recommend import answer
    from quantmark.recommend.search import search

    folder.mkdir(parents=True, exist_ok=True)
    config = job.search_config()
    candidates, inner = load_parts(job.parts)(job, folder)
    if not candidates:
        raise UserError("no candidate can run on this node for these flags (see python run.py "
                        "--list-suts there); widen --suts, --batch-sizes or --settings")
    known = rebase(resume.get("evidence") or [], resume["root"], str(folder))
    resumed = resumable([Evidence.from_dict(item) for item in known], candidates)
    held = hold_places(folder, resumed)
    measurer = RecordingMeasurer(inner, StreamedJournal(folder, job.settings, emit), resumed)
    emit({"kind": "started", "root": str(folder), "candidates": len(candidates),
          "resumed": len(resumed), "resumed_runs": measurer.measured_runs})

    def progress(done: int, planned: int, spent_s: float, eta_s: float, message: str) -> None:
        emit({"kind": "progress", "done": done, "planned": planned, "spent_s": spent_s,
              "eta_s": eta_s, "message": message})

    started = time.time()
    outcome = search(candidates, measurer, config, on_progress=progress, resume=resumed,
                     checkpoint=measurer.checkpoint)
    measurer.journal.save(outcome.evidence or list(measurer.evidence.values()))
    record = answer.build_record(outcome, model=job.model, scenario=job.scenario, commands={},
                                 config=job.settings, started=started, min_runs=config.min_runs)
    release_places(folder, held)
    emit({"kind": "answer", "root": str(folder), "record": record.to_dict(),
          "archive": pack(folder), "measured_runs": measurer.runs,
          "measured_accuracies": measurer.accuracies})
