"""Shared test helpers: run Python code in a fresh process (LoadGen: one test per process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.digits_model import (
    CALIBRATION_COUNT,
    ArrayCalibration,
    DigitsData,
    load_digits_data,
    train_digits_model,
)

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, timeout: float = 120, env: dict[str, str] | None = None,
               cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter with the project importable."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)


def run_json(code: str, timeout: float = 120, **kwargs) -> dict:
    """Run ``code``; its last stdout line must be a JSON object, which is returned."""
    proc = run_python(code, timeout=timeout, **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT, as Ctrl-C at a terminal
    would: a shell's background job (a CI script started with ``&``) begins with SIGINT
    ignored, and Python (and its children) would inherit that and never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, timeout: float = 600, env: dict[str, str] | None = None,
            cwd: str | None = None) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` as a user would type it."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, cwd=cwd)


TRIVIAL_DIST_INFO = "quantmark_trivial-0.1.dist-info"
TRIVIAL_METADATA = "Metadata-Version: 2.1\nName: quantmark-trivial\nVersion: 0.1\n"
TRIVIAL_ENTRY_POINTS = "[quantmark.frameworks]\ntrivial = trivial_framework.suts\n"


@pytest.fixture(scope="session")
def trivial_plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site folder holding ``tests/sut/trivial_framework`` as an installed distribution
    (a ``quantmark.frameworks`` entry point): put it on PYTHONPATH and its SUTs exist."""
    import shutil

    site = tmp_path_factory.mktemp("plugin-site")
    shutil.copytree(ROOT / "tests" / "sut" / "trivial_framework", site / "trivial_framework",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (site / TRIVIAL_DIST_INFO).mkdir()
    (site / TRIVIAL_DIST_INFO / "METADATA").write_text(TRIVIAL_METADATA)
    (site / TRIVIAL_DIST_INFO / "entry_points.txt").write_text(TRIVIAL_ENTRY_POINTS)
    return site


@pytest.fixture(scope="session")
def quantmark_cache(tmp_path_factory) -> Path:
    """One cache for the whole session (models, builtin dataset), never the user's."""
    path = Path(os.environ.get("QUANTMARK_TEST_CACHE") or tmp_path_factory.mktemp("qm-cache"))
    os.environ["QUANTMARK_CACHE"] = str(path)
    return path


@pytest.fixture(scope="session")
def quick_all_tests(tmp_path_factory, quantmark_cache) -> tuple[subprocess.CompletedProcess, Path]:
    """``run.py --all-tests`` (quick) for ort-int8 Offline on ResNet-50: performance, accuracy,
    TEST01 and TEST04. Shared by the audit CLI and the packaging tests. (A model as small as
    Lite0 runs ~7% faster when TEST04 feeds it one sample over and over: the input stays in
    cache. ResNet-50's compute dwarfs that, as in the official run.)"""
    out = tmp_path_factory.mktemp("all-tests")
    # 15 s runs, not the quick 5 s: TEST01 compares two runs within 10%, and on a shared VM
    # throughput over a few seconds swings that much (a 9 s pair once differed by 10.4%)
    conf = out.parent / "all-tests.conf"
    conf.write_text("*.Offline.min_duration = 15000\n")
    proc = run_cli("--all-tests", "--scenario", "Offline", "--sut", "ort-int8", "--model",
                   "resnet50", "--user-conf", str(conf), "--output", str(out), timeout=1200)
    return proc, out


SMALL_SWEEP = ("--models", "efficientnet-lite0", "--suts", "ort-fp32,ort-int8,trt-fp16",
               "--scenarios", "Offline,SingleStream", "--batch-sizes", "1,8", "--seconds", "2")


@pytest.fixture(scope="session")
def small_sweep(tmp_path_factory, quantmark_cache) -> tuple[subprocess.CompletedProcess, Path]:
    """``run.py sweep`` on the pretrained Lite0: ort-fp32 and ort-int8 (accuracy, Offline at
    batch 1 and 8, SingleStream) and trt-fp16, which cannot run here (explained rows)."""
    out = tmp_path_factory.mktemp("sweep") / "sweep"
    proc = run_cli("sweep", *SMALL_SWEEP, "--output", str(out), timeout=1200)
    return proc, out


# the digits model every framework runs (tests/sut, tests/models)

@pytest.fixture(scope="session")
def digits_data() -> DigitsData:
    return load_digits_data()


@pytest.fixture(scope="session")
def digits_weights(tmp_path_factory: pytest.TempPathFactory, digits_data: DigitsData) -> Path:
    """A state_dict of the digits CNN, trained once per session (seconds)."""
    return train_digits_model(tmp_path_factory.mktemp("digits") / "digits-cnn.pt", digits_data)


@pytest.fixture(scope="session")
def digits_calibration(digits_data: DigitsData) -> ArrayCalibration:
    return ArrayCalibration(digits_data.train_x[:CALIBRATION_COUNT])
