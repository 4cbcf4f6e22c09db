"""One real LoadGen test of a fake classifier, written into quantmark's results layout.

Run as a script (LoadGen: one test per process)::

    python fake_sut_run.py SCENARIO_DIR --mode performance|accuracy [--audit TEST01|TEST04]
                           [--kind honest|caching|noisy] [--wobble 0.5] [--noise 0.0] [--seed 0]

``honest`` spends ~10 ms per sample (sleeping; beside busy processes it wakes late, by a
few ms, more in one run than another).
``caching`` cheats: when asked for the same sample as last time it returns the remembered answer
at once (what TEST04 must catch). ``noisy`` is not bit-exact run to run (what TEST01's exact
check catches, and its fallback judges): ``--wobble`` is the share of its wrong answers that
change to another wrong class (accuracy unchanged), ``--noise`` the share of all answers it gets
wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from quantmark.audit.configs import audit_config_path  # noqa: E402

TOTAL = 256
COST_S = 0.010


def true_class(index: int) -> int:
    return (index * 7) % 1000


def label(index: int) -> int:
    """The fake model is right on 4 samples out of 5."""
    return true_class(index) if index % 5 else (true_class(index) + 1) % 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario_dir", type=Path)
    parser.add_argument("--mode", default="performance")
    parser.add_argument("--audit", default="")
    parser.add_argument("--kind", default="honest")
    parser.add_argument("--wobble", type=float, default=0.5)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    base = args.scenario_dir
    out = (base / args.audit / "performance" / "run_1" if args.audit
           else base / "accuracy" if args.mode == "accuracy" else base / "performance" / "run_1")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    keep: list[np.ndarray] = []
    last: dict[str, float] = {}

    def answer(index: int) -> float:
        if args.kind == "caching" and last.get("index") == index:
            return last["value"]
        time.sleep(COST_S)
        value = float(true_class(index))
        wrong = float((label(index) + 1 + rng.integers(0, 998)) % 1000)
        if args.kind == "noisy":
            if value != label(index) and rng.random() < args.wobble:
                value = wrong
            elif rng.random() < args.noise:
                value = wrong
        last.update(index=index, value=value)
        return value

    def issue(queries) -> None:
        responses = []
        for query in queries:
            buffer = np.array([answer(query.index)], np.float32)
            keep.append(buffer)
            responses.append(lg.QuerySampleResponse(
                query.id, buffer.__array_interface__["data"][0], buffer.nbytes))
        lg.QuerySamplesComplete(responses)

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(TOTAL, TOTAL, lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.SingleStream
    settings.mode = (lg.TestMode.AccuracyOnly if args.mode == "accuracy"
                     else lg.TestMode.PerformanceOnly)
    settings.single_stream_expected_latency_ns = int(COST_S * 1e9)
    settings.min_duration_ms = 2000
    settings.min_query_count = 200
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(out)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    audit = str(audit_config_path(args.audit)) if args.audit else str(out / "none.config")
    lg.StartTestWithLogSettings(sut, qsl, settings, log_settings, audit)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    if args.mode == "accuracy":
        (out / "val_map.txt").write_text(
            "".join(f"img_{i:05d}.JPEG {label(i)}\n" for i in range(TOTAL)))


if __name__ == "__main__":
    main()
