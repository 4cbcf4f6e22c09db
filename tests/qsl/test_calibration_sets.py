from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from quantmark.ground.errors import UserError
from quantmark.qsl.calibration_sets import calibration_for
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import PreprocessRecipe
from tests.qsl.conftest import write_image


def test_builtin_uses_its_own_split(builtin_root: Path) -> None:
    ds = ImageFolderDataset(builtin_root, builtin=True)
    before = len(ds)
    cal = calibration_for(ds, count=8, seed=3)
    assert cal.source == "builtin cal_map.txt" and cal.count == 8 == len(cal.items)
    assert len(ds) == before and ds.held_out_count == 0  # evaluation set untouched
    assert not set(cal.items) & {rel for rel, _ in ds.items}
    assert cal.hash() == calibration_for(ds, count=8, seed=3).hash()
    assert cal.hash() != calibration_for(ds, count=8, seed=4).hash()
    arrays = cal.arrays()
    assert arrays.shape == (8, 3, 224, 224) and arrays.dtype == np.float32
    with pytest.raises(UserError):
        calibration_for(ds, count=10**6)


def test_held_out_subset_is_excluded(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    cal = calibration_for(ds, count=4, seed=1)
    assert cal.source == "held out from dataset" and len(cal.items) == 4
    assert len(ds) == 8 and ds.held_out_count == 4
    assert not set(cal.items) & {rel for rel, _ in ds.items}
    assert len(ds.labels) == 8 and len(ds.cache_rows) == 8
    # Same seed again: same images, nothing more held out.
    again = calibration_for(ds, count=4, seed=1)
    assert again.items == cal.items and len(ds) == 8
    recipe = PreprocessRecipe(layout="NHWC")
    arrays = calibration_for(ImageFolderDataset(tiny_folder), 4, 1, recipe=recipe).arrays()
    assert arrays.shape == (4, 224, 224, 3)


def test_user_list_from_another_folder(tiny_folder: Path, tmp_path: Path) -> None:
    train = tmp_path / "train"
    for i in range(3):
        write_image(train / "n01" / f"t{i}.jpg", 260, 240, seed=100 + i)
    listing = tmp_path / "cal_list.txt"
    listing.write_text("n01/t0.jpg\nn01/t1.jpg\n\nn01/t2.jpg\n")
    ds = ImageFolderDataset(tiny_folder)
    cal = calibration_for(ds, list_file=listing, list_root=train)
    assert cal.source == f"user list {listing}" and cal.count == 3 and len(ds) == 12
    assert cal.arrays().shape == (3, 3, 224, 224)


def test_user_list_errors(tiny_folder: Path, tmp_path: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    listing = tmp_path / "cal_list.txt"
    write_image(tiny_folder / "train" / "x.jpg", 250, 250, seed=9)
    listing.write_text("train/x.jpg\nval/missing.jpg\n")
    with pytest.raises(UserError) as exc:
        calibration_for(ds, list_file=listing)
    msg = str(exc.value)
    assert "\n" not in msg and f"{listing}:2" in msg and "missing.jpg" in msg
    listing.write_text("val/img_01.jpg\n")  # an evaluation image: overlap
    with pytest.raises(UserError) as exc:
        calibration_for(ds, list_file=listing)
    assert "evaluation" in str(exc.value) and f"{listing}:1" in str(exc.value)
    with pytest.raises(UserError):
        calibration_for(ds, list_file=tmp_path / "nope.txt")


def test_a_calibration_image_edited_in_place_is_other_calibration_data(
        tmp_path: Path, quantmark_cache) -> None:
    """Same name, same size, other pixels (BMPs: uncompressed, so the size is the same): the
    set's hash, which INT8 artifacts are keyed on, and its arrays must change."""
    root = tmp_path / "bmp"
    for i in range(8):
        write_image(root / f"img_{i}.bmp", 64, 48, seed=i)
    (root / "val_map.txt").write_text("".join(f"img_{i}.bmp {i}\n" for i in range(8)))
    cal = calibration_for(ImageFolderDataset(root), count=4, seed=1)
    before_hash, before = cal.hash(), cal.arrays().copy()
    image = root / cal.items[0]
    size = image.stat().st_size
    write_image(image, 64, 48, seed=99)
    assert image.stat().st_size == size
    again = calibration_for(ImageFolderDataset(root), count=4, seed=1)
    assert again.items == cal.items
    assert again.hash() != before_hash
    assert not np.array_equal(again.arrays()[0], before[0])


def test_a_copy_of_an_evaluation_image_in_the_list_is_refused(tiny_folder: Path,
                                                               tmp_path: Path) -> None:
    """Byte-identical under another name and folder: the content, not the path, is scored."""
    train = tmp_path / "train"
    write_image(train / "n01" / "t0.jpg", 260, 240, seed=100)
    shutil.copy(tiny_folder / "val" / "img_03.jpg", train / "n01" / "copy.jpg")
    shutil.copy(tiny_folder / "val" / "img_05.jpg", train / "n01" / "copy2.jpg")
    listing = tmp_path / "cal_list.txt"
    listing.write_text("n01/t0.jpg\nn01/copy.jpg\nn01/copy2.jpg\n")
    ds = ImageFolderDataset(tiny_folder)
    with pytest.raises(UserError) as exc:
        calibration_for(ds, list_file=listing, list_root=train)
    message = str(exc.value)
    assert "\n" not in message and f"{listing}:2" in message
    assert "val/img_03.jpg" in message and "val_map.txt:4" in message
    assert "1 more" in message
    listing.write_text("n01/t0.jpg\n")  # a distinct image is fine
    assert calibration_for(ds, list_file=listing, list_root=train).count == 1
