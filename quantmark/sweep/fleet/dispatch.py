"""The fleet sweep's driver: cells become Ray tasks placed by the resources they need.

- **Isolation.** Every cell takes its node's one ``quantmark_slot``: two cells never run at
  once on a node (a conversion or an accuracy run beside a timed cell disturbs it: BENCHMARKS.md at
  ab1032b, "Fleet sweeps on Ray").
- **Same-machine ratios.** A model's cells of one framework (an ensemble's with its members')
  form a group: its first cell goes wherever it fits, the rest follow it to that node, so
  every speedup against FP32 compares two runs of one machine.
- **A node lost mid-cell.** The attempt is recorded as interrupted and the cell runs again
  on a node that fits; a cell nothing fits any more is explained. Finished cells are in the
  manifest already, so nothing finished is lost.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from quantmark.ground.errors import UserError
from quantmark.ground.version import VERSION
from quantmark.sweep.cell import cell_dir, cell_log
from quantmark.sweep.fleet.node_groups import Groups
from quantmark.sweep.fleet.task import run_on_node, unpack
from quantmark.sweep.placement import describe, fits, node_name, parse_rule, resource
from quantmark.sweep.plan import Cell, SweepSpec

POLL_S = 1.0
CONNECT_TIMEOUT_S = 5.0
MAX_ATTEMPTS = 3  # a cell whose node is lost this many times is explained, not retried again
log = logging.getLogger(__name__)


@dataclass
class Attempt:
    cell: Cell
    needs: dict[str, float]  # what the cell itself requires
    pin: str | None  # the group's node, when it follows one
    number: int
    alive: set[str] = field(default_factory=set)  # the nodes alive when it was submitted

    @property
    def requested(self) -> dict[str, float]:
        return {**self.needs, **({resource("node", self.pin): 1.0} if self.pin else {})}


def dispatch(spec: SweepSpec, root: Path, todo: list[Cell], entries: dict[str, Any],
             record: Callable[..., None], console: Console) -> int:
    """Run ``todo`` on the Ray cluster ``spec.cluster``; return how many cells ran."""
    ray = connect(spec.cluster)
    try:
        return Fleet(ray, spec, root, entries, record, console).run(todo)
    finally:
        ray.shutdown()


def announce(nodes: Any, cluster: str, console: Console) -> None:
    """Print the fleet's quantmark nodes; none is one line saying how to start them."""
    if not nodes:
        raise UserError(f"the Ray cluster at {cluster} has no quantmark node; start one on "
                        "each machine with: python run.py node --address HEAD:6379")
    console.print("fleet: " + ", ".join(escape(n) for n in sorted(nodes)))


def connect(address: str) -> Any:
    """``ray`` connected to the cluster, or a one-line error saying how to start one. A head
    address is knocked on first: Ray itself waits minutes for a GCS that is not there."""
    try:
        import ray
    except ImportError:
        raise UserError("--cluster needs Ray: pip install -e '.[ray]'") from None
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise UserError(f"nothing answers at {host}:{port} ({exc.strerror or exc}); start "
                            "the cluster's head there with python run.py node --head, or fix "
                            "--cluster") from None
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = lines[-1] if lines else type(exc).__name__  # a server's traceback ends with it
        raise UserError(f"cannot join a Ray cluster at {address} ({why}); start its head "
                        "with python run.py node --head, or try again once it is up") from None
    return ray


class Fleet:
    """Submits cells as they become ready, collects them as they finish."""

    def __init__(self, ray: Any, spec: SweepSpec, root: Path, entries: dict[str, Any],
                 record: Callable[..., None], console: Console) -> None:
        self.ray, self.spec, self.root, self.record, self.console = (
            ray, spec, root, record, console)
        self.rules = [parse_rule(text) for text in spec.placement]
        self.groups = Groups(self.rules)
        self.home: dict[Any, str] = {}  # group -> the node its cells run on
        self.entries = entries
        self.leading: set[Any] = set()  # groups whose first cell is running, node unknown
        self.flying: dict[Any, Attempt] = {}
        self.names: dict[str, str] = {}  # Ray node id -> quantmark name, dead nodes' too
        self.task = ray.remote(run_on_node)
        self.ran = 0

    def run(self, todo: list[Cell]) -> int:
        nodes = self.nodes()
        announce(nodes, self.spec.cluster, self.console)
        done = [Cell.from_dict(entry) for entry in self.entries.values()]
        self.groups.learn(done + todo)  # every ensemble joined to its members first
        for cell, entry in zip(done, self.entries.values(), strict=True):
            if entry.get("node") and entry.get("status") == "ok":  # resumed: groups stay put
                self.home[self.groups.key(cell)] = entry["node"]
        queue = deque(Attempt(c, self.groups.needs(c), None, 1) for c in todo)
        try:
            while queue or self.flying:
                nodes = self.nodes()
                self.submit_ready(queue, nodes)
                if self.flying:
                    ready, _ = self.ray.wait(list(self.flying), num_returns=1, timeout=POLL_S)
                    for ref in ready:
                        self.collect(ref, self.flying.pop(ref), queue)
                self.drop_stranded(queue, self.nodes())
        except KeyboardInterrupt:
            for ref in self.flying:
                self.ray.cancel(ref, force=True)
            raise
        return self.ran

    def nodes(self) -> dict[str, dict[str, float]]:
        """The alive quantmark nodes: name -> the resources each offers in all."""
        alive = {}
        for node in self.ray.nodes():
            name = node_name(node.get("Resources") or {})
            if name:
                self.names[node["NodeID"]] = name
            if node.get("Alive") and name:
                alive[name] = node["Resources"]
        return alive

    def submit_ready(self, queue: deque[Attempt], nodes: dict[str, dict[str, float]]) -> None:
        """Submit every queued cell that can go now; a cell no node fits is explained."""
        waiting: deque[Attempt] = deque()
        while queue:
            attempt = queue.popleft()
            group = self.groups.key(attempt.cell)
            home = self.home.get(group)
            if home and home not in nodes:
                self.console.print(f"node {escape(home)} left: the next cell of its group "
                                   "goes wherever it fits")
                del self.home[group]
                home = None
            if not any(fits(attempt.needs, offered) for offered in nodes.values()):
                self.explain(attempt, "unavailable", f"no node of the cluster has "
                             f"{describe(attempt.needs)} (nodes: {', '.join(sorted(nodes))}); "
                             "start one with python run.py node")
            elif home and fits(attempt.needs, nodes[home]):
                self.submit(attempt, home, nodes)
            elif group in self.leading:
                waiting.append(attempt)  # follows its group's first cell, once that is placed
            else:
                self.leading.add(group)
                self.submit(attempt, None, nodes)
        queue.extend(waiting)

    def submit(self, attempt: Attempt, pin: str | None,
               nodes: dict[str, dict[str, float]]) -> None:
        attempt.pin, attempt.alive = pin, set(nodes)
        # max_retries=0: a lost node's cell is retried here, recorded as interrupted first
        ref = self.task.options(num_cpus=0, max_retries=0, resources=_custom(attempt.requested),
                                num_gpus=attempt.requested.get("GPU", 0)).remote(
            vars(self.spec), attempt.cell.to_dict(), VERSION)
        self.flying[ref] = attempt

    def collect(self, ref: Any, attempt: Attempt, queue: deque[Attempt]) -> None:
        """A finished task: its results tree into the sweep folder and its entry recorded;
        a task whose node was lost runs again (up to MAX_ATTEMPTS)."""
        from ray.exceptions import RayError, RayTaskError

        group = self.groups.key(attempt.cell)
        self.leading.discard(group)
        try:
            result = self.ray.get(ref)
        except RayTaskError as exc:  # quantmark's own code raised on the node: a bug, explained
            self.explain(attempt, "failed", f"the node's task raised: {_first_line(exc)}")
            return
        except RayError as exc:  # the node or its worker died under the cell
            self.lost(attempt, exc, queue)
            return
        unpack(result["archive"], self.root,
               [cell_dir(self.root, attempt.cell), cell_log(self.root, attempt.cell)])
        entry = {**result["entry"], "attempts": attempt.number}
        if entry["status"] not in ("unavailable", "user_error"):
            self.ran += 1
            self.home.setdefault(group, entry["node"])
        self.record(attempt.cell, entry)

    def lost(self, attempt: Attempt, exc: Exception, queue: deque[Attempt]) -> None:
        named = {name for node_id, name in self.names.items() if node_id in str(exc)}
        gone = sorted(named or attempt.alive - set(self.nodes()))
        where = f"node {', '.join(gone)} left the cluster" if gone else "its Ray worker died"
        message = f"{where} mid-cell ({type(exc).__name__})"
        if attempt.number >= MAX_ATTEMPTS:
            self.explain(attempt, "interrupted", f"{message}, {attempt.number} times; run the "
                         "same command to try again")
            return
        entry = {**attempt.cell.to_dict(), "status": "interrupted", "message": message,
                 "attempts": attempt.number, "node": gone[0] if len(gone) == 1 else None}
        self.record(attempt.cell, entry, final=False)
        queue.appendleft(Attempt(attempt.cell, attempt.needs, None, attempt.number + 1))

    def drop_stranded(self, queue: deque[Attempt], nodes: dict[str, dict[str, float]]) -> None:
        """Cells waiting for a node that left: a group's cell goes back to the queue (it
        will follow a new node), a cell nothing fits any more is explained."""
        for ref, attempt in list(self.flying.items()):
            if any(fits(attempt.requested, offered) for offered in nodes.values()):
                continue
            self.ray.cancel(ref, force=True)
            del self.flying[ref]
            self.leading.discard(self.groups.key(attempt.cell))
            queue.appendleft(Attempt(attempt.cell, attempt.needs, None, attempt.number))

    def explain(self, attempt: Attempt, status: str, message: str) -> None:
        self.record(attempt.cell, {**attempt.cell.to_dict(), "status": status,
                                   "message": message, "attempts": attempt.number})


def _custom(needs: dict[str, float]) -> dict[str, float]:
    """Ray's ``resources=`` takes custom resources only; GPU goes in ``num_gpus``."""
    return {key: amount for key, amount in needs.items() if key != "GPU"}


def _first_line(exc: Exception) -> str:
    text = str(getattr(exc, "cause", None) or exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__
