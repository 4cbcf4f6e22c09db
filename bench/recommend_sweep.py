"""``run.py recommend`` checked against a full sweep of the same space on the same machine.

The sweep measures every candidate of the search's default space ``--runs`` times, interleaved
(round by round through the whole space), and every artifact's accuracy once, with the same
measurer the search uses (``recommend.measure.LoadGenMeasurer``: one LoadGen run per child
process, exactly as a sweep cell). ``search.brute_force`` then judges it by the search's own
rules, with no drops. Compared with the search's ``recommendation.json``:

- ``same``: the search recommended the sweep's optimum, or a candidate the sweep cannot tell
  apart from it (its sweep interval overlaps the optimum's);
- ``time_share``: the search's measured seconds over the sweep's wall time.

    python -m quantmark.bench.recommend_sweep --scenario SingleStream \\
        --model efficientnet-lite0 --max-accuracy-drop 1 \\
        --search OUT/<host>-recommend/efficientnet-lite0/recommend-SingleStream \\
        --output FILE

Run it alone: it times on every core.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quantmark.ground import logs
from quantmark.ground.hashing import atomic_write_json
from quantmark.recommend import judging
from quantmark.recommend.candidates import Evidence, Limits, Outcome
from quantmark.recommend.measure import LoadGenMeasurer
from quantmark.recommend.search import SearchConfig
from quantmark.recommend.space import space
from quantmark.recommend.sweep_check import brute_force, full_sweep

log = logging.getLogger("quantmark.bench.recommend_sweep")


def summary(evidence: list[Evidence], outcome: Outcome, config: SearchConfig
            ) -> dict[str, Any]:
    """Each candidate's sweep figure and accuracy change, and the sweep's answer."""
    rows = {}
    for item in evidence:
        found = judging.figure(item, config.objective, config)
        accuracy = item.accuracy
        rows[item.candidate.key] = {
            "figure": None if found is None else found.text(),
            "point": None if found is None else found.point,
            "runs": len(item.runs), "valid": sum(run.valid for run in item.runs),
            "disturbed": sum(run.disturbed for run in item.runs),
            "accuracy_change": None if accuracy is None else accuracy.change_points,
            "meets_limits": judging.meets(item, config)}
    return {"verdict": outcome.verdict,
            "optimum": outcome.recommended.candidate.key if outcome.recommended else None,
            "tied": [item.candidate.key for item in outcome.tied], "candidates": rows}


def agrees(search: dict[str, Any], outcome: Outcome, evidence: list[Evidence],
           config: SearchConfig) -> bool:
    """The search's pick is the sweep's optimum, or not clearly worse than it in the sweep."""
    picked = (search.get("recommended") or {}).get("key") or next(iter(search.get("tied") or
                                                                        []), None)
    best = outcome.recommended or (outcome.tied[0] if outcome.tied else None)
    if picked is None or best is None:
        return picked is None and best is None
    by_key = {item.candidate.key: item for item in evidence}
    if picked not in by_key or not judging.meets(by_key[picked], config):
        return False
    own = judging.figure(by_key[picked], config.objective, config)
    top = judging.figure(best, config.objective, config)
    return own is not None and top is not None and not judging.clearly_worse(
        own, top, config.higher_is_better)


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    parser = argparse.ArgumentParser(prog="python -m quantmark.bench.recommend_sweep")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-accuracy-drop", type=float)
    parser.add_argument("--runs", type=int, default=3, help="runs of each candidate")
    parser.add_argument("--seconds", type=float, default=5.0, help="each run's duration")
    parser.add_argument("--search", required=True,
                        help="the search's folder (its recommendation.json)")
    parser.add_argument("--output", required=True, help="JSON file for the figures")
    args = parser.parse_args(argv)
    search = json.loads((Path(args.search) / "recommendation.json").read_text())
    config = SearchConfig.for_scenario(args.scenario, limits=Limits(
        max_accuracy_drop=args.max_accuracy_drop), budget_s=1e9)
    candidates = space(args.scenario, args.model)
    with tempfile.TemporaryDirectory(prefix="quantmark-recommend-sweep-") as tmp:
        measurer = LoadGenMeasurer(args.scenario, args.model, tmp)
        started = time.monotonic()
        evidence = full_sweep(candidates, measurer, args.runs, args.seconds)
        sweep_s = time.monotonic() - started
    outcome = brute_force(evidence, config)
    spent = float((search.get("search") or {}).get("spent_s") or 0.0)
    found = {"command": " ".join(sys.argv), "sweep_s": sweep_s, "search_s": spent,
             "time_share": spent / sweep_s if sweep_s else None,
             "search_pick": (search.get("recommended") or {}).get("key"),
             "search_tied": search.get("tied"),
             "same": agrees(search, outcome, evidence, config),
             "sweep": summary(evidence, outcome, config)}
    atomic_write_json(Path(args.output), found)
    log.info("sweep %s (%s); search %s; same or tied: %s; search time %.0f s = %.0f%% of the "
             "sweep's %.0f s", found["sweep"]["optimum"] or found["sweep"]["tied"],
             outcome.verdict, found["search_pick"] or found["search_tied"], found["same"],
             spent, 100 * (found["time_share"] or 0), sweep_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
