from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.qsl import open_dataset
from quantmark.qsl.builtin import (
    CAL_MAP,
    CALIBRATION,
    CONTENTS,
    LABELS,
    CalibrationPhoto,
    SourcePhoto,
    available_photos,
    calibration_photos,
    generate,
)
from quantmark.qsl.groups import VAL_GROUPS, read_groups
from quantmark.qsl.imagenet import ImageFolderDataset, parse_path_list, parse_val_map


def test_builtin_sizes_and_labels(builtin_root: Path) -> None:
    ds = ImageFolderDataset(builtin_root, builtin=True)
    assert len(ds) >= 1024
    hand_labels = {photo.label for photo in LABELS}
    assert set(ds.labels.tolist()) <= hand_labels
    assert len(set(ds.labels.tolist())) >= 5  # several classes, roughly balanced
    cal = [rel for rel, _ in parse_path_list(builtin_root / CAL_MAP)]
    assert len(cal) >= 256
    assert not set(cal) & {rel for rel, _ in ds.items}
    assert all((builtin_root / rel).is_file() for rel in cal)


def test_open_dataset_none_is_builtin(builtin_root: Path, monkeypatch) -> None:
    monkeypatch.setattr("quantmark.qsl.builtin.builtin_dataset_root", lambda: builtin_root)
    ds = open_dataset(None)
    assert ds.builtin and ds.root == builtin_root


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return h.hexdigest()


def test_generation_is_deterministic(tmp_path: Path) -> None:
    photos, cal_photos = available_photos(), calibration_photos()
    assert photos and cal_photos
    generate(tmp_path / "a", photos, cal_photos, eval_count=20, cal_count=6)
    generate(tmp_path / "b", photos, cal_photos, eval_count=20, cal_count=6)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    lines = (tmp_path / "a" / "val_map.txt").read_text().splitlines()
    assert len(lines) == 20


def test_builtin_root_is_reused(builtin_root: Path, monkeypatch) -> None:
    from quantmark.qsl import builtin

    monkeypatch.setenv("QUANTMARK_CACHE", str(builtin_root.parent.parent))
    monkeypatch.setattr(builtin, "generate", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert builtin.builtin_dataset_root() == builtin_root


def test_calibration_photos_are_not_evaluation_photos() -> None:
    assert not {p.resource for p in CALIBRATION} & {p.resource for p in LABELS}
    assert len(calibration_photos()) == len(CALIBRATION)  # [data] ships every one


def _solid(path: Path, rgb: tuple[int, int, int]) -> Path:
    Image.new("RGB", (300, 260), rgb).save(path)
    return path


def test_calibration_crops_come_from_the_calibration_photos(tmp_path: Path) -> None:
    """Evaluation crops of a red photo, calibration crops of a blue one: no crop of either
    split comes from the other's photo."""
    red = SourcePhoto("x", "red.png", 1, "red")
    blue = CalibrationPhoto("x", "blue.png", "blue")
    out = tmp_path / "set"
    generate(out, [(red, _solid(tmp_path / "red.png", (200, 0, 0)))],
             [(blue, _solid(tmp_path / "blue.png", (0, 0, 200)))], eval_count=6, cal_count=4)
    items, _ = parse_val_map((out / "val_map.txt").read_bytes(), out / "val_map.txt")
    cal = [rel for rel, _ in parse_path_list(out / CAL_MAP)]
    assert len(items) == 6 and len(cal) == 4
    for rel in [rel for rel, _ in items] + cal:
        r, _, b = np.asarray(Image.open(out / rel)).reshape(-1, 3).mean(axis=0)
        assert (r > 100 > b) if rel.startswith("val/") else (b > 100 > r), rel


def test_val_groups_name_each_crops_source_photo(builtin_root: Path) -> None:
    ds = ImageFolderDataset(builtin_root, builtin=True)
    groups = read_groups(builtin_root)
    assert groups is not None and list(groups) == [rel for rel, _ in ds.all_items]
    by_group = {p.group: p.label for p, _ in available_photos()}
    assert set(groups.values()) == set(by_group)
    # the stereo pair (two views of one motorcycle in one garage) is one source, not two:
    # counted as two, seeded sets covered the true change 92.7% of the time
    assert "motorcycle" in by_group and not {"motorcycle_left", "motorcycle_right"} & set(
        groups.values())
    assert len(set(groups.values())) == len({p.resource for p, _ in available_photos()}) - 1
    for rel, label in ds.all_items:
        assert by_group[groups[rel]] == label


def test_contents_record_every_generated_file(builtin_root: Path) -> None:
    record = json.loads((builtin_root / CONTENTS).read_text())
    on_disk = {p.relative_to(builtin_root).as_posix() for p in builtin_root.rglob("*")
               if p.is_file() and p.name != CONTENTS}
    assert set(record["files"]) == on_disk
    assert {"val_map.txt", CAL_MAP, VAL_GROUPS} <= on_disk
    rel = sorted(on_disk)[0]
    assert record["files"][rel] == hashlib.sha256((builtin_root / rel).read_bytes()).hexdigest()


@pytest.fixture
def small_builtin(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, small built-in set whose per-file hashes are memoised at once (no racy
    window), so a verification that trusted the memo would miss a same-size edit."""
    from quantmark.qsl import builtin

    monkeypatch.setattr(builtin, "EVAL_COUNT", 21)
    monkeypatch.setattr(builtin, "CAL_COUNT", 10)
    monkeypatch.setattr("quantmark.qsl.imagenet.RACY_NS", 0)
    root = builtin.builtin_dataset_root()
    assert builtin.builtin_dataset_root() == root  # verified, memo written
    (memo,) = (root.parent / "content-hashes").glob("*.json")
    assert len(json.loads(memo.read_text())["files"]) == 21 + 10 + 3
    time.sleep(0.05)  # later edits get a later ctime tick than the memo recorded
    return root


def _xor_keep_size_and_mtime(path: Path) -> None:
    info = path.stat()
    data = bytearray(path.read_bytes())
    at = len(data) // 2
    data[at:at + 16] = bytes(b ^ 0x5A for b in data[at:at + 16])
    path.write_bytes(bytes(data))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert path.stat().st_size == info.st_size and path.stat().st_mtime_ns == info.st_mtime_ns


def _xor_images(root: Path) -> None:
    for rel in ("val/val_00000.jpg", "val/val_00007.jpg", "cal/cal_00003.jpg"):
        _xor_keep_size_and_mtime(root / rel)


def _copy_over(root: Path) -> None:
    shutil.copyfile(root / "val/val_00001.jpg", root / "val/val_00002.jpg")


def _undecodable(root: Path) -> None:
    (root / "val/val_00004.jpg").write_bytes(b"not a jpeg")


def _missing(root: Path) -> None:
    (root / "cal/cal_00000.jpg").unlink()


def _edited_map(root: Path) -> None:
    text = (root / "val_map.txt").read_text()
    (root / "val_map.txt").write_text(text.replace(" 967\n", " 968\n", 1))


def _edited_contents(root: Path) -> None:
    record = json.loads((root / CONTENTS).read_text())
    record["files"]["val/val_00000.jpg"] = "0" * 64
    (root / CONTENTS).write_text(json.dumps(record))


@pytest.mark.parametrize("damage, words", [
    (_xor_images, "3 of 34 files differ"), (_copy_over, "val/val_00002.jpg"),
    (_undecodable, "val/val_00004.jpg"), (_missing, "cal/cal_00000.jpg is missing"),
    (_edited_map, "val_map.txt"), (_edited_contents, "changed after generation")])
def test_damaged_builtin_set_is_regenerated(small_builtin: Path, damage: Callable,
                                            words: str, caplog: pytest.LogCaptureFixture) -> None:
    from quantmark.qsl import builtin

    before = _digest(small_builtin)
    damage(small_builtin)
    assert _digest(small_builtin) != before
    with caplog.at_level(logging.WARNING):
        assert builtin.builtin_dataset_root() == small_builtin
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert "regenerating" in warnings[0] and words in warnings[0], warnings[0]
    assert _digest(small_builtin) == before
    assert not [p for p in small_builtin.parent.iterdir() if p.name.startswith(".")]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        builtin.builtin_dataset_root()
    assert not caplog.records


def test_undecodable_builtin_image_is_regenerated_not_left_to_the_user(
        small_builtin: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An image that breaks after verification (another process, a disk) is not the user's to
    repair: the error says run again, and the next run regenerates the set."""
    from quantmark.ground.errors import UserError
    from quantmark.qsl import builtin
    from quantmark.qsl.cache import cached_images
    from quantmark.qsl.preprocess import PreprocessRecipe

    ds = ImageFolderDataset(small_builtin, builtin=True)
    good = (small_builtin / "val/val_00003.jpg").read_bytes()
    (small_builtin / "val/val_00003.jpg").write_bytes(good[:100])
    with pytest.raises(UserError) as err:
        cached_images(ds, PreprocessRecipe(), workers=1)
    assert "regenerated on the next run" in str(err.value)
    assert "remove that line" not in str(err.value)
    with caplog.at_level(logging.WARNING):
        root = builtin.builtin_dataset_root()
    assert [r.getMessage() for r in caplog.records if "regenerating" in r.getMessage()]
    assert (root / "val/val_00003.jpg").read_bytes() == good
    assert cached_images(ImageFolderDataset(root, builtin=True), PreprocessRecipe(),
                         workers=1).shape[0] == 21
