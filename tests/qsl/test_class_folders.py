"""A class-per-folder dataset (``DIR/<class>/<image>``, ImageFolder's layout): class index by
sorted folder name or by a labels file, nested images, a content fingerprint, and every bad
layout as one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.qsl import check_classes, open_dataset
from quantmark.qsl.cache import cached_images
from quantmark.qsl.calibration_sets import calibration_for
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.label_space import read_class_names
from quantmark.qsl.preprocess import PreprocessRecipe

RECIPE = PreprocessRecipe(resize_short=16, crop=12)


def png(path: Path, seed: int) -> Path:
    """A tiny distinct RGB PNG (distinct bytes: one file, one sample)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (10, 14, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def one_line(excinfo: pytest.ExceptionInfo[UserError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message
    return message


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    """Three classes, out of sorted order on disk, two images each (one nested)."""
    root = tmp_path / "pets"
    png(root / "dog" / "b.png", 1)
    png(root / "dog" / "a.png", 2)
    png(root / "cat" / "x.png", 3)
    png(root / "cat" / "more" / "y.png", 4)
    png(root / "bird" / "z.png", 5)
    png(root / "bird" / "w.png", 6)
    return root


def labels_file(path: Path, names: list[str]) -> Path:
    path.write_text("".join(f"{name}\n" for name in names))
    return path


def test_class_index_is_the_sorted_folder_position(folders: Path) -> None:
    ds = ImageFolderDataset(folders)
    assert ds.layout == "class-folders" and ds.classes == ["bird", "cat", "dog"]
    assert ds.num_classes == 3 and len(ds) == 6
    assert ds.items == [("bird/w.png", 0), ("bird/z.png", 0), ("cat/more/y.png", 1),
                        ("cat/x.png", 1), ("dog/a.png", 2), ("dog/b.png", 2)]
    assert ds.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert ds.describe(2) == str(folders / "cat" / "more" / "y.png")


def test_hidden_and_non_image_files_are_skipped_extensions_any_case(folders: Path) -> None:
    png(folders / "cat" / "UPPER.JPG", 7)  # a PNG's bytes; the extension is what is read
    png(folders / "cat" / ".hidden.png", 8)
    png(folders / ".thumbs" / "t.png", 9)
    (folders / "cat" / "notes.txt").write_text("not an image")
    (folders / "README.md").write_text("a file at the top is not a class")
    ds = ImageFolderDataset(folders)
    assert ds.classes == ["bird", "cat", "dog"]
    assert [rel for rel, _ in ds.items if rel.startswith("cat/")] == [
        "cat/UPPER.JPG", "cat/more/y.png", "cat/x.png"]


def test_labels_file_gives_the_models_order(folders: Path, tmp_path: Path) -> None:
    """Folders named by the model's classes (a subset, in another order) take its indices."""
    names = labels_file(tmp_path / "labels.txt", ["dog", "fish", "cat", "bird"])
    ds = ImageFolderDataset(folders, names)
    assert ds.classes == ["dog", "fish", "cat", "bird"] and ds.num_classes == 4
    assert dict(ds.items) == {"bird/w.png": 3, "bird/z.png": 3, "cat/more/y.png": 2,
                              "cat/x.png": 2, "dog/a.png": 0, "dog/b.png": 0}
    assert ds.labels_path == tmp_path / "labels.txt"


def test_a_folder_the_labels_file_lacks_is_one_line(folders: Path, tmp_path: Path) -> None:
    names = labels_file(tmp_path / "labels.txt", ["dog", "cat"])
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders, names)
    message = one_line(exc)
    assert "dataset class 'bird' is not among the model's classes in" in message
    assert str(names) in message


@pytest.mark.parametrize("text, needle", [
    ("cat\ndog\ncat\n", "labels.txt:3: class 'cat' is named again (first at line 1)"),
    ("cat\n\ndog\n", "labels.txt:2: blank line"),
    ("\n\n", "names no classes"),
    (b"\xff\xfe", "is not UTF-8"),
])
def test_bad_labels_files_are_one_line(tmp_path: Path, text: str | bytes, needle: str) -> None:
    path = tmp_path / "labels.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as exc:
        read_class_names(path)
    assert needle in one_line(exc)
    with pytest.raises(UserError):
        read_class_names(tmp_path / "absent.txt")


def test_labels_file_with_bom_and_trailing_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_bytes(b"\xef\xbb\xbfcat\r\n dog \r\n\r\n\n")
    assert read_class_names(path) == ["cat", "dog"]


def test_fingerprint_is_content_and_names(folders: Path, tmp_path: Path) -> None:
    first = ImageFolderDataset(folders).fingerprint()
    assert ImageFolderDataset(folders).fingerprint() == first
    copy = tmp_path / "copy"
    shutil.copytree(folders, copy)
    assert ImageFolderDataset(copy).fingerprint() == first  # another place, same content
    (copy / "bird").rename(copy / "birds")  # same images, same labels, another class name
    renamed = ImageFolderDataset(copy)
    assert renamed.labels.tolist() == ImageFolderDataset(folders).labels.tolist()
    assert renamed.fingerprint() != first
    png(folders / "dog" / "a.png", 99)  # same name, other bytes
    assert ImageFolderDataset(folders).fingerprint() != first
    names = labels_file(tmp_path / "labels.txt", ["dog", "cat", "bird"])
    assert ImageFolderDataset(folders, names).fingerprint() != \
        ImageFolderDataset(folders).fingerprint()


def test_no_images_at_all(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tmp_path)
    message = one_line(exc)
    assert "has no images" in message and "DIR/<class>/<image>" in message
    assert "val_map.txt" in message


def test_loose_images_at_the_top_are_named(tmp_path: Path) -> None:
    png(tmp_path / "a.png", 1)
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tmp_path)
    assert "1 images lie directly in it" in one_line(exc)


def test_class_folders_without_images(tmp_path: Path) -> None:
    (tmp_path / "cat").mkdir()
    (tmp_path / "dog" / "sub").mkdir(parents=True)
    (tmp_path / "dog" / "notes.txt").write_text("x")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tmp_path)
    assert "has no images" in one_line(exc)


def test_an_empty_class_folder_is_refused_by_name(folders: Path) -> None:
    (folders / "cow").mkdir()
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    message = one_line(exc)
    assert f"class folder {folders / 'cow'} has no images" in message
    assert "shift every later class's index" in message


def test_an_image_linked_from_outside_is_refused(folders: Path, tmp_path: Path) -> None:
    outside = png(tmp_path / "elsewhere.png", 42)
    os.symlink(outside, folders / "cat" / "link.png")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    message = one_line(exc)
    assert "cat/link.png" in message and "outside the dataset folder" in message


def test_a_class_folder_linked_from_outside_is_refused(folders: Path, tmp_path: Path) -> None:
    png(tmp_path / "other" / "o.png", 43)
    os.symlink(tmp_path / "other", folders / "cow")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    assert "outside the dataset folder" in one_line(exc)


def test_one_folder_reached_twice_is_refused(folders: Path) -> None:
    os.symlink(folders / "dog", folders / "cat" / "again")  # a loop-free second path
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    assert "again through a symlink" in one_line(exc)


def test_a_symlink_loop_does_not_recurse_forever(folders: Path) -> None:
    os.symlink(folders / "cat", folders / "cat" / "loop")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    assert "again through a symlink" in one_line(exc)


def test_one_file_in_two_classes_is_refused(folders: Path) -> None:
    os.link(folders / "dog" / "a.png", folders / "bird" / "same.png")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(folders)
    assert "is the same file as" in one_line(exc)


def test_a_corrupt_png_in_a_class_folder_is_one_line(folders: Path) -> None:
    (folders / "dog" / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    ds = ImageFolderDataset(folders)
    with pytest.raises(UserError) as exc:
        cached_images(ds, RECIPE, workers=1)
    message = one_line(exc)
    assert str(folders / "dog" / "a.png") in message and "cannot be decoded" in message


def test_the_cache_and_calibration_hold_out_work_alike(folders: Path) -> None:
    ds = ImageFolderDataset(folders)
    assert cached_images(ds, RECIPE, workers=1).shape == (6, 12, 12, 3)
    calibration = calibration_for(ds, count=2, seed=1, recipe=RECIPE)
    assert ds.held_out_count == 2 and len(ds) == 4
    assert not set(calibration.items) & {rel for rel, _ in ds.items}
    again = ImageFolderDataset(folders)
    assert calibration_for(again, count=2, seed=1, recipe=RECIPE).items == calibration.items


def test_val_map_wins_and_a_labels_file_only_names_it(tiny_folder: Path, tmp_path: Path
                                                      ) -> None:
    png(tiny_folder / "cat" / "c.png", 1)  # a class folder beside val_map.txt is not read
    plain = ImageFolderDataset(tiny_folder)
    assert plain.layout == "val_map" and plain.classes is None and plain.num_classes is None
    names = labels_file(tmp_path / "labels.txt", [f"c{i}" for i in range(80)])
    named = ImageFolderDataset(tiny_folder, names)
    assert named.items == plain.items and named.num_classes == 80
    assert named.classes[77] == "c77" and named.fingerprint() == plain.fingerprint()
    short = labels_file(tmp_path / "short.txt", [f"c{i}" for i in range(50)])
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder, short)
    message = one_line(exc)
    assert "val_map.txt:9: label 56 has no class name" in message and "50 classes" in message


def test_a_bare_val_map_takes_any_label_but_a_top_label_of_1000(tiny_folder: Path) -> None:
    path = tiny_folder / "val_map.txt"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], "val/img_03.jpg 21843", *lines[4:]]) + "\n")
    assert ImageFolderDataset(tiny_folder).labels.max() == 21843  # ImageNet-21k style
    path.write_text("\n".join([*lines[:3], "val/img_03.jpg 1000", *lines[4:]]) + "\n")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    assert "val_map.txt:4: label 1000 means 1-based labels" in one_line(exc)
    path.write_text("\n".join([*lines[:3], "val/img_03.jpg +5", *lines[4:]]) + "\n")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    assert "val_map.txt:4: malformed line" in one_line(exc)


def test_check_classes_folders(folders: Path, tmp_path: Path) -> None:
    ds = ImageFolderDataset(folders)
    check_classes(ds, 3, "pets-net")
    with pytest.raises(UserError) as exc:
        check_classes(ds, 10, "cifar-net")
    message = one_line(exc)
    assert "has 3 class folders but model cifar-net has 10 classes" in message
    assert "--labels FILE" in message
    named = ImageFolderDataset(folders, labels_file(tmp_path / "l.txt", ["cat", "dog", "bird"]))
    check_classes(named, 3, "pets-net")
    with pytest.raises(UserError) as exc:
        check_classes(named, 1000, "resnet50")
    assert "names 3 classes but model resnet50 has 1000" in one_line(exc)


def test_check_classes_val_map(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)  # labels 0, 7, ..., 77
    check_classes(ds, 1000, "resnet50")
    check_classes(ds, 78, "small")
    with pytest.raises(UserError) as exc:
        check_classes(ds, 10, "cifar-net")
    message = one_line(exc)
    assert "val_map.txt:3: label 14 is beyond model cifar-net's 10 classes (0..9)" in message


def test_check_classes_names_one_based_labels(tmp_path: Path) -> None:
    for i in range(3):
        png(tmp_path / f"{i}.png", i)
    (tmp_path / "val_map.txt").write_text("0.png 1\n1.png 2\n2.png 3\n")
    with pytest.raises(UserError) as exc:
        check_classes(ImageFolderDataset(tmp_path), 3, "three")
    assert "val_map.txt:3: label 3" in one_line(exc) and "look 1-based" in str(exc.value)


def test_open_dataset_takes_labels_and_refuses_an_unknown_builtin(folders: Path,
                                                                  tmp_path: Path) -> None:
    names = labels_file(tmp_path / "labels.txt", ["dog", "cat", "bird"])
    assert open_dataset(str(folders), labels=str(names)).classes == ["dog", "cat", "bird"]
    # the digits built-in: tests/qsl/test_digits.py
    with pytest.raises(UserError) as exc:
        open_dataset(None, builtin="cifar")
    assert "unknown built-in dataset 'cifar'" in one_line(exc)
