"""The parent's dataset checks take either layout: val_map.txt or one folder per class, and a
labels file; a bad one is one line before a child starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.run.checks import check_dataset, dataset_size


def png(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (6, 6, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "digits"
    for label in range(10):
        for i in range(3):
            png(root / str(label) / f"{i}.png", 10 * label + i)
    return root


def test_class_folders_pass_and_are_counted(folders: Path) -> None:
    check_dataset(str(folders))
    assert dataset_size(str(folders)) == 30


def test_val_map_folders_are_counted_by_lines(tmp_path: Path) -> None:
    (tmp_path / "val_map.txt").write_text("a.jpg 0\n\nb.jpg 1\n")  # images not read here
    check_dataset(str(tmp_path))
    assert dataset_size(str(tmp_path)) == 2


def test_a_folder_without_images_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no images: expected DIR/<class>/<image>") as exc:
        check_dataset(str(tmp_path))
    assert "\n" not in str(exc.value)


def test_an_empty_class_is_refused_before_the_run(folders: Path) -> None:
    (folders / "extra").mkdir()
    with pytest.raises(UserError, match="class folder .*extra has no images"):
        check_dataset(str(folders))


def test_the_labels_file_is_checked_with_the_folders(folders: Path, tmp_path: Path) -> None:
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{d}\n" for d in range(9)))  # no '9'
    with pytest.raises(UserError, match="dataset class '9' is not among the model's classes"):
        check_dataset(str(folders), str(labels))
    labels.write_text("0\n1\n1\n")
    with pytest.raises(UserError, match=r"labels.txt:3: class '1' is named again"):
        check_dataset(None, str(labels))
