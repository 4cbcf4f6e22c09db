#!/usr/bin/env python3
"""Run MLPerf's official submission checker on a tree quantmark packaged.

The checker is not part of quantmark: check out mlcommons/inference and point ``--checker`` at
its ``tools/submission`` folder. Stored checkers may not know the newest round yet; when asked
for a version the checker lacks (e.g. v6.1), this adds it in memory as a copy of the newest
round it has with the round's LoadGen seeds, and says so. Everything else is the checker's own
code and rules. (The seeds are written below: those of LoadGen 6.0.17's compiled-in
mlperf.conf, the v6.1 round.)

    python tools/mlperf_checker.py --checker ~/inference/tools/submission --version v6.1 \\
        --input SUBMISSION_ROOT [checker flags, e.g. --skip-dataset-size-check]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

# LoadGen 6.0.17's compiled-in mlperf.conf (rules round v6.1).
V61_SEEDS = {"qsl_rng_seed": 2085463073848966840,
             "sample_index_rng_seed": 2747215439041700203,
             "schedule_rng_seed": 16159082839903944936}


def add_round(constants, version: str, seeds: dict[str, int]) -> str | None:
    """Give the checker a ``version`` entry copied from its newest round; returns that round."""
    if version in constants.MODEL_CONFIG:
        return None
    newest = max(constants.MODEL_CONFIG, key=lambda v: tuple(int(p) for p in v[1:].split(".")))
    for name in dir(constants):
        table = getattr(constants, name)
        if isinstance(table, dict) and newest in table and version not in table:
            table[version] = copy.deepcopy(table[newest])
    constants.MODEL_CONFIG[version]["seeds"] = dict(seeds)
    return newest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--checker", required=True, help="mlcommons/inference tools/submission")
    parser.add_argument("--version", default="v6.1")
    known, rest = parser.parse_known_args()
    folder = Path(known.checker).expanduser()
    if not (folder / "submission_checker" / "main.py").is_file():
        print(f"error: {folder} has no submission_checker/main.py; pass the tools/submission "
              "folder of an mlcommons/inference checkout", file=sys.stderr)
        return 2
    sys.path.insert(0, str(folder))
    import submission_checker.constants as constants
    from submission_checker import main as checker

    copied = add_round(constants, known.version, V61_SEEDS)
    if copied:
        print(f"note: this checker has no {known.version}; using its {copied} rules with the "
              f"{known.version} LoadGen seeds {V61_SEEDS}", file=sys.stderr)
    sys.argv = [str(folder / "submission_checker" / "main.py"), "--version", known.version,
                *rest]
    return checker.main()


if __name__ == "__main__":
    sys.exit(main())
