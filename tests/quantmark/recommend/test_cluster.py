"""``run.py recommend --cluster``: each node of a Ray cluster searches for itself.

The nodes search stand-in spaces with planted, noise-free speeds (``stand_in_parts``, which
the driver names to its nodes through ``cluster.PARTS_ENV``): node alpha's fastest candidate
within the accuracy limit is int8-a, beta's fp32-a. Every stand-in run writes a folder with a
marker and a line in ``<output>/measured.jsonl`` (node, process, what it measured), so a test
sees what each node measured, in which process, independently of the search's own counts.

In-process tests (no Ray) run a node's message stream into the driver's ``NodeSearch``; the
others run a real local Ray cluster of two nodes (``tests/quantmark/sweep/fleet``'s
``LocalFleet``)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from quantmark.recommend.candidates import AccuracyResult, Candidate, Limits, Measurement
from quantmark.recommend.cluster import PARTS_ENV
from quantmark.sweep.fleet.task import NODE_ENV
from tests.quantmark.recommend.standins import (
    PlantedAccuracy,
    PlantedSpeed,
    Space,
    StandInMeasurer,
)

MODEL, SCENARIO = "digits-cnn", "SingleStream"
FP32, INT8, LOSSY = Candidate("fp32-a"), Candidate("int8-a"), Candidate("int8-b")
#: node -> planted latencies: under --max-accuracy-drop 1 (int8-b loses 4 points) alpha's
#: answer is int8-a, beta's fp32-a
PLANTED = {"alpha": {FP32: 20.0, INT8: 10.0, LOSSY: 5.0},
           "beta": {FP32: 6.0, INT8: 12.0, LOSSY: 5.0}}
WINNER = {"alpha": INT8, "beta": FP32}
CHANGES = {"fp32-a": 0.0, "int8-a": -0.3, "int8-b": -4.0}
PARTS = "tests.quantmark.recommend.test_cluster:stand_in_parts"
LOG = "measured.jsonl"
#: each stand-in run's wall time (the Ray tests interrupt a search between two runs)
RUN_DELAY_ENV = "QUANTMARK_TEST_RUN_DELAY_S"
#: a stand-in run raises KeyboardInterrupt at this run (in-process tests: a search cut off)
STOP_ENV = "QUANTMARK_TEST_STOP_AT_RUN"


class LoggedStandIn(StandInMeasurer):
    """The planted stand-in, noise-free, each run a folder of its own (numbered past those
    that exist, as the real measurer numbers its runs) and each measurement a line in the
    output's log."""

    def __init__(self, space: Space, node: str, folder: Path, log: Path) -> None:
        super().__init__(space, seed=7, noise=0.0, invalid_rate=0.0, disturbed_rate=0.0)
        self.node, self.folder, self.log = node, folder, log
        self.delay_s = float(os.environ.get(RUN_DELAY_ENV) or 0)
        self.stop_at = int(os.environ.get(STOP_ENV) or 0)

    def _note(self, what: str, name: str) -> None:
        line = json.dumps({"node": self.node, "pid": os.getpid(), "what": what, "name": name})
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as out:
            out.write(line + "\n")

    def run(self, candidate: Candidate, seconds: float) -> Measurement:
        if self.stop_at and sum(self.runs.values()) + 1 >= self.stop_at:
            raise KeyboardInterrupt
        time.sleep(self.delay_s)
        found = super().run(candidate, seconds)
        number = 1
        while (run_dir := self.folder / "runs" / f"{candidate.sut}-r{number}").exists():
            number += 1
        run_dir.mkdir(parents=True)
        (run_dir / "marker").write_text(self.node)
        self._note("run", candidate.key)
        return dataclasses.replace(found, run_dir=str(run_dir))

    def accuracy(self, candidate: Candidate) -> AccuracyResult:
        self._note("accuracy", candidate.artifact)
        return super().accuracy(candidate)


def stand_in_parts(job: Any, folder: Path) -> tuple[list[Candidate], LoggedStandIn]:
    """The nodes' space and measurer (``cluster_node.load_parts`` imports this by name)."""
    node = os.environ.get(NODE_ENV) or "alpha"
    space = Space(list(PLANTED[node]), {c.key: PlantedSpeed(ms, 1000.0 / ms)
                                         for c, ms in PLANTED[node].items()},
                  {sut: PlantedAccuracy(change, 0.1 if change else 0.0, 10.0)
                   for sut, change in CHANGES.items()})
    return space.candidates, LoggedStandIn(space, node, folder, Path(job.output) / LOG)


def _log(out: Path) -> list[dict[str, Any]]:
    path = out / LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _folder(out: Path, node: str) -> Path:
    return out / f"{node}-recommend" / MODEL / f"recommend-{SCENARIO}"


def _evidence(out: Path, node: str) -> list[dict[str, Any]]:
    path = _folder(out, node) / "evidence.json"
    return json.loads(path.read_text())["evidence"] if path.exists() else []


def _runs(evidence: list[dict[str, Any]]) -> Counter[str]:
    return Counter({_key(item): len(item["runs"]) for item in evidence})


def _key(item: dict[str, Any]) -> str:
    return Candidate.from_dict(item["candidate"]).key


def _record(out: Path, node: str) -> Any:
    from quantmark.ground.records import load_record

    return load_record(_folder(out, node) / "recommendation.json", "recommendation")


# ---------------------------------------------------------------------------- in process


def _job(out: Path) -> Any:
    from quantmark.recommend.cluster_node import FleetJob
    from quantmark.recommend.search import SearchConfig

    config = SearchConfig.for_scenario(SCENARIO, limits=Limits(max_accuracy_drop=1.0),
                                       budget_s=900.0, run_seconds=5.0, accuracy_seconds=60.0)
    return FleetJob(cluster="auto", output=str(out), model=MODEL, scenario=SCENARIO,
                    settings={"scenario": SCENARIO, "max_accuracy_drop": 1.0},
                    config=dataclasses.asdict(config), parts=PARTS, driver_host="driver")


@pytest.fixture
def node_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's temporary folder (its search's work folder) inside the test's, so a failed
    test leaves nothing in the machine's."""
    import tempfile

    found = tmp_path / "node-tmp"
    found.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(found))
    return found


def _node_search(out: Path, node: str = "alpha") -> Any:
    from quantmark.recommend.cluster import NodeSearch
    from quantmark.report.console_tables import make_console

    return NodeSearch(node, _job(out), make_console(), lambda candidate, run_dirs: {
        "run": f"python run.py --sut {candidate.sut}", "vendor": None})


def _stream(search: Any, job: Any, version: str | None = None) -> list[str]:
    """A node's messages, read by the driver's ``NodeSearch`` as they come; the kinds. Each
    evidence message is on disk before the next message is read."""
    from quantmark.ground.version import VERSION
    from quantmark.recommend.cluster_node import node_messages

    kinds = []
    for message in node_messages(search.node, job.to_dict(), search.resume(),
                                 version or VERSION):
        kinds.append(message["kind"])
        search.receive(message)
        if message["kind"] == "evidence":
            assert _runs(_evidence(Path(job.output), search.node)) == \
                Counter({_key(item): len(item["runs"]) for item in message["evidence"]})
    return kinds


def test_a_node_streams_its_evidence_and_the_driver_writes_its_answer(tmp_path: Path,
                                                                       monkeypatch,
                                                                       node_tmp) -> None:
    from quantmark.recommend.cluster_node import work_folder

    monkeypatch.setenv(NODE_ENV, "alpha")
    search = _node_search(tmp_path)
    kinds = _stream(search, search.job)
    assert kinds[0] == "started" and kinds[-1] == "answer"
    measured = _log(tmp_path)
    runs = [line for line in measured if line["what"] == "run"]
    assert kinds.count("evidence") >= len(runs) > 3  # after every run (and accuracy result)
    evidence = _evidence(tmp_path, "alpha")
    assert _runs(evidence) == Counter(line["name"] for line in runs)
    folder = _folder(tmp_path, "alpha")
    run_dirs = [run["run_dir"] for item in evidence for run in item["runs"]]
    assert len(set(run_dirs)) == len(run_dirs)
    assert all(Path(d).parent == folder / "runs" and (Path(d) / "marker").read_text() == "alpha"
               for d in run_dirs), run_dirs
    record = _record(tmp_path, "alpha")
    assert search.outcome == record.verdict == "winner"
    assert record.recommended["key"] == INT8.key
    assert record.commands == {INT8.key: {"run": "python run.py --sut int8-a", "vendor": None}}
    assert all(Path(d).parent == folder / "runs" for d in record.recommended["run_dirs"])
    assert (folder / "pareto.png").read_bytes().startswith(b"\x89PNG")
    assert search.row() == ["alpha", INT8.key, record.recommended["objective"]["text"]]
    assert not work_folder("alpha", search.job, str(folder)).exists()  # sent, then removed
    assert work_folder("alpha", search.job, str(folder)).parent == node_tmp


def test_a_search_cut_off_resumes_from_the_driver_evidence_without_measuring_twice(
        tmp_path: Path, monkeypatch, node_tmp) -> None:
    """The node's search stops at its 5th run (its process lost); its folder is gone too (a
    restarted machine): the rerun gets the driver's evidence, keeps the earlier runs' numbers
    and measures only what is left, ending where an uninterrupted search ends."""
    import shutil

    from quantmark.recommend.cluster_node import work_folder

    monkeypatch.setenv(NODE_ENV, "alpha")
    reference = tmp_path / "reference"
    uninterrupted = _node_search(reference)
    _stream(uninterrupted, uninterrupted.job)
    whole = _runs(_evidence(reference, "alpha"))

    out = tmp_path / "out"
    monkeypatch.setenv(STOP_ENV, "5")
    first = _node_search(out)
    with pytest.raises(KeyboardInterrupt):
        _stream(first, first.job)
    saved = _evidence(out, "alpha")
    assert sum(_runs(saved).values()) == 4
    shutil.rmtree(work_folder("alpha", first.job, str(first.folder)))
    before = len(_log(out))

    monkeypatch.delenv(STOP_ENV)
    second = _node_search(out)
    assert _stream(second, second.job)[-1] == "answer"
    again = _log(out)[before:]
    final = _evidence(out, "alpha")
    assert _runs(final) == whole
    assert Counter(line["name"] for line in again if line["what"] == "run") == \
        _runs(final) - _runs(saved)
    known = {Candidate.from_dict(item["candidate"]).artifact for item in saved
             if item["accuracy"]}
    assert known and not known & {line["name"] for line in again if line["what"] == "accuracy"}
    run_dirs = [run["run_dir"] for item in final for run in item["runs"]]
    assert len(set(run_dirs)) == len(run_dirs)  # the resumed runs' numbers were not reused
    assert all((Path(d) / "marker").is_file() for d in run_dirs
               if d not in {run["run_dir"] for item in saved for run in item["runs"]})
    assert _record(out, "alpha").recommended["key"] == INT8.key


def test_a_node_where_no_candidate_meets_the_limits_says_which_binds(tmp_path: Path,
                                                                      monkeypatch,
                                                                      node_tmp) -> None:
    from quantmark.recommend.cluster import EXIT

    monkeypatch.setenv(NODE_ENV, "alpha")
    search = _node_search(tmp_path)
    # every candidate is slower; int8-b breaks the accuracy limit too: int8-a is closest
    limits = {**search.job.config["limits"], "latency_ms": 2.0}
    job = dataclasses.replace(search.job, config={**search.job.config, "limits": limits})
    assert _stream(search, job)[-1] == "answer"
    assert search.outcome == "infeasible" and EXIT[search.outcome] == 1
    assert search.row() == ["alpha", f"none fits (latency_ms binds; closest: {INT8.key})", "-"]


def test_a_node_of_another_version_answers_in_one_line(tmp_path: Path, node_tmp) -> None:
    search = _node_search(tmp_path)
    assert _stream(search, search.job, version="0.0.1") == ["refused"]
    assert search.outcome == "refused" and "install the same version on both" in search.message
    assert search.row()[1].startswith("refused: node alpha runs quantmark ")
    assert not (search.folder / "recommendation.json").exists()


def test_progress_lines_off_a_terminal_name_their_node() -> None:
    import io

    from rich.console import Console

    from quantmark.recommend.cluster import progress_lines

    out = io.StringIO()
    with progress_lines(Console(file=out, width=200), ["alpha"]) as show:
        show("alpha", {"done": 3, "planned": 12, "spent_s": 75.0, "eta_s": 600.0,
                       "message": "round 2/30: int8-a b1 tauto (2 racing)"})
    assert out.getvalue() == ("[alpha 3/12, spent 00:01:15, ETA 00:10:00] round 2/30: "
                              "int8-a b1 tauto (2 racing)\n")


def test_without_cluster_neither_ray_nor_the_fleet_is_imported(tmp_path: Path) -> None:
    """A local search (stand-ins in the command, as its own tests install them) to its end."""
    from tests.conftest import run_json

    found = run_json(f"""
        import json, sys
        from quantmark import cli
        from quantmark.commands import recommend as verb
        from quantmark.recommend.candidates import Candidate
        from tests.quantmark.recommend.standins import (PlantedAccuracy, PlantedSpeed, Space,
                                                        StandInMeasurer)
        space = Space([Candidate("fp32-a"), Candidate("int8-a")],
                      {{"fp32-a b1 tauto": PlantedSpeed(20.0, 50.0),
                        "int8-a b1 tauto": PlantedSpeed(10.0, 100.0)}},
                      {{"fp32-a": PlantedAccuracy(0.0, 0.0), "int8-a": PlantedAccuracy(-0.2)}})
        verb.make_space = lambda args, model: space.candidates
        verb.make_measurer = lambda args, model, folder: StandInMeasurer(space, seed=1)
        verb.reproduce = lambda candidate, args, model, run_dirs: {{"run": "x", "vendor": None}}
        code = cli.main(["recommend", "--scenario", "SingleStream", "--model", "{MODEL}",
                         "--output", {str(tmp_path)!r}])
        print(json.dumps({{"code": code, "ray": "ray" in sys.modules,
                          "fleet": "quantmark.recommend.cluster" in sys.modules}}))
    """)
    assert found == {"code": 0, "ray": False, "fleet": False}


# ---------------------------------------------------------------------------- on Ray


@pytest.fixture
def local_fleet() -> Any:
    """A head that runs nothing, nodes added by the test, their workers' stand-in runs slow
    enough to be interrupted between two."""
    from tests.quantmark.sweep.fleet.conftest import LocalFleet

    saved = os.environ.get(RUN_DELAY_ENV)
    os.environ[RUN_DELAY_ENV] = "0.4"  # the nodes' workers inherit it
    fleet = LocalFleet()
    yield fleet
    fleet.shutdown()
    if saved is None:
        os.environ.pop(RUN_DELAY_ENV, None)
    else:
        os.environ[RUN_DELAY_ENV] = saved


def _command(address: str, out: Path) -> list[str]:
    return [sys.executable, "run.py", "recommend", "--cluster", address, "--scenario", SCENARIO,
            "--model", MODEL, "--max-accuracy-drop", "1", "--output", str(out)]


def _recommend(address: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    from tests.conftest import ROOT

    return subprocess.run(_command(address, out), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, PARTS_ENV: PARTS})


def _start(address: str, out: Path) -> subprocess.Popen:
    from tests.conftest import ROOT, sigint_as_at_a_terminal

    return subprocess.Popen(_command(address, out), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, PARTS_ENV: PARTS},
                            preexec_fn=sigint_as_at_a_terminal)


def _wait_for(condition: Any, driver: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the nodes' evidence never arrived"
        time.sleep(0.1)


def _answer_row(output: str, node: str, text: str) -> bool:
    """The summary table has a row of ``node`` naming ``text``."""
    table = output.rsplit("each node's answer", 1)[-1]
    return any(node in line and text in line for line in table.splitlines())


def _check_answers(out: Path, nodes: tuple[str, ...]) -> None:
    """Each node's answer is its own planted one, its runs in its own folder, the runs its
    evidence names are those it measured (each once)."""
    measured = _log(out)
    for node in nodes:
        record = _record(out, node)
        assert record.recommended["key"] == WINNER[node].key, record.to_dict()
        assert record.machine["node"] == node
        evidence = _evidence(out, node)
        for run in (run for item in evidence for run in item["runs"]):
            assert Path(run["run_dir"]).is_relative_to(_folder(out, node)), run
            assert (Path(run["run_dir"]) / "marker").read_text() == node
        assert sum(_runs(evidence).values()) <= sum(
            line["what"] == "run" and line["node"] == node for line in measured)


@pytest.mark.slow
def test_each_node_searches_for_itself_and_gets_its_own_answer(local_fleet, tmp_path):
    local_fleet.add("alpha", suts=[])
    local_fleet.add("beta", suts=[])
    proc = _recommend(local_fleet.address, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    _check_answers(tmp_path, ("alpha", "beta"))
    assert "Recommendation: digits-cnn, SingleStream, on alpha" in proc.stdout
    assert "Recommendation: digits-cnn, SingleStream, on beta" in proc.stdout
    assert _answer_row(proc.stdout, "alpha", INT8.key), proc.stdout[-2000:]
    assert _answer_row(proc.stdout, "beta", FP32.key), proc.stdout[-2000:]
    assert any(line.startswith("[beta ") and " ETA " in line for line in proc.stdout.splitlines())
    measured = _log(tmp_path)
    for node in ("alpha", "beta"):  # no run measured twice, none lost
        assert _runs(_evidence(tmp_path, node)) == Counter(
            line["name"] for line in measured if line["node"] == node and line["what"] == "run")


@pytest.mark.slow
def test_ctrl_c_then_the_same_command_resumes_each_node_from_its_streamed_evidence(
        local_fleet, tmp_path):
    """Ctrl-C once each node has measured 4 runs (or finished: on a busy machine one node's
    search can end before the other's has started), never after both ended. The same command
    then resumes each interrupted node from its saved evidence, measuring only what it lacked,
    and keeps a finished node's answer without measuring anything for it."""
    local_fleet.add("alpha", suts=[])
    local_fleet.add("beta", suts=[])
    nodes = ("alpha", "beta")
    driver = _start(local_fleet.address, tmp_path)
    try:
        _wait_for(lambda: all(_answered(tmp_path, node)
                              or sum(_runs(_evidence(tmp_path, node)).values()) >= 4
                              for node in nodes), driver)
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, output[-3000:]
    assert "run the same command to resume" in output
    finished = {node for node in nodes if _answered(tmp_path, node)}
    assert finished != set(nodes), output[-3000:]  # one node at least was interrupted
    saved = {node: _evidence(tmp_path, node) for node in nodes}
    first = {line["pid"] for line in _log(tmp_path)}  # the interrupted searches' processes

    again = _recommend(local_fleet.address, tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _check_answers(tmp_path, nodes)
    later = [line for line in _log(tmp_path) if line["pid"] not in first]
    for node in finished:
        assert f"node {node}: its answer is kept in" in again.stdout
        assert not [line for line in later if line["node"] == node]
    for node, before in saved.items():
        if node in finished:
            continue
        assert f"node {node}: resuming: {sum(_runs(before).values())} runs" in again.stdout
        after = _runs(_evidence(tmp_path, node))
        assert Counter(line["name"] for line in later
                       if line["node"] == node and line["what"] == "run") == \
            after - _runs(before)  # only what the saved evidence lacked
        known = {Candidate.from_dict(item["candidate"]).artifact for item in before
                 if item["accuracy"]}
        assert not known & {line["name"] for line in later
                            if line["node"] == node and line["what"] == "accuracy"}


def _answered(out: Path, node: str) -> bool:
    return (_folder(out, node) / "recommendation.json").exists()


@pytest.mark.slow
def test_a_lost_node_keeps_its_evidence_and_resumes_later_the_others_finish(local_fleet,
                                                                            tmp_path):
    local_fleet.add("alpha", suts=[])
    local_fleet.add("beta", suts=[])
    driver = _start(local_fleet.address, tmp_path)
    try:
        _wait_for(lambda: sum(_runs(_evidence(tmp_path, "beta")).values()) >= 2, driver)
        local_fleet.remove("beta")
        output, _ = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, output[-3000:]
    lost = [line for line in output.splitlines() if line.startswith("node beta: left the")]
    assert len(lost) == 1 and "run the same command to resume it" in lost[0], output[-3000:]
    kept = sum(_runs(_evidence(tmp_path, "beta")).values())
    assert kept >= 2 and f"({kept} runs) is kept in" in lost[0]
    assert not (_folder(tmp_path, "beta") / "recommendation.json").exists()
    _check_answers(tmp_path, ("alpha",))
    assert _answer_row(output, "beta", "lost")

    local_fleet.add("beta", suts=[])  # back: the same command resumes it, alpha's is kept
    again = _recommend(local_fleet.address, tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "node alpha: its answer is kept" in again.stdout
    assert f"node beta: resuming: {kept} runs" in again.stdout
    _check_answers(tmp_path, ("alpha", "beta"))


@pytest.mark.parametrize("address, says", [
    (None, "nothing answers at 127.0.0.1:{port} (Connection refused); start the cluster's "
           "head there with python run.py node --head, or fix --cluster"),
    ("head-without-port", "--cluster head-without-port: use auto (the cluster this machine "
                          "joined), HOST:PORT (its head) or ray://HOST:PORT (Ray Client)"),
])
def test_a_bad_address_is_one_line_and_exit_2(tmp_path: Path, address: str | None,
                                              says: str) -> None:
    import socket

    from tests.conftest import run_cli

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    proc = run_cli("recommend", "--scenario", SCENARIO, "--model", MODEL, "--cluster",
                   address or f"127.0.0.1:{port}", "--output", str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "error: " + says.format(port=port)
