from __future__ import annotations

import os
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.qsl import open_dataset
from quantmark.qsl.cache import cached_images
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import PreprocessRecipe


def one_line_error(excinfo: pytest.ExceptionInfo[UserError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message
    return message


def test_val_map_parsing(tiny_folder: Path) -> None:
    ds = ImageFolderDataset(tiny_folder)
    assert len(ds) == 12 and ds.root == tiny_folder
    assert ds.items[0] == ("val/img_00.png", 0)
    assert ds.items[11] == ("val/img_11.jpg", 77)
    assert ds.labels.tolist() == [i * 7 for i in range(12)]
    assert ds.held_out_count == 0 and not ds.builtin


def test_blank_lines_and_spaces_in_paths(tmp_path: Path) -> None:
    from tests.qsl.conftest import write_image

    write_image(tmp_path / "my dir" / "a b.jpg", 40, 30, 0)
    (tmp_path / "val_map.txt").write_text("\nmy dir/a b.jpg 5\n\n")
    ds = ImageFolderDataset(tmp_path)
    assert ds.items == [("my dir/a b.jpg", 5)]


def test_fingerprint_tracks_content(tiny_folder: Path) -> None:
    before = ImageFolderDataset(tiny_folder).fingerprint()
    assert ImageFolderDataset(tiny_folder).fingerprint() == before
    (tiny_folder / "val" / "img_03.jpg").write_bytes(b"x" * 10)
    assert ImageFolderDataset(tiny_folder).fingerprint() != before


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        open_dataset(str(tmp_path / "nope"))
    msg = one_line_error(exc)
    assert "nope does not exist" in msg and "--dataset-path" in msg


def test_missing_val_map(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tmp_path)
    assert "val_map.txt" in one_line_error(exc)


@pytest.mark.parametrize(
    "bad", ["val/img_01.jpg", "val/img_01.jpg cat", "val/img_01.jpg 1000", "val/img_01.jpg -1"]
)
def test_malformed_line_names_file_and_line(tiny_folder: Path, bad: str) -> None:
    lines = (tiny_folder / "val_map.txt").read_text().splitlines()
    lines[2] = bad
    (tiny_folder / "val_map.txt").write_text("\n".join(lines))
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    assert f"{tiny_folder / 'val_map.txt'}:3" in one_line_error(exc)


def test_one_based_labels_are_named(tiny_folder: Path) -> None:
    lines = (tiny_folder / "val_map.txt").read_text().splitlines()
    lines[4] = "val/img_04.png 1000"
    (tiny_folder / "val_map.txt").write_text("\n".join(lines))
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    assert "1-based labels" in one_line_error(exc) and "val_map.txt:5" in one_line_error(exc)


def test_duplicate_line(tiny_folder: Path) -> None:
    with open(tiny_folder / "val_map.txt", "a") as handle:
        handle.write("val/img_00.png 3\n")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    assert "val_map.txt:13" in one_line_error(exc)


def test_missing_image_names_file_and_line(tiny_folder: Path) -> None:
    (tiny_folder / "val" / "img_04.png").unlink()
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    msg = one_line_error(exc)
    assert "img_04.png" in msg and "val_map.txt:5" in msg


@pytest.mark.parametrize("workers", [1, 2])
def test_undecodable_image_raised_in_parent(tiny_folder: Path, workers: int) -> None:
    (tiny_folder / "val" / "img_07.jpg").write_bytes(b"this is not a jpeg")
    ds = ImageFolderDataset(tiny_folder)
    with pytest.raises(UserError) as exc:
        cached_images(ds, PreprocessRecipe(), workers=workers)
    msg = one_line_error(exc)
    assert "img_07.jpg" in msg and "val_map.txt:8" in msg and "decoded" in msg
    # Nothing that looks like a finished cache was left behind.
    assert not list((Path(str(ds.root)).parent / "cache").rglob("images.npy"))


def test_a_val_map_with_a_byte_order_mark_is_read(tiny_folder: Path) -> None:
    """Windows editors save UTF-8 with a BOM: it is not part of the first image's path."""
    path = tiny_folder / "val_map.txt"
    plain = ImageFolderDataset(tiny_folder).items
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert ImageFolderDataset(tiny_folder).items == plain


@pytest.mark.parametrize("spelling", ["./val/img_00.png", "val//img_00.png",
                                      "val/../val/img_00.png"])
def test_the_same_path_spelled_otherwise_is_a_duplicate(tiny_folder: Path, spelling: str
                                                       ) -> None:
    with open(tiny_folder / "val_map.txt", "a") as handle:
        handle.write(f"{spelling} 3\n")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    message = one_line_error(exc)
    assert "val_map.txt:13" in message and "first at line 1 as 'val/img_00.png'" in message


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_one_file_listed_through_a_link_is_a_duplicate(tiny_folder: Path, link: str) -> None:
    target, alias = tiny_folder / "val" / "img_00.png", tiny_folder / "val" / "alias.png"
    (os.symlink if link == "symlink" else os.link)(target, alias)
    with open(tiny_folder / "val_map.txt", "a") as handle:
        handle.write("val/alias.png 3\n")
    with pytest.raises(UserError) as exc:
        ImageFolderDataset(tiny_folder)
    message = one_line_error(exc)
    assert "val_map.txt:13" in message and "same file as 'val/img_00.png' (line 1)" in message
