"""The test process's own guards: a quick run's time bound, logs checked before promotion."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from quantmark.ground.config import RunConfig
from quantmark.ground.errors import SutError, UserError
from quantmark.run.folder import RunFolder
from tests.conftest import run_python


def _settings(duration_ms: int, queries: int) -> SimpleNamespace:
    return SimpleNamespace(min_duration_ms=duration_ms, min_query_count=queries,
                           multi_stream_samples_per_query=8)


def test_quick_wall_bound_follows_what_the_run_should_take():
    from quantmark.run.test_process import QUICK_WALL_FACTOR, QUICK_WALL_MIN_S, quick_wall_bound_s
    from quantmark.scenarios.settings import Measurement

    slow = Measurement(latency_s=1.0, batch_latency_s=4.0, batch_size=8)
    quick = RunConfig(scenario="SingleStream", sut="ort-fp32", model="vgg19")
    # 64 queries of 1 s each outlast the 5 s minimum: the bound follows the queries
    assert quick_wall_bound_s(quick, _settings(5000, 64), slow) == QUICK_WALL_FACTOR * 64
    offline = RunConfig(scenario="Offline", sut="ort-fp32", model="vgg19")
    assert quick_wall_bound_s(offline, _settings(5000, 1), slow) == QUICK_WALL_MIN_S
    long = _settings(60_000, 1)
    assert quick_wall_bound_s(offline, long, slow) == QUICK_WALL_FACTOR * 60
    official = RunConfig(scenario="Offline", sut="ort-fp32", model="vgg19", quick=False)
    assert quick_wall_bound_s(official, long, slow) is None
    accuracy = RunConfig(scenario="Offline", sut="ort-fp32", model="vgg19", mode="accuracy")
    assert quick_wall_bound_s(accuracy, long, slow) is None


def test_quick_wall_bound_of_a_server_run_follows_its_schedule():
    """700 queries at 7.3/s last 96 s however fast the SUT is: the bound was the 120 s minimum,
    so a quick ensemble Server run that other work slowed was ended as a SUT failure."""
    from quantmark.run.test_process import QUICK_WALL_FACTOR, quick_wall_bound_s
    from quantmark.scenarios.settings import Measurement

    fast = Measurement(latency_s=0.04, batch_latency_s=0.04, batch_size=1)
    server = RunConfig(scenario="Server", sut="ort-fp32", model="vgg19")
    settings = SimpleNamespace(**vars(_settings(1000, 700)), server_target_qps=7.0)
    assert quick_wall_bound_s(server, settings, fast) == pytest.approx(QUICK_WALL_FACTOR * 100)


@pytest.mark.slow
def test_a_quick_run_past_its_bound_fails_and_keeps_the_earlier_run(tmp_path, quantmark_cache):
    """The bound lowered to 1 s in the test process: the run stops with exit 3, says why, and
    its logs go to run_1.failed while an earlier run_1 stays."""
    final = tmp_path / "out" / "sys" / "efficientnet-lite0" / "Offline" / "performance" / "run_1"
    final.mkdir(parents=True)
    (final / "results.json").write_text('{"earlier": true}')
    config = RunConfig(scenario="Offline", sut="ort-fp32", model="efficientnet-lite0",
                       output=str(tmp_path / "out"), system_id="sys", batch_size=8,
                       quick_duration_ms=30_000)
    (tmp_path / "config.json").write_text(config.to_json())
    files = [str(tmp_path / "config.json"), str(tmp_path / "status.json")]
    proc = run_python(f"""
        import sys
        import quantmark.run.test_process as runner
        runner.QUICK_WALL_MIN_S, runner.QUICK_WALL_FACTOR = 1.0, 0.0
        sys.exit(runner.main({files!r}))
        """, timeout=600, env={"QUANTMARK_CACHE": str(quantmark_cache)})
    assert proc.returncode == 3, proc.stderr[-3000:]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["status"] == "failed"
    assert "quick run still running after 1 s" in status["message"]
    assert json.loads((final / "results.json").read_text()) == {"earlier": True}
    failed = final.with_name("run_1.failed")
    assert (failed / "mlperf_log_detail.txt").is_file()
    assert not list(final.parent.glob(".run_1.tmp-*"))


def _loadgen_logs(folder: Path, detail_lines: list[str], summary: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlperf_log_detail.txt").write_text("".join(line + "\n" for line in detail_lines))
    if summary is not None:
        (folder / "mlperf_log_summary.txt").write_text(summary)


def test_incomplete_logs_go_to_failed_and_the_earlier_run_stays(tmp_path):
    final = tmp_path / "performance" / "run_1"
    final.mkdir(parents=True)
    (final / "results.json").write_text("earlier")
    with RunFolder(final) as folder:
        work = folder.start()
        _loadgen_logs(work, [':::MLLOG {"key": "loadgen_version", "value": "5.1", '
                             '"time_ms": 0, "namespace": "mlperf::logging", '
                             '"event_type": "POINT_IN_TIME", "metadata": {}}'], None)
        with pytest.raises(SutError, match="incomplete") as raised:
            folder.check_logs()
    assert "run_1.failed" in str(raised.value) and "earlier run is untouched" in str(raised.value)
    assert (final / "results.json").read_text() == "earlier"
    assert (final.with_name("run_1.failed") / "mlperf_log_detail.txt").is_file()
    assert not list(final.parent.glob(".run_1*tmp*"))


def test_a_second_folder_user_is_refused_and_leftovers_of_the_dead_are_cleared(tmp_path):
    final = tmp_path / "performance" / "run_1"
    abandoned = final.parent / ".run_1.tmp-999999"
    abandoned.mkdir(parents=True)
    (abandoned / "mlperf_log_detail.txt").write_text("half")
    with RunFolder(final):
        assert not abandoned.exists()
        proc = run_python(f"""
            from quantmark.run.folder import RunFolder
            from pathlib import Path
            from quantmark.ground.errors import UserError
            try:
                RunFolder(Path({str(final)!r})).open()
            except UserError as exc:
                print(exc)
            """)
        assert "another quantmark run (pid" in proc.stdout, proc.stderr
    with RunFolder(final):  # released: free again
        pass


def test_a_file_named_like_the_run_folder_is_named_not_replaced(tmp_path):
    final = tmp_path / "performance" / "run_1"
    final.parent.mkdir(parents=True)
    final.write_text("my notes")
    with pytest.raises(UserError) as raised:
        RunFolder(final).open()
    message = str(raised.value)
    assert f"{final} is a file" in message and "--output" in message and "\n" not in message
    assert final.read_text() == "my notes"
    assert not list(final.parent.glob(".run_1*tmp*"))
