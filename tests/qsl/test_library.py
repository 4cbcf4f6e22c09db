from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantmark.qsl.calibration_sets import calibration_for
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.library import QuerySampleLibrary, SampleNotLoadedError
from quantmark.qsl.preprocess import PreprocessRecipe, decode_and_crop, normalise

REPO = Path(__file__).resolve().parents[2]


def test_load_unload_really_changes_memory() -> None:
    samples = np.arange(10 * 3 * 2 * 2, dtype=np.float32).reshape(10, 3, 2, 2)
    qsl = QuerySampleLibrary.from_arrays(samples, np.arange(10), performance_sample_count=4)
    assert qsl.total_count == 10 and qsl.performance_count == 4
    assert qsl.loaded_count == 0 and qsl.loaded_bytes == 0
    with pytest.raises(SampleNotLoadedError):
        qsl.batch([0])
    qsl.load([1, 3, 5, 7])
    assert qsl.loaded_count == 4 and qsl.loaded_bytes == 4 * samples[0].nbytes
    np.testing.assert_array_equal(qsl.batch([7, 1, 1]), samples[[7, 1, 1]])
    qsl.load([3, 8])  # 3 already resident: only 8 is added
    assert qsl.loaded_count == 5
    qsl.unload([1, 3])
    assert qsl.loaded_count == 3 and qsl.loaded_bytes == 3 * samples[0].nbytes
    with pytest.raises(SampleNotLoadedError, match=r"\[1\]"):
        qsl.batch([5, 1])
    np.testing.assert_array_equal(qsl.batch([8, 5, 7]), samples[[8, 5, 7]])
    out = np.empty((2, 3, 2, 2), np.float32)
    assert qsl.batch([5, 8], out=out) is out
    np.testing.assert_array_equal(out, samples[[5, 8]])
    qsl.unload([5, 7, 8])
    assert qsl.loaded_count == 0 and qsl.loaded_bytes == 0
    assert qsl.label(4) == 4 and qsl.labels.dtype == np.int64
    with pytest.raises(IndexError):
        qsl.load([10])


def test_performance_count_capped_by_total() -> None:
    qsl = QuerySampleLibrary.from_arrays(np.zeros((3, 2), np.float32), [0, 1, 2], 1024)
    assert qsl.performance_count == 3


def test_from_dataset_normalises_at_load(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    cal = calibration_for(ds, count=2, seed=0)
    recipe = PreprocessRecipe(mean=(127.0,) * 3, std=(128.0,) * 3)
    qsl = QuerySampleLibrary.from_dataset(ds, recipe, performance_sample_count=6, workers=1)
    assert qsl.total_count == 10 and qsl.performance_count == 6
    assert qsl.labels.tolist() == ds.labels.tolist()
    qsl.load(range(10))
    batch = qsl.batch([9, 0])
    assert batch.shape == (2, 3, 224, 224) and batch.dtype == np.float32
    rel, label = ds.items[9]
    assert rel not in cal.items and qsl.label(9) == label
    np.testing.assert_array_equal(
        batch[0], normalise(decode_and_crop(ds.path(rel), recipe), recipe)
    )


def test_loadgen_accuracy_run(tmp_path: Path) -> None:
    """A LoadGen-constructed QSL under a trivial SUT; own process (one LoadGen test each)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "qsl" / "loadgen_accuracy_run.py"),
            str(tmp_path / "lg"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {
        "entries": 24,
        "correct": 24,
        "distinct": 24,
        "max_loaded": 8,
        "loaded_after": 0,
    }
