"""Settings staged behind their SUT: the other batches, thread counts and options of a SUT
race only once its base candidate is known to be near the leader.

74 Offline candidates measured once each are ~25 minutes on 2 cores, most of them settings of
SUTs that are several times slower than the best whatever their settings. So each SUT has one
*base* candidate (the scenario's base batch, ``candidates.BASE_BATCH``, else the SUT's first
batch; the first thread count and the first value of each option: the first such candidate in
the space's order), and its other candidates (its *variants*) are held, unmeasured, until the
base has an interval that may judge it (``judging.may_drop``). Then:

* released: the base's interval, widened by ``settings_spread`` towards the better side (how
  much batch, threads and options may move one SUT's speed), still overlaps the leader's;
* dropped unmeasured, each with a ``dropped`` reason naming the assumption: it does not.

The base dropped for another reason (a limit, no VALID run) releases its variants: their
settings may change that (an artifact's accuracy is shared, and drops them on its own). With
no leader to judge by, the held variants are released after round ``min_runs``, or at once
when nothing else is left to measure. Held is derived from the evidence, never saved: a
variant with runs was released; a resumed search re-derives the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from quantmark.recommend import judging
from quantmark.recommend.candidates import Candidate, Evidence
from quantmark.report.stats import Interval

if TYPE_CHECKING:
    from quantmark.recommend.candidates import SearchConfig

#: the start of a ``dropped`` reason of a variant held behind a base too far behind
NOT_MEASURED = "not measured: its base"


def bases(candidates: Sequence[Candidate], base_batch: int | None) -> dict[str, Candidate]:
    """Each SUT's base candidate (see the module's docstring)."""
    by_sut: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        by_sut.setdefault(candidate.sut, []).append(candidate)
    found = {}
    for sut, own in by_sut.items():
        batches = [c.batch_size for c in own]
        batch = base_batch if base_batch in batches else batches[0]
        found[sut] = next(c for c in own if c.batch_size == batch)
    return found


class Staging:
    """Which variants are held behind their SUT's base, and the rule releasing them."""

    def __init__(self, evidence: Sequence[Evidence], config: SearchConfig) -> None:
        self.config = config
        self.base = bases([item.candidate for item in evidence], config.base_batch)
        # a SUT one of whose variants was measured was released (a resumed search)
        self.released = {item.candidate.sut for item in evidence
                         if item.runs and not self.is_base(item)}

    def is_base(self, item: Evidence) -> bool:
        return self.base[item.candidate.sut] == item.candidate

    def held(self, item: Evidence) -> bool:
        """Waiting, unmeasured, behind its SUT's base."""
        return (not item.dropped and not self.is_base(item)
                and item.candidate.sut not in self.released)

    def update(self, evidence: Sequence[Evidence], leader: Evidence | None, round_: int,
               nothing_else: bool) -> None:
        """Releases or drops the held variants of each SUT whose base can be judged;
        ``nothing_else``: no other candidate is left to measure."""
        waiting = {item.candidate.sut for item in evidence if self.held(item)}
        if not waiting:
            return
        by_key = {item.candidate.key: item for item in evidence}
        pools = judging.pools_of(evidence, self.config)
        for sut in sorted(waiting):
            base = by_key[self.base[sut].key]
            verdict = self._judge(base, leader, pools)
            if verdict is None and (nothing_else or round_ > self.config.min_runs):
                verdict = ""  # nothing to judge it by: measure its settings
            if verdict == "":
                self.released.add(sut)
            elif verdict is not None:
                for item in evidence:
                    if item.candidate.sut == sut and self.held(item):
                        item.dropped, item.dropped_round = verdict, round_

    def _judge(self, base: Evidence, leader: Evidence | None, pools: judging.Pools
               ) -> str | None:
        """"" to release the base's variants, a reason to drop them, None to wait."""
        config = self.config
        if base is leader:
            return ""
        ready = judging.may_drop(base, config.objective, config, pools)
        if not ready:
            return "" if base.dropped else None
        if leader is None:
            return None
        own = judging.figure(base, config.objective, config, pools)
        best = judging.figure(leader, config.objective, config, pools)
        if own is None or best is None or own.low is None or own.high is None:
            return ""
        spread = config.settings_spread
        widened = Interval(own.point, own.low / spread, own.high * spread, own.n, own.method)
        if not judging.clearly_worse(widened, best, config.higher_is_better):
            return ""
        hib = config.higher_is_better
        ratio = best.point / own.point if hib else own.point / best.point
        return (f"{NOT_MEASURED} {base.candidate.key} was {ratio:.1f}x "
                f"{'below' if hib else 'above'} the leader {leader.candidate.key}, beyond the "
                f"x{spread:g} settings may move it")
