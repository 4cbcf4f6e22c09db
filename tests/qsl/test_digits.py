"""The digits workload's data: a fixed, disjoint split; a held-out tree that is verified on
every open and rebuilt (never trusted) when damaged."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.qsl import digits_split, open_dataset
from quantmark.qsl.builtin import CONTENTS
from quantmark.qsl.digits_split import (
    HELD_OUT,
    digits_dataset_root,
    load_split,
    split_description,
)
from quantmark.qsl.groups import read_groups


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def test_split_is_fixed_stratified_and_disjoint() -> None:
    from sklearn.datasets import load_digits

    first = load_split()
    load_split.cache_clear()
    again = load_split()
    for name in ("train_x", "train_y", "train_index", "held_x", "held_y", "held_index"):
        assert np.array_equal(getattr(first, name), getattr(again, name)), name
    assert (len(first.train_y), len(first.held_y)) == (898, 899)
    train, held = set(first.train_index.tolist()), set(first.held_index.tolist())
    assert not train & held and train | held == set(range(1797))
    # stratified: each class is split in half, to within one sample
    counts = np.bincount(first.train_y, minlength=10) - np.bincount(first.held_y, minlength=10)
    assert np.abs(counts).max() <= 1
    # no image in both halves, and the samples are the originals (no augmentation)
    rows = {row.tobytes() for row in first.train_x}
    assert not any(row.tobytes() in rows for row in first.held_x)
    digits = load_digits()
    assert np.array_equal(first.held_x, np.rint(digits.images[first.held_index] * 255 / 16))
    assert np.array_equal(first.held_y, digits.target[first.held_index])
    described = split_description()
    assert (described["train"], described["held_out"], described["classes"]) == (898, 899, 10)
    assert "random_state=0" in described["split"] and "stratify" in described["split"]


def test_tree_is_the_held_out_half_and_nothing_else() -> None:
    root = digits_dataset_root()
    split = load_split()
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [str(d) for d in range(10)] + [".calibration", "cal_map.txt", "val_groups.txt"])
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".calibration" not in
                   p.parts and p.suffix == ".png")
    assert len(files) == 899 and all(p.suffix == ".png" for p in files)
    row = {int(i): n for n, i in enumerate(split.held_index)}
    for path in files:
        with Image.open(path) as img:
            assert (img.mode, img.size) == ("L", (8, 8))
            pixels = np.asarray(img)
        n = row[int(path.stem)]
        assert int(path.parent.name) == split.held_y[n]
        assert np.array_equal(pixels, split.held_x[n])


def test_calibration_images_come_from_the_train_half_and_are_never_scored() -> None:
    root = digits_dataset_root()
    split = load_split()
    listed = (root / "cal_map.txt").read_text().split()
    assert len(listed) == 256 and all(rel.startswith(".calibration/") for rel in listed)
    train = {int(i): n for n, i in enumerate(split.train_index)}
    for rel in listed[:32]:
        path = root / rel
        n = train[int(path.stem)]  # a train sample, so never a held-out one
        assert int(path.parent.name) == split.train_y[n]
        with Image.open(path) as img:
            assert np.array_equal(np.asarray(img), split.train_x[n])
    dataset = open_dataset(None, builtin="digits")
    assert len(dataset) == 899 and dataset.num_classes == 10  # nothing held out of the scored
    assert "scikit-learn" in dataset.description
    groups = read_groups(root)  # each scan its own source: intervals over independent samples
    assert len(groups) == 899 and len(set(groups.values())) == 899
    assert set(groups) == {rel for rel, _ in dataset.items}


def test_tree_is_reused_when_intact(monkeypatch: pytest.MonkeyPatch) -> None:
    root = digits_dataset_root()
    digest = _tree_digest(root.parent)

    def fail(*_args: object) -> None:
        raise AssertionError("an intact tree was rewritten")

    monkeypatch.setattr(digits_split, "write_tree", fail)
    assert digits_dataset_root() == root
    assert _tree_digest(root.parent) == digest


def _edit_png(root: Path) -> None:
    path = root / "3" / sorted(os.listdir(root / "3"))[0]
    Image.fromarray(np.full((8, 8), 255, np.uint8)).save(path)


def _delete_png(root: Path) -> None:
    (root / "7" / sorted(os.listdir(root / "7"))[-1]).unlink()


def _delete_class(root: Path) -> None:
    for path in (root / "5").iterdir():
        path.unlink()
    (root / "5").rmdir()


def _add_png(root: Path) -> None:
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(root / "1" / "9999.png")


def _truncate_png(root: Path) -> None:
    path = root / "0" / sorted(os.listdir(root / "0"))[0]
    path.write_bytes(path.read_bytes()[:20])


def _edit_manifest(root: Path) -> None:
    manifest = root.parent / CONTENTS
    record = json.loads(manifest.read_text())
    record["files"].pop(next(iter(record["files"])))
    manifest.write_text(json.dumps(record))


def _delete_manifest(root: Path) -> None:
    (root.parent / CONTENTS).unlink()


@pytest.mark.parametrize("damage", [_edit_png, _delete_png, _delete_class, _add_png,
                                    _truncate_png, _edit_manifest, _delete_manifest])
def test_damaged_tree_is_rebuilt_with_a_warning(damage: Callable[[Path], None],
                                                caplog: pytest.LogCaptureFixture) -> None:
    root = digits_dataset_root()
    digest = _tree_digest(root.parent)
    damage(root)
    with caplog.at_level(logging.WARNING, logger="quantmark.qsl.digits_split"):
        assert digits_dataset_root() == root
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "failed verification" in warnings[0].getMessage()
    assert _tree_digest(root.parent) == digest  # exactly what was written before
    assert not [p for p in root.parent.parent.iterdir() if p.name.startswith(".")]


def test_a_failed_write_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    real = digits_split.write_tree

    def half(folder: Path, split: digits_split.DigitsSplit) -> None:
        real(folder, split)
        (folder / CONTENTS).unlink()
        raise OSError("disk full")

    monkeypatch.setattr(digits_split, "write_tree", half)
    with pytest.raises(OSError, match="disk full"):
        digits_dataset_root()
    datasets = Path(os.environ["QUANTMARK_CACHE"]) / "datasets"
    assert not [p for p in datasets.iterdir() if p.name.startswith(("digits", ".digits"))]
    monkeypatch.setattr(digits_split, "write_tree", real)
    assert (digits_dataset_root() / "0").is_dir()


def test_missing_scikit_learn_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digits_split.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError) as err:
        digits_dataset_root()
    assert "\n" not in str(err.value) and "quantmark[data]" in str(err.value)


def test_tree_folder_is_named_by_the_split(monkeypatch: pytest.MonkeyPatch) -> None:
    root = digits_dataset_root()
    assert root.name == HELD_OUT and root.parent.name.endswith(digits_split.split_key())
    monkeypatch.setattr(digits_split, "SPLIT_SEED", 1)
    assert digits_split.split_key() not in root.parent.name
