"""Run one tiny LoadGen AccuracyOnly test over a QuerySampleLibrary; print a JSON summary.

Run as a script in its own process: LoadGen keeps global state, one test per process.
Usage: python loadgen_accuracy_run.py LOG_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlperf_loadgen as lg
import numpy as np

from quantmark.qsl.library import QuerySampleLibrary

TOTAL, PERF = 24, 8


def main(log_dir: Path) -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 1000, TOTAL)
    # Each sample encodes its own label, so the SUT can "classify" it exactly.
    samples = np.zeros((TOTAL, 3, 4, 4), np.float32)
    samples[:, 0, 0, 0] = labels
    qsl = QuerySampleLibrary.from_arrays(samples, labels, PERF)
    seen: dict[str, int] = {"max_loaded": 0, "issued": 0}
    keep: list[np.ndarray] = []  # response buffers must live until QuerySamplesComplete

    def issue(queries) -> None:
        idx = [q.index for q in queries]
        seen["max_loaded"] = max(seen["max_loaded"], qsl.loaded_count)
        preds = qsl.batch(idx)[:, 0, 0, 0].astype(np.int64)
        responses = []
        for q, pred in zip(queries, preds, strict=True):
            buf = np.array([pred], dtype=np.int64)
            keep.append(buf)
            ptr, _ = buf.__array_interface__["data"]
            responses.append(lg.QuerySampleResponse(q.id, ptr, buf.nbytes))
        seen["issued"] += len(queries)
        lg.QuerySamplesComplete(responses)

    sut = lg.ConstructSUT(issue, lambda: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Offline
    settings.mode = lg.TestMode.AccuracyOnly
    settings.offline_expected_qps = 100
    log_dir.mkdir(parents=True, exist_ok=True)  # LoadGen does not create it
    out = lg.LogOutputSettings()
    out.outdir = str(log_dir)
    out.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = out
    log_settings.enable_trace = False
    try:
        lg.StartTestWithLogSettings(sut, qsl.construct(), settings, log_settings)
    finally:
        qsl.destroy()
        lg.DestroySUT(sut)
    entries = json.loads((log_dir / "mlperf_log_accuracy.json").read_text())
    correct = sum(
        int.from_bytes(bytes.fromhex(e["data"]), "little") == labels[e["qsl_idx"]] for e in entries
    )
    print(
        json.dumps(
            {
                "entries": len(entries),
                "correct": int(correct),
                "distinct": len({e["qsl_idx"] for e in entries}),
                "max_loaded": seen["max_loaded"],
                "loaded_after": qsl.loaded_count,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
