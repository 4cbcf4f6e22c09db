"""``run.py recommend --cluster``: every quantmark node of a Ray cluster searches for itself
and gets its own answer, since speeds are a node's own.

- **One search per node, alone there.** Each alive node that ``run.py node`` started (it
  carries the ``quantmark_slot`` resource) runs the whole search (``cluster_node``) with the same
  flags and budget, as one Ray task pinned to it (its ``quantmark_node:<name>`` resource) and
  holding its slot: nothing else of quantmark (a sweep's cell) runs beside it there.
- **Its folder here.** ``<output>/<node's system id>-recommend/<model>/recommend-<scenario>/``:
  the local search's layout, named after the node. Its ``evidence.json`` is written
  (atomically) each time the node streams its evidence, after every measurement; its runs
  arrive as one archive with its answer, then ``recommendation.json`` and ``pareto.png``.
- **Resumes like a sweep.** The same command after Ctrl-C, or after a node was lost, sends
  each node its saved evidence and its search goes on from there (``search(resume=...)``); a
  node whose answer is kept (for this budget or a larger one) is shown, not searched again.
  A node lost mid-search keeps its evidence, said in one line; the others finish.

Exit 0 when every node answered (a winner, a tie, or cannot tell apart); 1 when a node found
that no candidate meets the limits, or was lost, or failed; 2 when a node refused the flags.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from quantmark.ground.errors import UserError
from quantmark.ground.layout import system_id
from quantmark.ground.locks import sole_writer
from quantmark.ground.records import RecommendationRecord, UnreadableRecord, load_record
from quantmark.ground.version import VERSION
from quantmark.recommend import answer
from quantmark.recommend.candidates import Candidate, Evidence
from quantmark.recommend.cluster_node import FleetJob, rebase, search_on_node
from quantmark.recommend.journal import Journal
from quantmark.report import console_tables as tables
from quantmark.report.console_tables import table
from quantmark.report.recommend_section import FOLDER_PREFIX, RECOMMENDATION
from quantmark.sweep.fleet.dispatch import announce
from quantmark.sweep.fleet.task import unpack
from quantmark.sweep.placement import SLOT, node_name, resource

log = logging.getLogger(__name__)

#: names the factory of the nodes' space and measurer instead (``module:function``): the
#: tests' stand-ins with planted speeds; a node imports it itself
PARTS_ENV = "QUANTMARK_RECOMMEND_PARTS"
LOCK = ".recommend.lock"  # the command's: one search writes a folder at a time
POLL_S = 1.0
#: a node's outcome -> the command's exit code (the worst of the nodes' is returned)
EXIT = {"winner": 0, "tied": 0, "undecided": 0, "infeasible": 1, "lost": 1, "failed": 1,
        "refused": 1, "error": 2}

#: ``reproduce(candidate, run_dirs)``: the commands that rerun a shown candidate
Reproduce = Callable[[Candidate, list[str]], dict[str, str | None]]
#: ``show(node, progress message)``
Show = Callable[[str, dict[str, Any]], None]


def check_address(address: str) -> str:
    """``--cluster``'s value, checked before Ray is imported (the sweep's forms)."""
    address = address.strip()
    if address != "auto" and not re.fullmatch(r"(ray://)?[^\s:/]+:\d+", address):
        raise UserError(f"--cluster {address}: use auto (the cluster this machine joined), "
                        "HOST:PORT (its head) or ray://HOST:PORT (Ray Client)")
    return address


def recommend_on_fleet(job: FleetJob, console: Console, reproduce: Reproduce) -> int:
    """Every node's search on the cluster ``job.cluster``; the command's exit code."""
    from quantmark.sweep.fleet.dispatch import connect

    job = replace(job, parts=os.environ.get(PARTS_ENV) or job.parts,
                  driver_host=socket.gethostname())
    ray = connect(job.cluster)
    try:
        return Fleet(ray, job, console, reproduce).run()
    finally:
        ray.shutdown()


def node_folder(job: FleetJob, node: str) -> Path:
    """Where ``node``'s search is written here: the local layout, named after the node."""
    return Path(job.output) / system_id("recommend", node) / job.model / (FOLDER_PREFIX
                                                                          + job.scenario)


class NodeSearch:
    """One node's search as the driver keeps it: its folder, its evidence as it arrives, its
    answer. No Ray here: ``Fleet`` hands over the node's messages."""

    def __init__(self, node: str, job: FleetJob, console: Console,
                 reproduce: Reproduce) -> None:
        self.node, self.job, self.console, self.reproduce = node, job, console, reproduce
        self.folder = node_folder(job, node)
        self.journal = Journal(self.folder, job.settings)
        self.remote = ""  # the node's own folder: the paths its messages carry
        self.runs = 0  # runs in the evidence saved here
        self.outcome = ""  # a verdict, or lost / failed / refused / error
        self.message = ""
        self.record: RecommendationRecord | None = None

    def resume(self) -> dict[str, Any]:
        """What the node resumes from: the evidence saved here (another search's is refused
        in one line, before any node starts)."""
        known = self.journal.load()
        self.runs = _runs(known)
        return {"root": str(self.folder), "evidence": [item.to_dict() for item in known]}

    def kept(self, budget_s: float) -> bool:
        """The node's answer is here already, searched with this budget or a larger one (a
        larger budget now continues its search, as a local rerun does)."""
        path = self.folder / RECOMMENDATION
        if not path.is_file():
            return False
        try:
            record = load_record(path, RecommendationRecord.KIND)
        except UnreadableRecord:
            return False
        assert isinstance(record, RecommendationRecord)
        if float(record.search.get("budget_s") or 0) + 1e-9 < budget_s:
            return False
        self.record, self.outcome = record, record.verdict
        self.console.print(f"node {escape(self.node)}: its answer is kept in "
                           f"{escape(str(path))}", soft_wrap=True)
        answer.show(self.console, record)
        return True

    def receive(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Keep one message of the node; a progress message is returned, to be shown."""
        kind = message.get("kind")
        if kind == "started":
            self.remote = message["root"]
            if message["resumed_runs"]:
                self.say(f"resuming: {message['resumed_runs']} runs of {message['resumed']} "
                         "candidates already measured")
        elif kind == "evidence":
            evidence = [Evidence.from_dict(item) for item in self._here(message["evidence"])]
            self.journal.save(evidence)
            self.runs = _runs(evidence)
        elif kind == "progress":
            return message
        elif kind == "answer":
            self._answer(message)
        elif kind in ("refused", "error"):
            self.end(kind, str(message["message"]))
        return None

    def _here(self, data: Any) -> Any:
        return rebase(data, self.remote, str(self.folder)) if self.remote else data

    def _answer(self, message: dict[str, Any]) -> None:
        """The node's runs into its folder, then its record (with the commands that rerun the
        answer, read from those runs), ``pareto.png``, and its screen."""
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(message["archive"]), mode="r:gz") as tar:
            files = [self.folder / member.name for member in tar.getmembers() if member.isfile()]
        unpack(message["archive"], self.folder, files)
        record = RecommendationRecord.from_dict(self._here(message["record"]),
                                                f"node {self.node}'s answer")
        shown = ([record.recommended] if record.recommended else
                 [c for c in record.candidates if c["key"] in record.tied])
        record.commands = {item["key"]: self.reproduce(Candidate.from_dict(item),
                                                       list(item.get("run_dirs") or []))
                           for item in shown}
        self.record = answer.write(self.folder, record)
        self.outcome = record.verdict
        self.say(f"answered ({message.get('measured_runs', 0)} runs and "
                 f"{message.get('measured_accuracies', 0)} accuracy runs measured now)")
        answer.show(self.console, self.record)

    def end(self, outcome: str, message: str) -> None:
        """The node ended without an answer: lost, failed, refused or a one-line error."""
        self.outcome, self.message = outcome, message
        self.say(message)

    def lost(self, why: str) -> None:
        self.end("lost", f"left the cluster mid-search ({why}): its evidence so far "
                         f"({self.runs} runs) is kept in {self.journal.path}; run the same "
                         "command to resume it")

    def say(self, line: str) -> None:
        self.console.print(f"node {escape(self.node)}: {escape(line)}", soft_wrap=True)

    def row(self) -> list[str]:
        """The summary table's row: node, answer, its figure."""
        record = self.record
        if record is None:
            return [self.node, f"{self.outcome or 'no answer'}: {self.message}", "-"]
        if record.recommended:
            figure = (record.recommended.get("objective") or {}).get("text", "-")
            return [self.node, record.recommended["key"], figure]
        if record.verdict == "infeasible":
            binds = f"{record.binding} binds; " if record.binding else ""
            return [self.node, f"none fits ({binds}closest: {record.closest or '-'})", "-"]
        said = "tied" if record.verdict == "tied" else "cannot tell apart"
        return [self.node, f"{said}: {', '.join(record.tied)}", "-"]


def _runs(evidence: list[Evidence]) -> int:
    return sum(len(item.runs) for item in evidence)


class Fleet:
    """Starts each node's search, reads their messages as they come, notices lost nodes."""

    def __init__(self, ray: Any, job: FleetJob, console: Console,
                 reproduce: Reproduce) -> None:
        self.ray, self.job, self.console, self.reproduce = ray, job, console, reproduce
        self.task = ray.remote(search_on_node)
        self.searches: dict[str, NodeSearch] = {}
        self.flying: dict[Any, str] = {}  # the node's generator -> the node

    def nodes(self) -> set[str]:
        """The alive quantmark nodes that run searches (they hold a slot)."""
        return {name for node in self.ray.nodes()
                if node.get("Alive") and SLOT in (node.get("Resources") or {})
                and (name := node_name(node["Resources"]))}

    def run(self) -> int:
        nodes = self.nodes()
        announce(nodes, self.job.cluster, self.console)
        budget_s = float(self.job.config["budget_s"])
        with ExitStack() as locks:
            resumes = {}
            for node in sorted(nodes):
                search = self.searches[node] = NodeSearch(node, self.job, self.console,
                                                          self.reproduce)
                search.folder.mkdir(parents=True, exist_ok=True)
                locks.enter_context(sole_writer(search.folder, LOCK, "search"))
                resumes[node] = search.resume()  # every folder checked before a node starts
            todo = [node for node in sorted(nodes) if not self.searches[node].kept(budget_s)]
            with progress_lines(self.console, todo) as show:
                for node in todo:
                    self.submit(node, resumes[node])
                self.follow(show)
        self.console.print(table("each node's answer", ["node", "answer", "figure"],
                                 [search.row() for search in self.searches.values()]))
        return max(EXIT.get(search.outcome, 1) for search in self.searches.values())

    def submit(self, node: str, resume: dict[str, Any]) -> None:
        needs = {SLOT: 1.0, resource("node", node): 1.0}
        # max_retries=0: a lost node's search resumes from its evidence when the user says so
        generator = self.task.options(num_cpus=0, max_retries=0, resources=needs,
                                      num_returns="streaming").remote(
            self.job.to_dict(), resume, VERSION)
        self.flying[generator] = node

    def follow(self, show: Show) -> None:
        """Read every node's messages until each has ended; Ctrl-C stops every node's search
        (what each measured is in its evidence.json)."""
        try:
            while self.flying:
                ready, _ = self.ray.wait(list(self.flying), num_returns=1, timeout=POLL_S)
                for generator in ready:
                    self.read(generator, show)
                self.notice_lost()
        except KeyboardInterrupt:
            for generator in self.flying:
                self.ray.cancel(generator, force=True)
            self.console.print(f"interrupted: what each node measured is kept in its "
                               f"evidence.json under {escape(self.job.output)}; run the same "
                               "command to resume", soft_wrap=True)
            raise

    def read(self, generator: Any, show: Show) -> None:
        """The node's next message, or its end: finished, failed or lost (an error after its
        answer arrived changes nothing: the answer is kept)."""
        from ray.exceptions import RayError, RayTaskError

        search = self.searches[self.flying[generator]]
        try:
            message = self.ray.get(next(generator))
        except (StopIteration, RayError) as exc:
            del self.flying[generator]
            if search.outcome:
                return
            if isinstance(exc, StopIteration):
                search.end("failed", "its search ended without an answer")
            elif isinstance(exc, RayTaskError):  # quantmark's own code raised on the node
                search.end("failed", f"its search raised: {_last_line(exc)}; what it measured "
                                     f"is kept in {search.journal.path}")
            else:  # the node or its worker died under the search
                search.lost(type(exc).__name__)
            return
        shown = search.receive(message)
        if shown is not None:
            show(search.node, shown)

    def notice_lost(self) -> None:
        """A node that left while its search waited for its slot (or before Ray says so)."""
        alive = self.nodes()
        for generator, node in list(self.flying.items()):
            if node not in alive:
                self.ray.cancel(generator, force=True)
                del self.flying[generator]
                if not self.searches[node].outcome:
                    self.searches[node].lost("its node is no longer alive")


def _last_line(exc: Exception) -> str:
    text = str(getattr(exc, "cause", None) or exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


@contextmanager
def progress_lines(console: Console, nodes: list[str]) -> Iterator[Show]:
    """Each node's search progress (its ``progress`` messages): a rich bar per node with its
    search's ETA on a terminal; elsewhere (CI, a log file) one flushed line per update."""
    if console.is_terminal and nodes:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("spent {task.fields[spent]} ETA {task.fields[eta]}"),
                      console=console) as bar:
            tasks = {node: bar.add_task(escape(node), total=None, spent="0:00:00", eta="?")
                     for node in nodes}

            def update(node: str, step: dict[str, Any]) -> None:
                bar.update(tasks[node], completed=step["done"],
                           total=max(step["planned"], step["done"]),
                           description=escape(f"{node}: {step['message']}"),
                           spent=tables.clock(step["spent_s"]), eta=tables.clock(step["eta_s"]))

            yield update
        return

    def line(node: str, step: dict[str, Any]) -> None:
        console.print(escape(f"[{node} {step['done']}/{step['planned']}, spent "
                             f"{tables.clock(step['spent_s'])}, ETA {tables.clock(step['eta_s'])}] "
                             f"{step['message']}"), soft_wrap=True)
        console.file.flush()

    yield line
