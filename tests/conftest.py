"""Shared test helpers: run Python code in a fresh process (LoadGen: one test per process),
per-test time limits, and one cache per test whatever ran before it."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests import machine_share
from tests.digits_model import (
    CALIBRATION_COUNT,
    ArrayCalibration,
    DigitsData,
    load_digits_data,
    train_digits_model,
)

ROOT = Path(__file__).resolve().parent.parent
#: the docs examples' count in the test log (a summary only the xdist controller writes)
pytest_plugins = ("tests.docs.summary",)


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


@pytest.fixture(scope="session", autouse=True)
def quantmark_cache(tmp_path_factory, request) -> Path:
    """One cache for the whole session (models, builtin dataset), never the user's. Exported
    from the session's start (autouse): exported when a test first asked for it, it changed
    the cache under the tests and module fixtures that ran after, in whatever order."""
    path = Path(os.environ.get("QUANTMARK_TEST_CACHE") or _shared_cache(tmp_path_factory,
                                                                           request.config))
    os.environ["QUANTMARK_CACHE"] = str(path)
    return path


def _shared_cache(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    """A fresh cache for this run, one for all its workers (pytest-xdist): a model one worker
    built the other finds (every entry verified by its hash, written by an atomic rename)."""
    if not hasattr(config, "workerinput"):
        return tmp_path_factory.mktemp("qm-cache")
    path = tmp_path_factory.getbasetemp().parent / "qm-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="module", autouse=True)
def _module_cache(request: pytest.FixtureRequest, quantmark_cache: Path) -> Iterator[Path]:
    """Each module, its fixtures and its tests see one cache, whatever ran before: its folder's
    own session cache (``private_cache`` in tests/sut, tests/models), else the shared one.
    (A folder's session fixture exports its cache for the rest of the run: tensorrt's tests
    once saw another folder's cache when run after it.) A function-scoped ``private_cache``
    (tests/qsl) sets its own, test by test."""
    cache = quantmark_cache
    if "private_cache" in request.fixturenames:
        try:
            cache = request.getfixturevalue("private_cache")
        except pytest.fail.Exception:  # function-scoped: it exports itself for each test
            pass
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("QUANTMARK_CACHE", str(cache))
        yield cache


# ----------------------------------------------------------------------------- time limits

#: tests allowed longer than pyproject's default ``timeout`` (unless marked with their own)
LONG_MARKERS = {"slow": 3600, "gpu": 3600, "arm": 4200}
#: session fixtures whose set-up (a CLI run with its own ceiling) lands in the first test
#: that uses them: their ceiling is added to that test's limit
LONG_FIXTURES = {"quick_all_tests": 1200, "small_sweep": 1200}
#: the watchdog fires this long after a test's limit: pytest-timeout had its chance
WATCHDOG_GRACE_S = float(os.environ.get("QUANTMARK_TEST_WATCHDOG_GRACE_S", "120"))
_watchdog_file: IO[str] | None = None


def _default_timeout(config: pytest.Config) -> float:
    try:
        return float(config.getini("timeout") or 0)
    except ValueError:  # pytest-timeout is not installed
        return 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give long tests a limit to match (a ``timeout`` marker of their own wins)."""
    base = _default_timeout(config)
    if not base:
        return
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        limit = base + sum(LONG_FIXTURES.get(name, 0) for name in item.fixturenames)
        for marker, seconds in LONG_MARKERS.items():
            if item.get_closest_marker(marker) is not None:
                limit = max(limit, seconds)
        if limit > base:
            item.add_marker(pytest.mark.timeout(limit))


def _item_timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return _default_timeout(item.config)
    value = marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)
    return float(value or 0)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Keep a handle on the real stderr (output capture is off between tests): the watchdog
    writes there, not into a capture file that dies with the process."""
    global _watchdog_file
    _watchdog_file = os.fdopen(os.dup(2), "w")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist's controller starts a worker: note the run's lock folder (``machine_share``)."""
    machine_share.note_worker(node.config, node.workerinput["testrunuid"])


def pytest_unconfigure(config: pytest.Config) -> None:
    machine_share.remove_lock_folders(config)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The machine, shared with the other worker or alone (``machine_share``; the wait is
    outside the test's time limit). A deadlock that holds the GIL (a C++ thread join waiting
    for a thread that needs it) stops pytest-timeout too: faulthandler's own C thread then
    prints every thread's stack and ends the run, exit code 1, instead of hanging."""
    with machine_share.machine_share(item.config, machine_share.runs_alone(item)):
        limit = _item_timeout(item)
        if limit > 0 and _watchdog_file is not None:
            faulthandler.dump_traceback_later(limit + WATCHDOG_GRACE_S, exit=True,
                                              file=_watchdog_file)
        try:
            return (yield)
        finally:
            faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def photo_subset(tmp_path_factory, quantmark_cache, request) -> Path:
    """Every 6th evaluation crop of the built-in photos (256 of 1536), copied into a folder of
    their own with their val_map.txt and val_groups.txt: end-to-end tests of the machinery
    (compliance tests, ensembles) score 256 crops instead of 1536, a sixth of the accuracy
    runs' time, on the same photos."""
    import shutil

    from quantmark.qsl.builtin import builtin_dataset_root
    from quantmark.qsl.groups import VAL_GROUPS, read_groups

    def fill(out: Path) -> None:
        root = builtin_dataset_root()
        lines = [line for line in (root / "val_map.txt").read_text().splitlines()
                 if line.strip()]
        chosen = lines[::6]
        groups = read_groups(root) or {}
        for line in chosen:
            rel = line.rsplit(maxsplit=1)[0]
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, out / rel)
        (out / "val_map.txt").write_text("".join(f"{line}\n" for line in chosen))
        (out / VAL_GROUPS).write_text("".join(
            f"{rel} {groups[rel]}\n" for rel in (line.rsplit(maxsplit=1)[0] for line in chosen)
            if rel in groups))

    return machine_share.shared_folder(request.config, tmp_path_factory, "photo-subset", fill)


@pytest.fixture(scope="session")
def quick_all_tests(tmp_path_factory, quantmark_cache, photo_subset, request
                    ) -> tuple[subprocess.CompletedProcess, Path]:
    """``run.py --all-tests`` (quick) for ort-int8 Offline on ResNet-50: performance, accuracy,
    TEST01 and TEST04. Shared by the audit CLI and the packaging tests. (A model as small as
    Lite0 runs ~7% faster when TEST04 feeds it one sample over and over: the input stays in
    cache. ResNet-50's compute dwarfs that, as in the official run.)"""
    def make(out: Path) -> subprocess.CompletedProcess:
        # 15 s runs, not the quick 5 s: TEST01 compares two runs within 10%, and on a shared
        # VM throughput over a few seconds swings that much (a 9 s pair once differed by 10.4%)
        conf = out.parent / f"{out.name}.conf"
        conf.write_text("*.Offline.min_duration = 15000\n")
        return run_cli("--all-tests", "--scenario", "Offline", "--sut", "ort-int8", "--model",
                       "resnet50", "--user-conf", str(conf), "--dataset-path",
                       str(photo_subset), "--output", str(out), timeout=1200,
                       env={"QUANTMARK_CACHE": str(quantmark_cache)})

    return machine_share.shared_run(request.config, tmp_path_factory, "all-tests", make)


SMALL_SWEEP = ("--models", "efficientnet-lite0", "--suts", "ort-fp32,ort-int8,trt-fp16",
               "--scenarios", "Offline,SingleStream", "--batch-sizes", "1,8", "--seconds", "2")


@pytest.fixture(scope="session")
def small_sweep(tmp_path_factory, quantmark_cache, request
                ) -> tuple[subprocess.CompletedProcess, Path]:
    """``run.py sweep`` on the pretrained Lite0: ort-fp32 and ort-int8 (accuracy, Offline at
    batch 1 and 8, SingleStream) and trt-fp16, which cannot run here (explained rows)."""
    def make(folder: Path) -> subprocess.CompletedProcess:
        return run_cli("sweep", *SMALL_SWEEP, "--output", str(folder / "sweep"), timeout=1200,
                       env={"QUANTMARK_CACHE": str(quantmark_cache)})

    proc, folder = machine_share.shared_run(request.config, tmp_path_factory, "sweep", make)
    return proc, folder / "sweep"


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
