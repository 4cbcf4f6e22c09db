"""How much does quantmark's harness cost? Three figures, measured side by side in one run.

1. Offline samples/s through the SUT (LoadGen + quantmark's SUT base + QSL gather) versus a
   tight ``session.run`` loop on the same ORT session, same batch and threads. Target >= 98%.
2. SingleStream p50 latency LoadGen reports through the SUT minus the p50 of a bare predict call
   on the same session. Target <= 50 us.
3. Offline samples/s through quantmark's SUT base with a predict that returns at once (the real
   batching and response path), next to a bare LoadGen null SUT (ConstructSUT) and a bare
   ConstructFastSUT. Target >= 500k samples/s.

Each LoadGen test runs in its own process (LoadGen reads mlperf.conf once per process).

    python -m quantmark.bench.harness_overhead [--model efficientnet-lite0] [--seconds 10]
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

    from quantmark.report.loadgen_log import summarize_file

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
    from quantmark.models.zoo import get_model
    from quantmark.qsl import open_dataset
    from quantmark.qsl.library import QuerySampleLibrary
    from quantmark.qsl.preprocess import recipe_for
    from quantmark.sut.interface import SutOptions
    from quantmark.sut.onnxruntime.backend import create

    spec = get_model(model)
    backend = create("ort-fp32", SutOptions(model=model, scenario="Offline", threads=threads),
                     spec, None)
    backend.load()
    qsl = QuerySampleLibrary.from_dataset(open_dataset(None), recipe_for(spec, backend.layout),
                                          spec.performance_sample_count)
    return backend, qsl


class TimedPredict:
    """Wraps predict to record each call's duration: the in-run reference for the harness."""

    def __init__(self, predict: Any) -> None:
        self._predict = predict
        self.durations: list[float] = []

    def __call__(self, batch: Any) -> Any:
        start = time.perf_counter()
        result = self._predict(batch)
        self.durations.append(time.perf_counter() - start)
        return result


def part_offline_real(model: str, batch: int, threads: int, seconds: float) -> dict[str, Any]:
    from quantmark.sut.base import LoadGenSUT

    backend, qsl = _real_backend(model, threads)
    # The loop feeds 16 different ready-made batches of real samples: no gather, but no
    # unfair advantage from one input staying hot in cache either.
    indices = list(range(16 * batch))
    qsl.load(indices)
    batches = [qsl.batch(indices[i * batch:(i + 1) * batch]) for i in range(16)]
    qsl.unload(indices)
    session, name = backend._session, backend._input_name  # the very same session
    for data in batches[:3]:
        session.run(None, {name: data})

    def tight_loop() -> float:
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            session.run(None, {name: batches[runs % 16]})
            runs += 1
        return runs * batch / (time.perf_counter() - start)

    before = tight_loop()
    timed = TimedPredict(backend.predict)
    sut = LoadGenSUT(timed, qsl, batch_size=batch)
    handle, qsl_handle = sut.start(), qsl.construct()
    summary = _loadgen_run(handle, qsl_handle, "Offline",
                           {"min_duration_ms": int(seconds * 1000), "min_query_count": 1,
                            "offline_expected_qps": before * 1.1})
    sut.stop()
    qsl.destroy()
    after = tight_loop()
    loop = (before + after) / 2
    through_sut = summary["samples_per_second"]
    samples = len(timed.durations) * batch
    run_s = samples / through_sut
    return {"tight_loop_samples_s": loop, "tight_loop_before": before, "tight_loop_after": after,
            "sut_samples_s": through_sut, "ratio": through_sut / loop,
            "predict_share_of_run": sum(timed.durations) / run_s,
            "validity": summary["validity"], "batch": batch, "threads": threads, "model": model}


def part_single_stream(model: str, threads: int, seconds: float,
                       harness: str = "quantmark") -> dict[str, Any]:
    """SingleStream p50 through quantmark's SUT, or through a minimal hand-written LoadGen SUT
    calling the same session inline (``harness="bare_loadgen"``): the difference is what
    quantmark adds; both pay LoadGen's own costs."""
    import mlperf_loadgen as lg
    import numpy as np

    from quantmark.sut.base import LoadGenSUT
    from quantmark.sut.warmup import time_predict

    backend, qsl = _real_backend(model, threads)
    warm = list(range(64))  # cycle real samples: timing can depend on the data (denormals)
    qsl.load(warm)
    singles = [qsl.batch([i]) for i in warm]
    qsl.unload(warm)
    backend.warmup(singles[0], 10)

    def bare_p50() -> float:
        durations = []
        deadline = time.perf_counter() + seconds / 2
        while time.perf_counter() < deadline or len(durations) < 64:
            durations.extend(time_predict(backend.predict, singles[len(durations) % 64], 0, 1))
        return statistics.median(durations)

    bare_before = bare_p50()
    timed = TimedPredict(backend.predict)
    settings = {"min_duration_ms": int(seconds * 1000), "min_query_count": 64,
                "single_stream_expected_latency_ns": int(bare_before * 0.5e9)}
    if harness == "quantmark":
        sut = LoadGenSUT(timed, qsl, batch_size=1, inline_single=True)
        handle, qsl_handle = sut.start(), qsl.construct()
        summary = _loadgen_run(handle, qsl_handle, "SingleStream", settings)
        sut.stop()
        qsl.destroy()
    else:
        result = np.zeros(1, np.float32)
        address = result.__array_interface__["data"][0]

        def issue(ids: list[int], indices: list[int]) -> None:
            result[0] = timed(singles[indices[0]]).argmax()
            lg.QuerySamplesComplete([lg.QuerySampleResponse(ids[0], address, 4)])

        handle = lg.ConstructFastSUT(issue, lambda: None)
        qsl_handle = lg.ConstructQSL(64, 64, lambda _: None, lambda _: None)
        summary = _loadgen_run(handle, qsl_handle, "SingleStream", settings)
    bare_after = bare_p50()
    bare = (bare_before + bare_after) / 2
    loadgen_p50 = summary["percentiles_ns"]["50.00"] / 1e9
    in_run_predict_p50 = statistics.median(timed.durations)
    return {"harness": harness, "bare_call_p50_us": bare * 1e6,
            "loadgen_p50_us": loadgen_p50 * 1e6,
            "added_vs_bare_call_us": (loadgen_p50 - bare) * 1e6,
            "in_run_predict_p50_us": in_run_predict_p50 * 1e6,
            "added_vs_in_run_predict_us": (loadgen_p50 - in_run_predict_p50) * 1e6,
            "validity": summary["validity"], "model": model}


def _null_settings(samples: int) -> dict[str, Any]:
    return {"min_duration_ms": 1000, "min_query_count": 1, "offline_expected_qps": samples / 1.1,
            "performance_sample_count_override": 1024}


def part_null(kind: str, samples: int, batch: int) -> dict[str, Any]:
    """Null predict through quantmark's base, or bare LoadGen SUTs for comparison."""
    import mlperf_loadgen as lg
    import numpy as np

    from quantmark.qsl.library import QuerySampleLibrary
    from quantmark.sut.base import LoadGenSUT

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


def _median_round(rounds: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The round whose ``key`` is the median (odd count) or the lower middle one."""
    ordered = sorted(rounds, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def _child(part: str, **kwargs: Any) -> dict[str, Any]:
    code = (f"import json, quantmark.bench.harness_overhead as h; "
            f"print(json.dumps(h.part_{part}(**{kwargs!r})))")
    env = dict(os.environ)
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
    parser.add_argument("--rounds", type=int, default=5, help="processes per real-model figure")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    offline_rounds = [_child("offline_real", model=args.model, batch=args.batch,
                             threads=args.threads, seconds=args.seconds)
                      for _ in range(args.rounds)]
    single_rounds = [_child("single_stream", model=args.model, threads=args.threads,
                            seconds=args.seconds, harness=harness)
                     for _ in range(args.rounds) for harness in ("quantmark", "bare_loadgen")]
    ours = [r["added_vs_in_run_predict_us"] for r in single_rounds if r["harness"] == "quantmark"]
    bare = [r["added_vs_in_run_predict_us"] for r in single_rounds
            if r["harness"] == "bare_loadgen"]
    figures = {
        "command": "python -m quantmark.bench.harness_overhead " + " ".join(argv or sys.argv[1:]),
        "offline_real": _median_round(offline_rounds, "ratio"),
        "offline_rounds": offline_rounds,
        "single_stream": {
            "quantmark_added_us": statistics.median(ours) - statistics.median(bare),
            "quantmark_over_predict_us": statistics.median(ours),
            "bare_loadgen_over_predict_us": statistics.median(bare),
        },
        "single_stream_rounds": single_rounds,
        "null": [_child("null", kind=kind, samples=args.null_samples, batch=args.null_batch)
                 for kind in ("quantmark", "bare", "bare_fast")],
    }
    offline, single = figures["offline_real"], figures["single_stream"]
    quantmark_null = figures["null"][0]["samples_s"]
    ratios = ", ".join(f"{r['ratio'] * 100:.1f}%" for r in offline_rounds)
    print(f"(1) Offline through SUT / tight loop: {offline['ratio'] * 100:.1f}% "
          f"({offline['sut_samples_s']:.1f} vs {offline['tight_loop_samples_s']:.1f} samples/s, "
          f"{args.model} bs{args.batch}; median of {args.rounds} rounds: "
          f"{ratios}; predict busy "
          f"{offline['predict_share_of_run'] * 100:.1f}% of the run) target >= 98%")
    print(f"(2) SingleStream p50 added by quantmark: {single['quantmark_added_us']:.1f} us "
          f"(LoadGen p50 minus predict p50 in the same run: quantmark SUT "
          f"{single['quantmark_over_predict_us']:.1f} us, a minimal inline LoadGen SUT on the "
          f"same session {single['bare_loadgen_over_predict_us']:.1f} us; medians of "
          f"{args.rounds} interleaved rounds) target <= 50 us")
    print(f"(3) null-predict Offline through quantmark's SUT base: {quantmark_null:,.0f} "
          f"samples/s (bare ConstructSUT {figures['null'][1]['samples_s']:,.0f}, "
          f"ConstructFastSUT {figures['null'][2]['samples_s']:,.0f}) target >= 500,000")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
