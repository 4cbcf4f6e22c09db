"""``run.py node``: the ray start command with this machine's facts as resources."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _resources(stderr: str) -> tuple[str, dict[str, float]]:
    line = next(line for line in stderr.splitlines() if " start " in line)
    return line, json.loads(line.split("--resources=", 1)[1].split("' ", 1)[0])


def test_a_head_advertises_this_machine_and_one_slot():
    proc = run_cli("node", "--head", "--name", "lab box", "--dry-run", timeout=60)
    assert proc.returncode == 0, proc.stderr
    line, resources = _resources(proc.stderr)
    assert "--head --port=6379" in line and line.split()[1].endswith("ray")
    assert resources["quantmark_slot"] == 1.0
    assert resources["quantmark_node:lab-box"] == 1.0
    assert resources[f"quantmark_arch:{platform.machine().lower()}"] == 1.0
    assert resources["quantmark_sut:ort-int8"] == 1.0  # the SUTs that can run here


def test_a_worker_joins_and_a_coordinating_head_takes_no_cells():
    proc = run_cli("node", "--address", "10.0.0.5:6379", "--no-cells", "--dry-run", "--",
                   "--num-gpus=1", timeout=60)
    assert proc.returncode == 0, proc.stderr
    line, resources = _resources(proc.stderr)
    assert "--address=10.0.0.5:6379" in line and line.endswith("--num-gpus=1")
    assert "quantmark_slot" not in resources


def test_head_or_address_is_required():
    proc = run_cli("node", "--dry-run", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: run.py node needs --head (the first machine) or "
                                   "--address HEAD:6379 (every other one)")


@pytest.mark.slow
@pytest.mark.alone  # a Ray head on the default port: no other Ray cluster beside it
def test_the_readme_commands_start_a_head_and_sweep_on_it(fleet_env, tmp_path):
    """``run.py node --head`` for real, then ``run.py sweep --cluster HOST:PORT``."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = run_cli("node", "--head", "--port", str(port), "--name", "head-box", "--",
                      "--include-dashboard=false", "--num-cpus=1", env=fleet_env, timeout=180)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        out = tmp_path / "sweep"
        proc = run_cli("sweep", "--cluster", f"127.0.0.1:{port}", "--models", "mobilenetv2",
                       "--suts", "trivial-fp32", "--scenarios", "Offline", "--no-accuracy",
                       "--seconds", "1", "--output", str(out), env=fleet_env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cells = json.loads((out / "sweep.json").read_text())["cells"]
        assert [(e["status"], e["node"]) for e in cells.values()] == [("ok", "head-box")]
    finally:
        ray = Path(sys.executable).with_name("ray")
        subprocess.run([str(ray), "stop", "--force"], capture_output=True, timeout=120)
