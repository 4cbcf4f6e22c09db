"""Run a sweep: every cell in its own process, resumable, one manifest.

``DIR/sweep.json`` records the settings and every cell's outcome; it is rewritten atomically
after each cell, so Ctrl-C or a crash loses nothing finished, and running the same command
again skips finished cells that measured what it would: the same dataset, model file and
settings files by content, on the same hardware, their files as they left them
(``quantmark.sweep.resume``). A cell that cannot run (SUT unavailable here, a failure, a
timeout) becomes an explained entry, never the end of the sweep. Each cell's LoadGen results
tree is ``DIR/runs/<model>/<sut>/<scenario>-b<batch>-r<repeat>/`` (``.../accuracy/`` for the
accuracy run) and its console output ``DIR/logs/<same>.log``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from quantmark.ground.errors import UserError
from quantmark.ground.locks import sole_writer
from quantmark.ground.records import SWEEP_MANIFEST, SweepManifest, load_manifest, write_record
from quantmark.store.recording import record as record_in_store
from quantmark.sweep.cell import cell_availability, run_cell
from quantmark.sweep.plan import Cell, SweepSpec, cells
from quantmark.sweep.resume import PATH_SETTINGS, Inputs, decide, grouped, sealed, set_aside

log = logging.getLogger(__name__)

MANIFEST = SWEEP_MANIFEST
LOCK = ".sweep.lock"
# Outcomes that count as finished: a rerun skips them. "unavailable" is checked again (the
# framework may have been installed since); "interrupted" cells rerun.
FINISHED = ("ok", "failed", "timeout", "crashed", "user_error")


@dataclass
class SweepOutcome:
    root: Path
    counts: dict[str, int]
    ran: int


def read_manifest(root: Path) -> SweepManifest | None:
    """The sweep's manifest, or None when the folder holds no sweep yet; one this quantmark
    cannot read (not JSON, a newer schema) is a one-line error."""
    return load_manifest(root)


def run_sweep(spec: SweepSpec, *, retry_failed: bool = False,
              console: Console | None = None) -> SweepOutcome:
    """Run every unfinished cell of ``spec`` (here, or on the Ray cluster ``spec.cluster``
    names); return how the cells ended. A finished cell is kept only when it measured what
    this sweep would (``quantmark.sweep.resume``)."""
    console = console or Console()
    root = Path(spec.output)
    root.mkdir(parents=True, exist_ok=True)
    plan = cells(spec)
    inputs = Inputs(spec)
    with sole_writer(root, LOCK, "sweep"):
        manifest = _open_manifest(root, spec)
        entries: dict[str, Any] = manifest.cells
        todo = _resume(root, spec, plan, manifest, inputs,
                       ("ok",) if retry_failed else FINISHED, console)
        for cell in todo:  # every dataset and file hashed before the first cell runs
            inputs.of(cell)
        with _progress(console, len(plan), len(plan) - len(todo)) as advance:

            def record(cell: Cell, entry: dict[str, Any], final: bool = True) -> None:
                """Keep a cell's outcome (atomically, at once) with what it measured, sealed;
                ``final=False`` for an attempt that will run again (a node lost mid-cell)."""
                entries[cell.id] = sealed(root, {**entry, "finished_at": time.time(),
                                                 "inputs": inputs.of(cell)})
                write_record(root / MANIFEST, manifest)
                if final and entry.get("run_dir"):
                    record_in_store(root / entry["run_dir"])
                if final:
                    advance(cell.id, _line(cell.id, entry))
                else:
                    console.print(_line(cell.id, entry) + " (running it again)")

            try:
                if spec.cluster:
                    from quantmark.sweep.fleet.dispatch import dispatch

                    ran = dispatch(spec, root, todo, entries, record, console)
                else:
                    ran = _run_here(root, spec, todo, record, advance)
            except KeyboardInterrupt:
                console.print(f"interrupted: finished cells are kept in "
                              f"{escape(str(root / MANIFEST))}; run the same command to resume")
                raise
    counts = Counter(entries[cell.id]["status"] for cell in plan)
    return SweepOutcome(root, dict(counts), ran)


def _resume(root: Path, spec: SweepSpec, plan: list[Cell], manifest: SweepManifest,
            inputs: Inputs, done: tuple[str, ...], console: Console) -> list[Cell]:
    """The cells to run: each finished one is kept only when its inputs are today's and its
    files as it left them; one line says which run again and why, one warning which were
    damaged (their folders moved aside). Finished results of other inputs: a one-line
    refusal (``resume.decide``)."""
    found = decide(root, spec, plan, manifest.cells, manifest.settings, inputs, done)
    manifest.settings = spec.measuring_settings()  # today's paths, for people
    for cell_id, why in found.damaged.items():
        entry = manifest.cells[cell_id]
        aside = set_aside(root, entry)
        kept = f"; kept in {aside}" if aside else ""
        manifest.cells[cell_id] = {**entry, "status": "damaged", "message": why + kept}
    write_record(root / MANIFEST, manifest)
    if found.damaged:
        log.warning("%d finished cell(s) of %s cannot be trusted and run again (their folders "
                    "moved aside): %s", len(found.damaged), root, grouped(found.damaged))
    if found.kept:
        console.print(f"resuming {escape(str(root))}: {found.kept} of {len(plan)} cells "
                      "already finished")
    if found.rerun:
        console.print(f"re-running {len(found.rerun)} finished cell(s) measured with other "
                      f"inputs: {escape(grouped(found.rerun))}", soft_wrap=True)
    return found.todo


def _open_manifest(root: Path, spec: SweepSpec) -> SweepManifest:
    """The folder's manifest (a new one for a new sweep); a sweep measured with other settings
    is a one-line error rather than a mix of two measurements. Settings that name a file or a
    dataset are compared by content, cell by cell (``resume.decide``), not here."""
    manifest = read_manifest(root) or SweepManifest(settings=spec.measuring_settings())
    # a setting an older manifest lacks was measured at its default (workers, model_path)
    defaults = SweepSpec(models=[], suts=[]).measuring_settings()
    manifest.settings = {**defaults, **manifest.settings}
    now = spec.measuring_settings()
    changed = sorted(k for k, v in now.items()
                     if k not in PATH_SETTINGS and manifest.settings.get(k) != v)
    if changed:
        raise UserError(f"{root} holds a sweep measured with other settings "
                        f"({', '.join(changed)}); keep them to resume, or use a new --output")
    manifest.spec = dict(vars(spec))
    return manifest


def _run_here(root: Path, spec: SweepSpec, todo: list[Cell], record: Callable[..., None],
              advance: Callable[[str, str | None], None]) -> int:
    """The cells one after another on this machine; a SUT this machine lacks is explained."""
    ran = 0
    for cell in todo:
        ok, reason = cell_availability(cell)
        if not ok:
            record(cell, {**cell.to_dict(), "status": "unavailable", "message": reason})
            continue
        advance(cell.id, None)
        record(cell, run_cell(root, spec, cell))
        ran += 1
    return ran


@contextmanager
def _progress(console: Console, total: int, completed: int) -> Iterator[Any]:
    """A rich progress bar with ETA on a terminal; elsewhere (CI, a log file) one flushed line
    per cell with its own ETA: the average cell so far times the cells left."""
    if console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                      console=console) as bar:
            task = bar.add_task("sweep", total=total, completed=completed)

            def advance(cell_id: str, line: str | None) -> None:
                if line is None:
                    bar.update(task, description=escape(cell_id))
                else:
                    bar.advance(task)
                    console.print(line)

            yield advance
        return
    started, done = time.monotonic(), [completed]

    def advance_plain(cell_id: str, line: str | None) -> None:
        if line is None:
            return
        done[0] += 1
        ran = done[0] - completed
        left = (time.monotonic() - started) / ran * (total - done[0])
        console.print(f"[{done[0]}/{total}, ETA {time.strftime('%H:%M:%S', time.gmtime(left))}]"
                      f" {line}")
        console.file.flush()

    yield advance_plain


def _line(cell_id: str, entry: dict[str, Any]) -> str:
    where = f" on {escape(entry['node'])}" if entry.get("node") else ""
    if entry["status"] == "ok":
        line = f"[green]ok[/] {escape(cell_id)}{where} ({entry.get('wall_s', 0):.0f} s)"
        if entry.get("disturbed"):
            line += (f" [bold red]DISTURBED[/] ({escape('; '.join(entry['disturbed_why']))})")
        return line
    return (f"[red]{entry['status']}[/] {escape(cell_id)}{where}: "
            f"{escape(entry.get('message', ''))}")
