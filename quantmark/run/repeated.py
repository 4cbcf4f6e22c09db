"""Repeat sets: one test run N times, each in a fresh process, interleaved with its peers.

One run is one draw of a noisy machine. A figure is the median over a set of repeats with its
interval (``quantmark.report.stats``). SUTs that are compared run interleaved (A B A B ...),
never each one's repeats back to back, so that drift of the machine hits both sides alike.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import UserError
from quantmark.ground.layout import run_dir, system_id
from quantmark.ground.locks import FileLock, LockHeld
from quantmark.report.stats import Interval, figure_interval
from quantmark.report.stopping import LOOKS_IN_A_ROW, look
from quantmark.run.launch import LaunchResult
from quantmark.run.validity import left_out_why, repeat_index

log = logging.getLogger(__name__)

MIN_STABLE_REPEATS = 3  # an interval from fewer runs says little about the noise
DEFAULT_MAX_REPEATS = 10


@dataclass
class RepeatSet:
    """The runs of one test in one set, with the interval of their official metric. Figures
    use the VALID runs only; the others are ``left_out`` and named (``quantmark.run.validity``)."""

    config: RunConfig
    results: list[LaunchResult] = field(default_factory=list)

    def valid(self) -> list[LaunchResult]:
        return [r for r in self.results if left_out_why(r.results) is None]

    def left_out(self) -> list[tuple[LaunchResult, str]]:
        """Each run a figure may not use, with why."""
        return [(r, why) for r in self.results if (why := left_out_why(r.results))]

    def metric_values(self) -> list[float]:
        """The official metric of each VALID run, in run order."""
        return [float(r.results["summary"]["metric_value"]) for r in self.valid()]

    def by_repeat(self) -> dict[int, float]:
        """The VALID runs' metric by repeat index: what pairs with another set's runs."""
        return {index: float(r.results["summary"]["metric_value"]) for r in self.valid()
                if (index := repeat_index(r.results)) is not None}

    def interval(self) -> Interval | None:
        """The median and 95% interval of the VALID runs; under ``--until-stable`` the
        stopping rule's interval (``quantmark.report.stopping``), corrected for the stop."""
        values = self.metric_values()
        if values and self.config.until_stable is not None:
            return look(values, self.config.until_stable, self.config.repeats).interval
        return figure_interval(values) if values else None

    def left_out_note(self) -> str:
        """``k of n runs INVALID, left out`` (or incomplete), "" when every run counts."""
        left = self.left_out()
        if not left:
            return ""
        kinds = sorted({why.split(":", 1)[0] for _, why in left})
        return f"{len(left)} of {len(self.results)} runs {' or '.join(kinds)}, left out"

    @property
    def latency(self) -> bool:
        return any((r.results.get("summary") or {}).get("metric_unit") == "ns"
                   for r in self.results)

    def disturbed(self) -> list[LaunchResult]:
        return [r for r in self.results if (r.results.get("interference") or {}).get("disturbed")]


def check_repeats(repeats: int, until_stable: float | None, max_repeats: int) -> None:
    """One line for a count or target that makes no sense."""
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: give a whole number >= 1")
    if until_stable is not None:
        if not 0 < until_stable < 100:
            raise UserError(f"--until-stable {until_stable}: give the interval's half-width in "
                            "percent of the figure, e.g. 2 (above 0, below 100)")
        if max_repeats < MIN_STABLE_REPEATS:
            raise UserError(f"--max-repeats {max_repeats}: --until-stable needs at least "
                            f"{MIN_STABLE_REPEATS}")


def interleaved(configs: list[RunConfig], repeats: int, start: int = 1,
                set_ids: list[str] | None = None) -> Iterator[RunConfig]:
    """Repeat k of every config before repeat k+1 of any: A1 B1 A2 B2 ... Each config gets its
    own set id, or keeps its ``set_ids`` entry (a set that goes on, from repeat ``start``);
    every run is stamped with its index and the set's size."""
    sets = list(set_ids) if set_ids else [uuid.uuid4().hex[:12] for _ in configs]
    for index in range(start, repeats + 1):
        for config, set_id in zip(configs, sets, strict=True):
            yield replace(config, repeat=index, repeats=repeats, repeat_set=set_id)


def run_set(config: RunConfig, run: Callable[[RunConfig], LaunchResult], repeats: int,
            until_stable: float | None = None,
            max_repeats: int = DEFAULT_MAX_REPEATS) -> RepeatSet:
    """Run ``config`` ``repeats`` times; with ``until_stable`` (percent), keep going until
    the stopping rule of ``quantmark.report.stopping`` says stable (two looks in a row within
    the target) or ``max_repeats`` runs were made."""
    check_repeats(repeats, until_stable, max_repeats)
    planned = max(repeats, MIN_STABLE_REPEATS) if until_stable is not None else repeats
    cap = max(max_repeats, planned) if until_stable is not None else repeats
    config = replace(config, repeats=planned, until_stable=until_stable)
    done = RepeatSet(config)
    set_id = uuid.uuid4().hex[:12]
    for index in range(1, cap + 1):
        done.results.append(run(replace(config, repeat=index, repeat_set=set_id)))
        if index < planned:
            continue
        if until_stable is None:
            break
        now = look(done.metric_values(), until_stable, planned)
        if now.stable:
            break
        if index < cap:
            log.info("interval half-width %s after %d runs; target %.3g%% on %d looks in a "
                     "row: running another", "unknown" if now.width_pct is None else
                     f"{now.width_pct:.2f}%", index, until_stable, LOOKS_IN_A_ROW)
    remove_stale(config, len(done.results))
    return done


def remove_stale(config: RunConfig, kept: int) -> list[Path]:
    """Remove ``run_k`` (k > kept) of the config's performance folder: runs of an older, larger
    set, which would otherwise be read as repeats of this one. A run folder another process
    holds is left alone."""
    first = run_dir(config.output, config.system_id or system_id(config.sut), config.model,
                    config.scenario, "performance")
    removed = []
    for folder in sorted(first.parent.glob("run_*")):
        suffix = folder.name.removeprefix("run_")
        if not suffix.isdigit() or int(suffix) <= kept or not folder.is_dir():
            continue
        try:
            lock = FileLock(folder.parent / f".{folder.name}.lock").acquire()
        except LockHeld:
            continue
        try:
            shutil.rmtree(folder)
            removed.append(folder)
        finally:
            lock.release()
    if removed:
        log.info("removed %d run folder(s) of an older repeat set: %s", len(removed),
                 ", ".join(p.name for p in removed))
    return removed

