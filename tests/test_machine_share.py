"""tests/machine_share.py in a child pytest of two workers: an ``alone`` test never overlaps
another test, a file's tests stay on one worker, and the run's lock folder goes at its end."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.test_conftest import _pytest

pytest.importorskip("xdist")

#: each test writes (worker, start, end) to the folder the run is given
RECORDING = '''
import json
import os
import time
from pathlib import Path

import pytest

OUT = Path(__file__).parent.parent / "out"


def spend(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    (OUT / f"{name}.json").write_text(json.dumps(
        [os.environ["PYTEST_XDIST_WORKER"], start, time.monotonic()]))
'''
ALONE_FILE = RECORDING + '''

@pytest.mark.alone
def test_alone():
    spend("alone", 1.0)
'''


def _shared_file(prefix: str) -> str:
    return RECORDING + "".join(f'''

def test_{prefix}{index}():
    spend("{prefix}{index}", 0.3)
''' for index in range(4))


def test_an_alone_test_overlaps_no_other_and_a_file_stays_on_one_worker(tmp_path: Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "test_b.py").write_text(_shared_file("b"))
    (suite / "test_m.py").write_text(ALONE_FILE)
    (suite / "test_c.py").write_text(_shared_file("c"))
    testrunuid = uuid.uuid4().hex
    proc = _pytest(suite, "-n", "2", "--testrunuid", testrunuid)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert not (Path(tempfile.gettempdir()) / f"quantmark-tests-{testrunuid}").exists()
    spans = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
    assert len(spans) == 9, spans
    _, alone_start, alone_end = spans.pop("alone")
    for name, (_, start, end) in spans.items():
        assert end <= alone_start or start >= alone_end, (name, spans)
    for prefix in "bc":
        assert len({spans[f"{prefix}{i}"][0] for i in range(4)}) == 1, spans


FILLED_ONCE = '''
import os
from pathlib import Path

import pytest

from tests import machine_share

OUT = Path(__file__).parent.parent / "out"


@pytest.fixture(scope="session")
def built(tmp_path_factory, request):
    def fill(folder):
        with open(OUT / "fills.txt", "a") as log:
            log.write(f"{os.environ['PYTEST_XDIST_WORKER']}\\\\n")
        (folder / "made.txt").write_text("made")

    return machine_share.shared_folder(request.config, tmp_path_factory, "made", fill)
'''
USES_IT = '''
import os


def test_uses(built):
    assert (built / "made.txt").read_text() == "made"
    name = os.environ["PYTEST_XDIST_WORKER"]
    (built.parent.parent / f"saw-{name}-{os.getpid()}.txt").write_text(str(built))
'''


def test_a_shared_folder_is_filled_once_for_both_workers(tmp_path: Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text(FILLED_ONCE)
    for name in "abcd":
        (suite / f"test_{name}.py").write_text(USES_IT)
    proc = _pytest(suite, "-n", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert len((out / "fills.txt").read_text().split()) == 1
