"""A sweep across a local Ray cluster of two nodes: placement, timing isolation, the merged
report, a node lost mid-cell. Cells run the trivial plugin framework: the plumbing is under
test, not a model."""

from __future__ import annotations

import json
import os
import platform
import time
from itertools import pairwise
from pathlib import Path

import pytest

from tests.conftest import run_cli, sigint_as_at_a_terminal
from tests.quantmark.sweep.fleet.conftest import TRIVIAL_SUTS

BOARD = "Test Board 9"
MODELS = "mobilenetv2,efficientnet-lite0"


def _sweep(address: str, out: Path, env: dict[str, str], *args: str, timeout: float = 600):
    return run_cli("sweep", "--cluster", address, "--no-accuracy", "--seconds", "1",
                   "--output", str(out), *args, env=env, timeout=timeout)


def _results(out: Path) -> dict[str, dict]:
    """Each finished cell's results.json, by cell id."""
    manifest = json.loads((out / "sweep.json").read_text())
    return {cell_id: json.loads((out / entry["run_dir"] / "results.json").read_text())
            for cell_id, entry in manifest["cells"].items() if entry["status"] == "ok"}


@pytest.mark.slow
def test_cells_run_where_they_fit_one_at_a_time_per_node(local_fleet, fleet_env, tmp_path):
    local_fleet.add("alpha")
    local_fleet.add("beta", board={"model": BOARD})
    out = tmp_path / "sweep"
    proc = _sweep(local_fleet.address, out, fleet_env, "--models", MODELS,
                  "--suts", "trivial-fp32,trivial-faulty",
                  "--place", "trivial-fp32:board=test-board-9",
                  "--place", f"trivial-faulty:node=alpha,arch={platform.machine()}")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    manifest = json.loads((out / "sweep.json").read_text())
    cells = manifest["cells"]
    assert len(cells) == 8 and all(e["status"] == "ok" for e in cells.values()), cells
    results = _results(out)
    windows: dict[str, list[tuple[float, float]]] = {}
    for cell_id, entry in cells.items():
        node = results[cell_id]["machine"]["node"]
        assert node == entry["node"] == ("beta" if entry["sut"] == "trivial-fp32" else "alpha")
        times = results[cell_id]["times"]
        windows.setdefault(node, []).append((times["loadgen_started_at"],
                                             times["loadgen_ended_at"]))
    for node, spans in windows.items():  # no two LoadGen windows overlap on one node
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in pairwise(spans)), (node, spans)
    report = (out / "report.md").read_text()
    machines = report.split("## Machines", 1)[1].split("##", 1)[0]
    assert "alpha (" in machines and "beta (" in machines, machines


def _runner_on(node: str) -> int | None:
    """The pid of a test process (``quantmark.run.test_process``) measuring on fleet node
    ``node``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (b"quantmark.run.test_process" in command
                and f"QUANTMARK_NODE={node}".encode() in environ):
            return int(proc.name)
    return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_a_node_lost_mid_cell_reruns_the_cell_elsewhere(local_fleet, fleet_env, tmp_path):
    import subprocess
    import sys

    local_fleet.add("alpha")
    local_fleet.add("beta")
    out = tmp_path / "sweep"
    command = [sys.executable, "run.py", "sweep", "--cluster", local_fleet.address,
               "--no-accuracy", "--seconds", "4", "--output", str(out),
               "--models", "mobilenetv2", "--suts", "trivial-fp32", "--scenarios", "Offline",
               "--repeats", "2"]
    driver = subprocess.Popen(command, cwd=Path(__file__).parents[4], env={**os.environ,
                              **fleet_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        deadline, victim = time.monotonic() + 240, None
        while victim is None and time.monotonic() < deadline and driver.poll() is None:
            found = {node: _runner_on(node) for node in ("alpha", "beta")}
            victim = next(((node, pid) for node, pid in found.items() if pid), None)
            time.sleep(0.2)
        assert victim, "no cell started"
        node, pid = victim
        local_fleet.remove(node)  # the node and its Ray worker die mid-cell
        output, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not _alive(pid), "the lost node's test process outlived it"
    assert driver.returncode == 0, output[-3000:]
    cells = json.loads((out / "sweep.json").read_text())["cells"]
    assert [e["status"] for e in cells.values()] == ["ok", "ok"], cells
    survivor = "beta" if node == "alpha" else "alpha"
    assert all(e["node"] == survivor for e in cells.values()), cells
    assert max(e["attempts"] for e in cells.values()) == 2, cells
    assert f"node {node} left the cluster" in output, output[-3000:]


@pytest.mark.slow
def test_a_cell_no_node_fits_is_explained_and_the_sweep_resumes(local_fleet, fleet_env,
                                                                 tmp_path):
    local_fleet.add("alpha", suts=["trivial-fp32"])  # trivial-faulty is not installed there
    out = tmp_path / "sweep"
    args = ("--models", "mobilenetv2", "--suts", "trivial-fp32,trivial-faulty",
            "--scenarios", "Offline")
    proc = _sweep(local_fleet.address, out, fleet_env, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads((out / "sweep.json").read_text())["cells"]
    faulty = cells["mobilenetv2/trivial-faulty/Offline-b8-r1"]
    assert faulty["status"] == "unavailable"
    assert faulty["message"] == ("no node of the cluster has sut=trivial-faulty (nodes: "
                                 "alpha); start one with python run.py node")
    assert cells["mobilenetv2/trivial-fp32/Offline-b8-r1"]["status"] == "ok"
    again = _sweep(local_fleet.address, out, fleet_env, *args)  # resume: nothing finished reruns
    assert again.returncode == 0 and "1 of 2 cells already finished" in again.stdout
    assert json.loads((out / "sweep.json").read_text())["cells"][
        "mobilenetv2/trivial-fp32/Offline-b8-r1"] == cells["mobilenetv2/trivial-fp32/Offline-b8-r1"]


def test_no_cluster_at_the_address_is_one_line(tmp_path):
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    proc = run_cli("sweep", "--models", "mobilenetv2", "--suts", "ort-fp32", "--cluster",
                   f"127.0.0.1:{port}", "--output", str(tmp_path / "s"), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: nothing answers at 127.0.0.1:{port} (Connection "
                                   "refused); start the cluster's head there with python run.py "
                                   "node --head, or fix --cluster")


def test_without_cluster_ray_is_never_imported(fleet_env, tmp_path):
    from tests.conftest import run_json

    code = f"""
        import json, sys
        from rich.console import Console
        from quantmark.sweep.driver import run_sweep
        from quantmark.sweep.plan import build_spec
        spec = build_spec({{"models": "mobilenetv2", "suts": "trivial-fp32", "accuracy": False,
                            "scenarios": "Offline", "seconds": 0.5,
                            "output": {str(tmp_path / "local")!r}}})
        outcome = run_sweep(spec, console=Console(stderr=True))
        print(json.dumps({{"counts": outcome.counts, "ray": "ray" in sys.modules}}))
    """
    result = run_json(code, timeout=300, env=fleet_env)
    assert result == {"counts": {"ok": 1}, "ray": False}


@pytest.mark.slow
def test_gpu_cells_go_to_the_gpu_node_and_an_ensemble_stays_with_its_members(
        local_fleet, fleet_env, tmp_path):
    """A node that says it has a GPU gets the GPU SUT's cells (here its own check then finds
    no GPU and explains the cell, naming the node; on a GPU box with TensorRT the cell runs);
    an ensemble's cells and its members alone all run on one node."""
    local_fleet.add("alpha")
    local_fleet.add("gpu-box", suts=["trt-fp16", *TRIVIAL_SUTS], gpus=1)
    out = tmp_path / "sweep"
    proc = _sweep(local_fleet.address, out, fleet_env, "--models", "mobilenetv2",
                  "--suts", "trt-fp16", "--scenarios", "Offline", "--ensemble-modes",
                  "sequential", "--ensemble", "mobilenetv2@trivial-fp32,efficientnet-lite0@"
                  "trivial-faulty")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    cells = json.loads((out / "sweep.json").read_text())["cells"]
    gpu = cells["mobilenetv2/trt-fp16/Offline-b8-r1"]
    assert gpu["node"] == "gpu-box" and gpu["status"] in ("ok", "unavailable"), gpu
    if gpu["status"] == "unavailable":
        assert gpu["message"].startswith("on gpu-box: needs an NVIDIA GPU"), gpu
    family = [e for e in cells.values() if e["sut"] != "trt-fp16"]
    assert len(family) == 3 and all(e["status"] == "ok" for e in family), family
    assert len({e["node"] for e in family}) == 1, family


def _finished(manifest: Path) -> int:
    """How many cells the manifest records as finished (the sweep writes it before its first
    cell too, since it records what each cell measures)."""
    try:
        cells = json.loads(manifest.read_text())["cells"]
    except (OSError, ValueError, KeyError):  # not written yet, or caught mid-replace
        return 0
    return sum(entry.get("status") == "ok" for entry in cells.values())


@pytest.mark.slow
def test_ctrl_c_keeps_finished_cells_and_stops_the_running_one(local_fleet, fleet_env,
                                                               tmp_path):
    import signal
    import subprocess
    import sys

    local_fleet.add("alpha")
    out = tmp_path / "sweep"
    command = [sys.executable, "run.py", "sweep", "--cluster", local_fleet.address,
               "--no-accuracy", "--seconds", "3", "--output", str(out), "--models",
               "mobilenetv2", "--suts", "trivial-fp32", "--scenarios", "Offline",
               "--repeats", "3"]
    driver = subprocess.Popen(command, cwd=Path(__file__).parents[4],
                              env={**os.environ, **fleet_env}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              preexec_fn=sigint_as_at_a_terminal)
    try:
        manifest, deadline, pid = out / "sweep.json", time.monotonic() + 240, None
        while time.monotonic() < deadline and driver.poll() is None and pid is None:
            if _finished(manifest):  # the first cell is in: wait for the second to start
                pid = _runner_on("alpha")
            time.sleep(0.2)
        assert pid, "the second cell never started"
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, output[-3000:]
    assert "run the same command to resume" in output
    cells = json.loads(manifest.read_text())["cells"]
    assert [e["status"] for e in cells.values()] == ["ok"], cells
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid), "the cancelled cell's test process went on measuring"
