"""A class-per-folder dataset: ``DIR/<class>/<image>``, the layout torchvision's ImageFolder and
Keras' ``image_dataset_from_directory`` read.

Class index = the folder name's position in sorted order (as ImageFolder does), or, with a
labels file, the line naming it. Images are the files Pillow opens by extension, sorted; hidden
files and folders are skipped and sub-folders of a class belong to that class (ImageFolder
recurses). An empty class folder is refused rather than skipped: skipping it would shift every
later class's index. As with val_map.txt, every image must stay inside the folder and each file
is one sample. The listing (paths, labels, class names) stands in for val_map.txt's bytes in
the fingerprint, so a renamed class folder is another dataset.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from quantmark.ground.errors import UserError

if TYPE_CHECKING:
    from .containment import Containment

log = logging.getLogger(__name__)

#: what Pillow opens, by extension (compared lower-case)
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
LAYOUT = "DIR/<class>/<image> (one folder per class) or val_map.txt"


@dataclass(frozen=True)
class ClassFolders:
    """A class-folder dataset as read: ``(relpath, label)`` items in folder order, the class
    names in label order, and each image's stat (for the content-hash memo)."""

    items: list[tuple[str, int]]
    classes: list[str]
    stats: list[os.stat_result]

    def listing(self) -> bytes:
        """What the fingerprint hashes where a val_map dataset has val_map.txt's bytes."""
        return json.dumps({"layout": "class-folders", "classes": self.classes,
                           "items": self.items}, ensure_ascii=False).encode("utf-8")


def read_class_folders(root: Path, inside: Containment, names: list[str] | None = None,
                       labels_path: Path | None = None) -> ClassFolders:
    """Read ``root``'s class folders; ``names`` (a labels file's, in the model's order) give
    the indices instead of the sorted folder names."""
    folders = class_folder_names(root)
    seen_dirs: dict[str, str] = {}
    skipped: list[str] = []
    files = {folder: _images(root, folder, inside, seen_dirs, skipped) for folder in folders}
    if skipped:
        log.debug("skipped %d files that are not images by extension in %s (e.g. %s)",
                  len(skipped), root, skipped[0])
    if not any(files.values()):
        raise _no_images(root)
    empty = [folder for folder in folders if not files[folder]]
    if empty:
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise UserError(
            f"class folder {root / empty[0]} has no images{more}; add images "
            f"({' '.join(sorted(IMAGE_EXTENSIONS))}) or remove the folder: an empty class "
            "would shift every later class's index")
    index = _class_index(folders, names, labels_path)
    items = [(rel, index[folder]) for folder in folders for rel in files[folder]]
    return ClassFolders(items, list(names) if names is not None else folders,
                        _stat_images(root, items, inside))


def class_folder_names(root: Path) -> list[str]:
    """The non-hidden folders directly in ``root`` (symlinked ones too), sorted."""
    try:
        with os.scandir(root) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir())
    except OSError as exc:
        raise UserError(f"dataset folder {root} cannot be listed ({exc.strerror}); fix its "
                        "permissions") from None
    for name in names:
        if name != name.strip() or "\n" in name or "\r" in name:
            raise UserError(f"class folder {_quoted(name)} in {root} begins or ends with "
                            "whitespace or holds a line break, which a labels file or "
                            "val_map.txt line cannot name; rename it")
    return names


def _no_images(root: Path) -> UserError:
    try:
        loose = sum(1 for e in os.scandir(root) if not e.name.startswith(".") and e.is_file()
                    and Path(e.name).suffix.lower() in IMAGE_EXTENSIONS)
    except OSError:
        loose = 0
    where = f" ({loose} images lie directly in it: move each into its class's folder)" \
        if loose else ""
    return UserError(f"dataset folder {root} has no images{where}: expected {LAYOUT} listing "
                     "'<relative path> <label>' lines")


def _images(root: Path, folder: str, inside: Containment, seen_dirs: dict[str, str],
            skipped: list[str]) -> list[str]:
    """Relative paths (with '/') of the images under ``root/folder``, sorted; a sub-folder
    leading out of the dataset, or reaching a folder already read, is refused."""
    found: list[str] = []
    pending = [folder]
    while pending:
        rel_dir = pending.pop()
        real = os.path.realpath(root / rel_dir)
        inside.check(rel_dir, real, str(root))
        if real in seen_dirs:
            raise UserError(
                f"folder {root / rel_dir} is {root / seen_dirs[real]} again through a symlink, "
                "so its images would be counted twice; remove the link")
        seen_dirs[real] = rel_dir
        try:
            with os.scandir(root / rel_dir) as scan:
                entries = [(e.name, e.is_dir()) for e in scan if not e.name.startswith(".")]
        except OSError as exc:
            raise UserError(f"folder {root / rel_dir} cannot be listed ({exc.strerror}); fix "
                            "its permissions") from None
        for name, is_dir in entries:
            rel = f"{rel_dir}/{name}"
            if "\n" in name or "\r" in name:
                raise UserError(f"{_quoted(str(root / rel))} has a line break in its name, "
                                "which the run's val_map.txt cannot list; rename it")
            if is_dir:
                pending.append(rel)
            elif Path(name).suffix.lower() in IMAGE_EXTENSIONS:
                found.append(rel)
            else:
                skipped.append(rel)
    return sorted(found)


def _class_index(folders: list[str], names: list[str] | None,
                 labels_path: Path | None) -> dict[str, int]:
    """Folder name -> class index: sorted position, or the labels file's line."""
    if names is None:
        return {folder: i for i, folder in enumerate(folders)}
    line = {name: i for i, name in enumerate(names)}
    for folder in folders:
        if folder not in line:
            raise UserError(
                f"dataset class {_quoted(folder)} is not among the model's classes in "
                f"{labels_path}; rename the folder to the model's name for that class (a line "
                "of the labels file) or remove it")
    return {folder: line[folder] for folder in folders}


def _stat_images(root: Path, items: Sequence[tuple[str, int]], inside: Containment
                 ) -> list[os.stat_result]:
    """Each image's stat once it is known to stay inside ``root``; one file reached twice
    (a symlink or hard link) would be scored twice, so it is refused naming both paths."""
    stats = []
    files: dict[tuple[int, int], int] = {}
    for row, (rel, _) in enumerate(items):
        try:
            info = inside.stat(rel, str(root))
        except OSError as exc:
            raise UserError(f"image {root / rel} cannot be read ({exc.strerror}); restore it "
                            "or remove it") from None
        first = files.setdefault((info.st_dev, info.st_ino), row)
        if first != row:
            raise UserError(
                f"{root}: {_quoted(rel)} is the same file as {_quoted(items[first][0])} through "
                "a symlink or hard link, so it would be scored twice; remove one of them")
        stats.append(info)
    return stats


def _quoted(text: str, limit: int = 60) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
