"""A framework added from outside quantmark: a package and an entry point, nothing else.

``tests/sut/trivial_framework`` (a ``suts`` data module and a backend returning fixed scores) is
copied into a temporary folder beside a minimal ``quantmark_trivial-0.1.dist-info`` whose
``entry_points.txt`` names it in the ``quantmark.frameworks`` group. With that folder on
PYTHONPATH a child process lists the trivial SUT as runnable and runs it through LoadGen, VALID,
without a line of quantmark changed: what adding a framework costs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli, run_json


@pytest.fixture(scope="module")
def plugin_path(trivial_plugin_path: Path) -> Path:
    return trivial_plugin_path


def _env(plugin_path: Path, cache: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(plugin_path), "QUANTMARK_CACHE": str(cache)}


def test_the_plugin_is_registered_without_importing_its_backend(plugin_path):
    result = run_json("""
        import json, sys
        from quantmark.sut import registry
        info = registry.get_sut("trivial-fp32")
        print(json.dumps({"package": info.package, "ok": registry.availability(info)[0],
                          "baseline": registry.fp32_baseline("trivial-fp32"),
                          "backend_imported": "trivial_framework.backend" in sys.modules,
                          "factory": registry.load_factory(info).__module__,
                          "distributions": info.distributions}))
    """, env={"PYTHONPATH": os.pathsep.join((str(ROOT), str(plugin_path)))})
    assert result == {"package": "trivial_framework", "ok": True, "baseline": "trivial-fp32",
                      "backend_imported": False, "factory": "trivial_framework.backend",
                      "distributions": ["quantmark-trivial"]}


def test_the_plugin_sut_is_listed_and_runs_valid(plugin_path, quantmark_cache, tmp_path):
    env = _env(plugin_path, quantmark_cache)
    listed = run_cli("--list-suts", env=env)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert re.search(r"trivial-fp32 .*trivial .*yes", listed.stdout), listed.stdout[-3000:]
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    out = tmp_path / "results"
    proc = run_cli("--scenario", "SingleStream", "--sut", "trivial-fp32", "--model",
                   "mobilenetv2", "--user-conf", str(conf), "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = list(out.glob("*-trivial-fp32/mobilenetv2/SingleStream/performance/run_1/"
                          "results.json"))
    assert len(found) == 1, list(out.rglob("*"))
    results = json.loads(found[0].read_text())
    assert results["summary"]["validity"] == "VALID", results["summary"]
    assert results["sut"]["framework"] == "trivial"
    assert results["sut"]["fp32_baseline"] == "trivial-fp32"
    assert results["software"]["quantmark-trivial"] == "0.1"
