"""LoadGenSUT under real LoadGen: exactly-once completion, batching, failures that never hang."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_json

SETUP = """
import json, os, sys, tempfile, threading, time
import numpy as np
import mlperf_loadgen as lg
from quantmark.qsl.library import QuerySampleLibrary
from quantmark.sut.base import LoadGenSUT

count = {count}
samples = np.arange(count, dtype=np.float32).reshape(count, 1)
labels = np.arange(count) % 10
qsl = QuerySampleLibrary.from_arrays(samples, labels, performance_sample_count={perf})
seen = []
lock = threading.Lock()
batch_sizes = []
feeders = []

def predict(batch):
    with lock:
        seen.extend(int(v) for v in batch[:, 0])
        batch_sizes.append(len(batch))
    {predict_body}
    scores = np.zeros((len(batch), 10), np.float32)
    scores[np.arange(len(batch)), batch[:, 0].astype(int) % 10] = 1
    return scores

{async_setup}
out = tempfile.mkdtemp()
fatal = []
sut = LoadGenSUT(predict, qsl, batch_size={batch}, workers={workers}, submit={submit},
                 inline_single="{scenario}" == "SingleStream",
                 on_fatal=lambda e: (fatal.append(e), print(json.dumps({{"fatal": repr(e)}}),
                                     flush=True), os._exit(0)), fatal_grace_s=1.0)
settings = lg.TestSettings()
settings.scenario = getattr(lg.TestScenario, "{scenario}")
settings.mode = getattr(lg.TestMode, "{mode}")
settings.min_duration_ms = {min_duration_ms}
settings.min_query_count = {min_queries}
settings.single_stream_expected_latency_ns = {ss_latency_ns}
settings.multi_stream_expected_latency_ns = 200000
settings.offline_expected_qps = 2000
settings.server_target_qps = {server_qps}
log = lg.LogSettings()
log.log_output.outdir = out
log.log_output.copy_summary_to_stdout = False
handle = sut.start()
qsl_handle = qsl.construct()
lg.StartTestWithLogSettings(handle, qsl_handle, settings, log)
sut.stop()
qsl.destroy()
entries = json.load(open(os.path.join(out, "mlperf_log_accuracy.json")))
print(json.dumps({{"issued": sut.issued, "completed": sut.completed, "seen": seen,
                  "threads": sorted(set(t for t in feeders)),
                  "batch_sizes": batch_sizes, "error": repr(sut.error),
                  "logged": [e["qsl_idx"] for e in entries],
                  "data": [e["data"] for e in entries[:5]],
                  "pairs": [[e["qsl_idx"], e["data"]] for e in entries],
                  "loaded_after": qsl.loaded_count}}))
"""


# An asynchronous backend as sut.base.Submit describes it: two "requests" run on a pool and
# complete through a callback; the feeder blocks while both are busy.
ASYNC_SETUP = """
import concurrent.futures
pool = concurrent.futures.ThreadPoolExecutor(2)
idle = threading.Semaphore(2)

def submit(count, fill, done):
    feeders.append(threading.current_thread().name)
    idle.acquire()
    batch = fill(None).copy()
    assert len(batch) == count

    def work():
        try:
            done(predict(batch), None)
        except Exception as exc:
            done(None, exc)
        finally:
            idle.release()

    pool.submit(work)
"""


def _run(scenario="Offline", mode="AccuracyOnly", count=50, perf=50, batch=8, workers=1,
         min_queries=1, predict_body="pass", timeout=60, min_duration_ms=300, server_qps=500,
         ss_latency_ns=100_000, asynchronous=False):
    code = SETUP.format(count=count, perf=perf, batch=batch, workers=workers, scenario=scenario,
                        mode=mode, min_queries=min_queries, predict_body=predict_body,
                        min_duration_ms=min_duration_ms, server_qps=server_qps,
                        ss_latency_ns=ss_latency_ns,
                        async_setup=ASYNC_SETUP if asynchronous else "",
                        submit="submit" if asynchronous else "None")
    return run_json(code, timeout=timeout)


@pytest.mark.parametrize("scenario", ["Offline", "MultiStream", "Server"])
def test_asynchronous_backend_completes_each_sample_once_from_one_feeder(scenario):
    result = _run(scenario=scenario, count=40, perf=40, batch=4, workers=3, asynchronous=True)
    assert result["issued"] == result["completed"] == 40
    assert sorted(result["logged"]) == list(range(40))
    assert sorted(result["seen"]) == list(range(40))
    for index, hex_data in result["pairs"]:
        assert np.frombuffer(bytes.fromhex(hex_data), dtype=np.float32)[0] == index % 10
    assert result["threads"] == ["sut-worker-0"]  # one feeder, whatever workers says


def test_asynchronous_failure_completes_all_and_reports():
    body = "if len(seen) > 10: raise RuntimeError('boom')"
    result = _run(count=60, perf=60, batch=4, predict_body=body, asynchronous=True)
    assert result["issued"] == result["completed"] == 60
    assert "boom" in result["error"]


@pytest.mark.parametrize("scenario", ["Offline", "SingleStream", "MultiStream", "Server"])
def test_accuracy_mode_predicts_each_sample_exactly_once(scenario):
    result = _run(scenario=scenario, count=40, perf=40, batch=4, workers=2)
    assert result["issued"] == result["completed"] == 40
    assert sorted(result["seen"]) == list(range(40))  # each QSL index predicted once
    assert sorted(result["logged"]) == list(range(40))  # and logged once
    assert result["error"] == "None"
    # each id got the answer computed from ITS sample (double-buffered gathers never mix up)
    for index, hex_data in result["pairs"]:
        value = np.frombuffer(bytes.fromhex(hex_data), dtype=np.float32)[0]
        assert value == index % 10


def test_responses_are_float32_class_ids():
    result = _run(count=12, perf=12, batch=5)
    for hex_data in result["data"]:
        value = np.frombuffer(bytes.fromhex(hex_data), dtype=np.float32)
        assert value.shape == (1,) and 0 <= value[0] < 10


def test_offline_query_is_split_into_batches_of_batch_size():
    result = _run(count=50, perf=50, batch=8, workers=1)
    assert max(result["batch_sizes"]) == 8
    assert sum(result["batch_sizes"]) == 50


def test_performance_run_completes_everything_and_unloads():
    result = _run(scenario="SingleStream", mode="PerformanceOnly", count=64, perf=16,
                  min_queries=100, batch=1)
    assert result["issued"] == result["completed"] >= 100
    assert result["loaded_after"] == 0  # LoadGen unloaded what it loaded


def test_failing_predict_in_offline_completes_all_and_reports():
    body = "if len(seen) > 10: raise RuntimeError('boom')"
    result = _run(count=60, perf=60, batch=4, predict_body=body, timeout=60)
    assert result["issued"] == result["completed"] == 60
    assert "boom" in result["error"]


def test_failing_predict_in_single_stream_finishes():
    body = "raise RuntimeError('boom')"
    result = _run(scenario="SingleStream", mode="PerformanceOnly", count=20, perf=20, batch=1,
                  min_queries=64, min_duration_ms=60_000, ss_latency_ns=10_000_000,
                  predict_body=body, timeout=60)
    # LoadGen pre-generated 6000 queries (60 s / 10 ms); each is completed at once after the
    # failure, so the test ends (out of queries) long before 60 s, inside the fatal grace period
    assert result["issued"] == result["completed"] >= 64
    assert "boom" in result["error"]


def test_failing_predict_in_server_ends_the_process():
    body = "raise RuntimeError('boom')"
    # Server keeps issuing on its schedule for 60 s whatever the SUT does: the fatal hook must
    # end the process after its grace period instead.
    result = _run(scenario="Server", mode="PerformanceOnly", count=20, perf=20, batch=1,
                  min_queries=100, min_duration_ms=60_000, server_qps=100, predict_body=body,
                  timeout=30)
    assert "boom" in result["fatal"]
