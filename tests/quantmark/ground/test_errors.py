"""Environment faults are named with the fix that moves them: --output for the results tree,
$QUANTMARK_CACHE for the cache."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from quantmark.ground.faults import environment_fault
from quantmark.ground.paths import cache_dir
from tests.conftest import run_cli


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("QUANTMARK_CACHE", str(root))
    return root


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOSPC])
def test_a_fault_in_the_cache_names_quantmark_cache(cache: Path, code: int) -> None:
    fault = environment_fault(OSError(code, "fault", str(cache / "models" / "x.onnx")))
    assert fault is not None and "QUANTMARK_CACHE" in fault and "--output" not in fault
    assert str(cache / "models" / "x.onnx") in fault


def test_a_fault_in_the_results_tree_still_names_output(cache: Path, tmp_path: Path) -> None:
    fault = environment_fault(OSError(errno.EACCES, "fault", str(tmp_path / "out" / "x")))
    assert fault is not None and "--output" in fault and "QUANTMARK_CACHE" not in fault


@pytest.mark.parametrize("below", ["", "sub"])
def test_a_file_where_the_cache_goes_is_named(cache: Path, below: str) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("not a folder")
    with pytest.raises(OSError) as raised:
        if below:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("QUANTMARK_CACHE", str(cache / below))
                cache_dir("models")
        else:
            cache_dir("models")
    fault = environment_fault(raised.value)
    assert fault is not None and f"in the way at {cache}," in fault
    assert "QUANTMARK_CACHE" in fault and "--output" not in fault


def test_a_run_with_the_cache_at_a_file_exits_2_naming_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache-file"
    cache.write_text("not a folder")
    proc = run_cli("--scenario", "Offline", "--sut", "ort-fp32", "--output",
                   str(tmp_path / "out"), env={"QUANTMARK_CACHE": str(cache)}, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "QUANTMARK_CACHE" in last and str(cache) in last and "--output" not in last
    assert cache.read_text() == "not a folder"
