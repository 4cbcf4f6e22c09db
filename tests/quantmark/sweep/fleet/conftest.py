"""A Ray cluster of quantmark nodes on this one machine (Ray's own ``cluster_utils``), for the
fleet tests. Each node advertises the resources ``run.py node`` would give it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quantmark.ground.fingerprint import machine
from quantmark.sweep.fleet.ray_node import runnable_suts
from quantmark.sweep.placement import node_resources

TRIVIAL_SUTS = ("trivial-fp32", "trivial-faulty")
# GCS notices a lost node within about a second instead of Ray's default 15 s or more
FAST_HEALTH_CHECKS = {"health_check_period_ms": 300, "health_check_failure_threshold": 3,
                      "health_check_initial_delay_ms": 0}


# Ray gives a starting head a fixed 30 s (ray._private.node); beside a busy process on every
# core it can take longer. A second start, after the first one's processes are ended, is a
# start on a machine that is still busy, not a retry of the test's own assertions.
HEAD_STARTS = 2


def _end_ray_children() -> None:
    """End the processes a failed head start left (GCS, raylet, their helpers), so the next
    start finds its ports free."""
    import psutil

    def ray_own(process: psutil.Process) -> bool:
        try:
            return "ray" in " ".join(process.cmdline())
        except psutil.Error:  # gone already
            return False

    children = [child for child in psutil.Process().children(recursive=True) if ray_own(child)]
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=30)


class LocalFleet:
    """A head that runs no cells, and named quantmark nodes added and removed at will."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        for attempt in range(1, HEAD_STARTS + 1):
            try:
                self.cluster = Cluster(initialize_head=True, connect=False, head_node_args={
                    "num_cpus": 0, "_system_config": FAST_HEALTH_CHECKS})
                break
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception here
                if attempt == HEAD_STARTS or "timed out during startup" not in str(exc):
                    raise
                _end_ray_children()
        self.nodes: dict[str, Any] = {}

    @property
    def address(self) -> str:
        return self.cluster.address

    def add(self, name: str, suts: list[str] | None = None, gpus: int = 0,
            **facts: Any) -> dict[str, float]:
        """A node advertising this machine's facts, with ``facts`` changed (a fake board), and
        ``suts`` (default: every SUT that can run here, and the trivial plugin's, which the
        nodes' workers have on their PYTHONPATH but this process does not)."""
        if suts is None:
            suts = runnable_suts() + list(TRIVIAL_SUTS)
        resources = node_resources(name, {**machine(), **facts}, suts)
        self.nodes[name] = self.cluster.add_node(num_cpus=1, num_gpus=gpus, resources=resources)
        return resources

    def remove(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def shutdown(self) -> None:
        self.cluster.shutdown()


@pytest.fixture
def fleet_env(trivial_plugin_path: Path, quantmark_cache: Path) -> Iterator[dict[str, str]]:
    """The environment the nodes' workers (they inherit it) and the driver run with: the
    trivial plugin framework installed, the session's model cache."""
    env = {"PYTHONPATH": os.pathsep.join([str(trivial_plugin_path),
                                          os.environ.get("PYTHONPATH", "")]),
           "QUANTMARK_CACHE": str(quantmark_cache)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def local_fleet(fleet_env: dict[str, str]) -> Iterator[LocalFleet]:
    fleet = LocalFleet()
    yield fleet
    fleet.shutdown()
