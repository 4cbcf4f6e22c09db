"""How much does quantmark's harness cost? Three figures, measured side by side in one run.

1. Offline samples/s through the SUT (LoadGen + quantmark's SUT base + QSL gather) versus a
   tight ``session.run`` loop on the same ORT session, same batch and threads. Target >= 98%.
2. SingleStream p50 latency LoadGen reports through the SUT minus the p50 of a bare predict call
   on the same session. Target <= 50 us.
3. Offline samples/s through quantmark's SUT base with a predict that returns at once (the real
   batching and response path), next to a bare LoadGen null SUT (ConstructSUT) and a bare
   ConstructFastSUT. Target >= 500k samples/s.

Each LoadGen test runs in its own process (LoadGen reads mlperf.conf once per process).

    python -m bench.harness_overhead [--model efficientnet-lite0] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _loadgen_run(sut_handle: Any, qsl_handle: Any, scenario: str, settings_kw: dict[str, Any]
                 ) -> dict[str, Any]:
    """Run one performance test into a temp folder; return LoadGen's summary numbers."""
    import mlperf_loadgen as lg

    from report.loadgen_log import summarize_file

    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, scenario)
    settings.mode = lg.TestMode.PerformanceOnly
    for key, value in settings_kw.items():
        setattr(settings, key, value)
    with tempfile.TemporaryDirectory() as out:
        log = lg.LogSettings()
        log.log_output.outdir = out
        log.log_output.copy_summary_to_stdout = False
        lg.StartTestWithLogSettings(sut_handle, qsl_handle, settings, log)
        return summarize_file(Path(out) / "mlperf_log_detail.txt").to_dict()


def _real_backend(model: str, threads: int):
    """The ort-fp32 backend and QSL over the built-in dataset, as run.py builds them."""
    from models.zoo import get_model
    from qsl import open_dataset
    from qsl.library import QuerySampleLibrary
    from quantmark.runner import recipe_for
    from sut.interface import SutOptions
    from sut.onnxruntime import create

    spec = get_model(model)
    backend = create("ort-fp32", SutOptions(model=model, scenario="Offline", threads=threads),
                     spec, None)
    backend.load()
    qsl = QuerySampleLibrary.from_dataset(open_dataset(None), recipe_for(spec, backend.layout),
                                          spec.performance_sample_count)
    return backend, qsl


def part_offline_real(model: str, batch: int, threads: int, seconds: float) -> dict[str, Any]:
    from sut.base import LoadGenSUT

    backend, qsl = _real_backend(model, threads)
    indices = list(range(batch))
    qsl.load(indices)
    data = qsl.batch(indices)
    qsl.unload(indices)
    session, name = backend._session, backend._input_name  # the very same session
    for _ in range(3):
        session.run(None, {name: data})

    def tight_loop() -> float:
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            session.run(None, {name: data})
            runs += 1
        return runs * batch / (time.perf_counter() - start)

    before = tight_loop()
    sut = LoadGenSUT(backend.predict, qsl, batch_size=batch)
    handle, qsl_handle = sut.start(), qsl.construct()
    summary = _loadgen_run(handle, qsl_handle, "Offline",
                           {"min_duration_ms": int(seconds * 1000), "min_query_count": 1,
                            "offline_expected_qps": before * 1.1})
    sut.stop()
    qsl.destroy()
    after = tight_loop()
    loop = (before + after) / 2
    through_sut = summary["samples_per_second"]
    return {"tight_loop_samples_s": loop, "tight_loop_before": before, "tight_loop_after": after,
            "sut_samples_s": through_sut, "ratio": through_sut / loop,
            "validity": summary["validity"], "batch": batch, "threads": threads, "model": model}


def part_single_stream(model: str, threads: int, seconds: float) -> dict[str, Any]:
    from sut.base import LoadGenSUT, time_predict

    backend, qsl = _real_backend(model, threads)
    qsl.load([0])
    one = qsl.batch([0])
    qsl.unload([0])
    backend.warmup(one, 10)
    bare_before = statistics.median(time_predict(backend.predict, one, seconds / 2))
    sut = LoadGenSUT(backend.predict, qsl, batch_size=1)
    handle, qsl_handle = sut.start(), qsl.construct()
    summary = _loadgen_run(handle, qsl_handle, "SingleStream",
                           {"min_duration_ms": int(seconds * 1000), "min_query_count": 64,
                            "single_stream_expected_latency_ns": int(bare_before * 0.5e9)})
    sut.stop()
    qsl.destroy()
    bare_after = statistics.median(time_predict(backend.predict, one, seconds / 2))
    bare = (bare_before + bare_after) / 2
    loadgen_p50 = summary["percentiles_ns"]["50.00"] / 1e9
    return {"bare_p50_us": bare * 1e6, "bare_before_us": bare_before * 1e6,
            "bare_after_us": bare_after * 1e6, "loadgen_p50_us": loadgen_p50 * 1e6,
            "added_us": (loadgen_p50 - bare) * 1e6, "validity": summary["validity"],
            "model": model}


def _null_settings(samples: int) -> dict[str, Any]:
    return {"min_duration_ms": 1000, "min_query_count": 1, "offline_expected_qps": samples / 1.1,
            "performance_sample_count_override": 1024}


def part_null(kind: str, samples: int, batch: int) -> dict[str, Any]:
    """Null predict through quantmark's base, or bare LoadGen SUTs for comparison."""
    import mlperf_loadgen as lg
    import numpy as np

    from qsl.library import QuerySampleLibrary
    from sut.base import LoadGenSUT

    qsl = QuerySampleLibrary.from_arrays(np.zeros((1024, 1), np.float32), np.zeros(1024, int),
                                         performance_sample_count=1024)
    qsl_handle = qsl.construct()
    buffer = np.zeros(1, np.float32)
    address = buffer.__array_interface__["data"][0]
    sut = None
    if kind == "quantmark":
        sut = LoadGenSUT(lambda b: np.zeros(len(b), np.float32), qsl, batch_size=batch)
        handle = sut.start()
    elif kind == "bare_fast":
        def issue_fast(ids, _indices):
            lg.QuerySamplesComplete([lg.QuerySampleResponse(i, address, 4) for i in ids])
        handle = lg.ConstructFastSUT(issue_fast, lambda: None)
    else:
        def issue(queries):
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, address, 4) for q in queries])
        handle = lg.ConstructSUT(issue, lambda: None)
    summary = _loadgen_run(handle, qsl_handle, "Offline", _null_settings(samples))
    if sut is not None:
        sut.stop()
    return {"kind": kind, "samples_s": summary["samples_per_second"],
            "validity": summary["validity"], "batch": batch if kind == "quantmark" else None}


def _child(part: str, **kwargs: Any) -> dict[str, Any]:
    code = (f"import json, bench.harness_overhead as h; "
            f"print(json.dumps(h.part_{part}(**{kwargs!r})))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"part {part} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="efficientnet-lite0")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--null-samples", type=int, default=2_000_000)
    parser.add_argument("--null-batch", type=int, default=1024)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    figures = {
        "offline_real": _child("offline_real", model=args.model, batch=args.batch,
                               threads=args.threads, seconds=args.seconds),
        "single_stream": _child("single_stream", model=args.model, threads=args.threads,
                                seconds=args.seconds),
        "null": [_child("null", kind=kind, samples=args.null_samples, batch=args.null_batch)
                 for kind in ("quantmark", "bare", "bare_fast")],
    }
    offline, single = figures["offline_real"], figures["single_stream"]
    quantmark_null = figures["null"][0]["samples_s"]
    print(f"(1) Offline through SUT / tight loop: {offline['ratio'] * 100:.1f}% "
          f"({offline['sut_samples_s']:.1f} vs {offline['tight_loop_samples_s']:.1f} samples/s, "
          f"{args.model} bs{args.batch}) target >= 98%")
    print(f"(2) SingleStream p50 added: {single['added_us']:.1f} us (LoadGen p50 "
          f"{single['loadgen_p50_us']:.1f} us vs bare {single['bare_p50_us']:.1f} us) "
          "target <= 50 us")
    print(f"(3) null-predict Offline through quantmark's SUT base: {quantmark_null:,.0f} "
          f"samples/s (bare ConstructSUT {figures['null'][1]['samples_s']:,.0f}, "
          f"ConstructFastSUT {figures['null'][2]['samples_s']:,.0f}) target >= 500,000")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
