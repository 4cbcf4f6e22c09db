"""The source photo of each image travels with the data: the exported dataset/ folder keeps
val_groups.txt, and an accuracy run on any folder that has one writes it beside its val_map,
in QSL order, so the report judges crops of one photo together wherever the run happened."""

from __future__ import annotations

from pathlib import Path

from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.run.record import write_groups
from quantmark.run.tflite_export import _copy_dataset

IMAGES = ["val/a.jpg", "val/b.jpg", "val/c.jpg"]
GROUPS = "val/a.jpg cat\nval/b.jpg cat\nval/c.jpg dog\n"


def dataset_folder(root: Path, groups: str | None = GROUPS) -> Path:
    (root / "val").mkdir(parents=True)
    for n, image in enumerate(IMAGES):
        (root / image).write_bytes(bytes([n]) * 16)
    (root / "val_map.txt").write_text("".join(f"{image} {n}\n" for n, image in
                                              enumerate(IMAGES)))
    if groups is not None:
        (root / "val_groups.txt").write_text(groups)
    return root


def test_export_copies_the_groups_and_refreshes_an_export_without_them(tmp_path):
    root = dataset_folder(tmp_path / "builtin")
    old = dataset_folder(tmp_path / "out" / "dataset", groups=None)  # exported before groups
    _copy_dataset(root, old)
    assert (old / "val_groups.txt").read_text() == GROUPS
    assert (old / "val_map.txt").read_bytes() == (root / "val_map.txt").read_bytes()
    fresh = tmp_path / "fresh" / "dataset"
    _copy_dataset(root, fresh)
    assert (fresh / "val_groups.txt").read_text() == GROUPS


def test_a_run_writes_the_groups_of_its_evaluated_images_in_qsl_order(tmp_path):
    dataset = ImageFolderDataset(dataset_folder(tmp_path / "data"))
    dataset.hold_out(["val/b.jpg"])  # a calibration image: not in the QSL
    work = tmp_path / "run"
    work.mkdir()
    write_groups(work, dataset)
    assert (work / "val_groups.txt").read_text() == "val/a.jpg cat\nval/c.jpg dog\n"


def test_a_dataset_without_groups_writes_none(tmp_path):
    dataset = ImageFolderDataset(dataset_folder(tmp_path / "data", groups=None))
    write_groups(tmp_path, dataset)
    assert not (tmp_path / "val_groups.txt").exists()
