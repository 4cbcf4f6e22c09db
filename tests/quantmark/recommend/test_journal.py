"""A search's evidence file resumes by content (``recommend.journal``): a renamed dataset
resumes, a dataset or model file changed in place is refused in one line naming the change,
and a file edited or cut short is moved aside with one warning, never trusted."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.recommend import journal as journal_module
from quantmark.recommend.candidates import Candidate, Evidence, Measurement
from quantmark.recommend.journal import EVIDENCE, Journal

MODEL = "digits-cnn"


def _dataset(folder: Path, seed: int = 0) -> Path:
    """Ten class folders of two 8x8 grey PNGs, the same for the same seed."""
    rng = np.random.default_rng(seed)
    for label in range(10):
        (folder / str(label)).mkdir(parents=True)
        for index in range(2):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), "L").save(
                folder / str(label) / f"{index}.png")
    return folder


def _settings(**flags: Any) -> dict[str, Any]:
    """The flags ``run.py recommend`` keeps as the search's settings (``settings_of``)."""
    return {"model": MODEL, "scenario": "Offline", "seconds": 5.0, "dataset_path": None,
            "model_path": None, "labels": None, "calibration_list": None, "tokenizer": None,
            "preprocess": None, "num_classes": 0, "seq_len": 0, **flags}


def _evidence() -> list[Evidence]:
    return [Evidence(Candidate("ort-fp32", 8), [Measurement(2.0, 500.0, True, False,
                                                            run_dir="runs/a/run_1")])]


def _saved(folder: Path, **flags: Any) -> Path:
    Journal(folder, _settings(**flags)).save(_evidence())
    return folder / EVIDENCE


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                lines.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger(journal_module.__name__)
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


def _refused(folder: Path, **flags: Any) -> str:
    with pytest.raises(UserError) as info:
        Journal(folder, _settings(**flags)).load()
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_renamed_dataset_folder_resumes(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "digits")
    _saved(tmp_path / "search", dataset_path=str(data))
    renamed = data.rename(tmp_path / "digits-copy")
    known = Journal(tmp_path / "search", _settings(dataset_path=str(renamed))).load()
    assert [item.to_dict() for item in known] == [item.to_dict() for item in _evidence()]


def test_a_dataset_changed_in_place_is_refused(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "digits")
    path = _saved(tmp_path / "search", dataset_path=str(data))
    before = path.read_bytes()
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8), "L").save(data / "4" / "0.png")
    message = _refused(tmp_path / "search", dataset_path=str(data))
    assert "measured with other inputs (dataset content changed)" in message
    assert "new --output" in message and path.read_bytes() == before


def test_a_model_file_changed_in_place_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"first")
    _saved(tmp_path / "search", model_path=str(model))
    model.write_bytes(b"second")
    assert "(model file changed)" in _refused(tmp_path / "search", model_path=str(model))


def test_a_labels_file_changed_in_place_is_refused_naming_its_flag(tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("zero\none\n")
    _saved(tmp_path / "search", labels=str(labels))
    labels.write_text("one\nzero\n")
    assert "--labels file's content changed" in _refused(tmp_path / "search",
                                                         labels=str(labels))


def test_another_setting_is_refused_as_before(tmp_path: Path) -> None:
    _saved(tmp_path / "search")
    assert "other settings (seconds)" in _refused(tmp_path / "search", seconds=3.0)


def test_an_edited_evidence_file_is_moved_aside_with_one_warning(tmp_path: Path,
                                                                 warnings: list[str]) -> None:
    """A run's figure changed by hand: valid JSON, but not what the search measured."""
    path = _saved(tmp_path / "search")
    data = json.loads(path.read_text())
    data["evidence"][0]["runs"][0]["samples_per_s"] = 5000.0
    path.write_text(json.dumps(data))
    assert Journal(tmp_path / "search", _settings()).load() == []
    assert len(warnings) == 1 and "edited or cut short" in warnings[0]
    (aside,) = (tmp_path / "search").glob(f"{EVIDENCE}.damaged-*")
    assert json.loads(aside.read_text()) == data and not path.exists()


def test_a_cut_short_evidence_file_is_moved_aside_with_one_warning(tmp_path: Path,
                                                                   warnings: list[str]) -> None:
    path = _saved(tmp_path / "search")
    path.write_bytes(path.read_bytes()[:60])
    assert Journal(tmp_path / "search", _settings()).load() == []
    assert len(warnings) == 1 and "not readable JSON" in warnings[0]


def test_an_evidence_file_from_before_contents_resumes(tmp_path: Path) -> None:
    """Written without contents or seal: its settings compared as they were."""
    path = _saved(tmp_path / "search")
    data = json.loads(path.read_text())
    del data["contents"], data["seal"]
    path.write_text(json.dumps(data))
    assert len(Journal(tmp_path / "search", _settings()).load()) == 1
    assert "other settings (dataset_path)" in _refused(tmp_path / "search",
                                                       dataset_path=str(tmp_path))
