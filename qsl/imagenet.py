"""A dataset folder: ``val_map.txt`` (``<relative path> <label>``) next to the images, the layout
MLPerf's ResNet-50 reference reads, or else one folder of images per class (``class_folders``).

Every problem with it is a UserError of one line naming the file (and line) and the fix, so
run.py can print it instead of a traceback. Every image must stay inside the folder once '..'
and symlinks are resolved: the folder is what the fingerprint, the cache and an exported copy
stand for. A labels file (``label_space``) names the classes in the model's output order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

from .class_folders import read_class_folders
from .containment import Containment, quoted
from .label_space import read_class_names

log = logging.getLogger(__name__)

VAL_MAP = "val_map.txt"
NUM_CLASSES = 1000  # ImageNet's: a bare val_map whose top label is 1000 is 1-based
# A file changed less than this long ago may change again within the same timestamp tick
# (ctime is kept at a few ms granularity): its hash is not memoised, as git does with
# "racily clean" index entries.
RACY_NS = 2_000_000_000
MEMO_VERSION = 1
#: a UTF-8 byte-order mark, as Windows editors save text: read as part of the first path
#: it would make the first image "missing"
BOM = "\ufeff"


class ImageFolderDataset:
    """Images listed in ``val_map.txt``, or in class folders when the folder has no val_map;
    some may be held out for calibration (see ``hold_out``).

    ``all_items`` is the full list (the preprocessed cache is built over it, so holding out a
    different calibration subset never rebuilds the cache). ``items``/``labels`` are the
    evaluation items only, and ``cache_rows`` maps each of them to its row in the cache.
    ``classes`` names the labels (None for a bare val_map: ImageNet's convention) and
    ``num_classes`` is the dataset's label space (the class folders', or the labels file's).
    """

    def __init__(self, root: str | os.PathLike, labels: str | os.PathLike | None = None, *,
                 builtin: bool = False) -> None:
        self.root = Path(root).expanduser()
        self.builtin = builtin
        self.description: str | None = None  # a built-in dataset says what it is
        if not self.root.is_dir():
            raise UserError(
                f"dataset folder {self.root} does not exist; pass --dataset-path DIR with "
                "val_map.txt or one folder of images per class"
            )
        self.labels_path = Path(labels).expanduser() if labels is not None else None
        self.classes = read_class_names(self.labels_path) if self.labels_path else None
        self.map_path = self.root / VAL_MAP
        if self.map_path.is_file():
            self._read_val_map()
        else:
            self._read_class_folders()
        self.num_classes = len(self.classes) if self.classes is not None else None
        self.held_out: list[str] = []
        self.cache_rows = np.arange(len(self.all_items), dtype=np.int64)
        self._fingerprint: str | None = None
        self._content: list[str] | None = None

    def _read_val_map(self) -> None:
        """The listed images; a labels file only names their integer labels."""
        self.layout = "val_map"
        self._map_bytes = self.map_path.read_bytes()
        self.all_items, self.line_numbers = parse_val_map(
            self._map_bytes, self.map_path, None if self.classes is None else len(self.classes),
            self.labels_path)
        if not self.all_items:
            raise UserError(f"{self.map_path} lists no images; add '<relative path> <label>' lines")
        self._stats = self._stat_images()

    def _read_class_folders(self) -> None:
        """``root/<class>/<image>``: the listing stands in for val_map.txt's bytes."""
        self.layout = "class-folders"
        folders = read_class_folders(self.root, Containment(self.root), self.classes,
                                     self.labels_path)
        self.all_items, self.line_numbers = folders.items, []
        self.classes = folders.classes
        self._map_bytes = folders.listing()
        self._stats = folders.stats

    def _stat_images(self) -> list[os.stat_result]:
        """Stat every listed image; a missing one, or one whose path leads out of the folder
        ('..', a symlink), is a UserError naming its val_map line."""
        inside = Containment(self.root)
        stats = []
        files: dict[tuple[int, int], int] = {}  # (device, inode) -> row: one file, one line
        for row, ((rel, _), line) in enumerate(zip(self.all_items, self.line_numbers,
                                                    strict=True)):
            where = f"{self.map_path}:{line}"
            try:
                info = inside.stat(rel, where)
            except OSError:
                raise UserError(
                    f"image {self.root / rel} listed at {where} does not exist; "
                    "restore the file or remove that line"
                ) from None
            first = files.setdefault((info.st_dev, info.st_ino), row)
            if first != row:
                raise UserError(
                    f"{where}: {quoted(rel)} is the same file as {quoted(self.all_items[first][0])}"
                    f" (line {self.line_numbers[first]}) through a symlink or hard link, so it "
                    "would be scored twice; remove one of the lines"
                )
            stats.append(info)
        return stats

    def __len__(self) -> int:
        """Number of evaluation items (after any hold-out)."""
        return len(self.cache_rows)

    def __repr__(self) -> str:
        return (
            f"ImageFolderDataset({str(self.root)!r}, items={len(self)}, "
            f"held_out={self.held_out_count})"
        )

    @property
    def items(self) -> list[tuple[str, int]]:
        """Evaluation items ``(relpath, label)``: calibration images never appear here."""
        return [self.all_items[i] for i in self.cache_rows]

    @property
    def labels(self) -> np.ndarray:
        """Labels of the evaluation items, int64."""
        return np.asarray([self.all_items[i][1] for i in self.cache_rows], dtype=np.int64)

    @property
    def held_out_count(self) -> int:
        """How many listed images were held out (for calibration) and are not evaluated."""
        return len(self.held_out)

    def path(self, relpath: str) -> Path:
        return self.root / relpath

    def describe(self, row: int) -> str:
        """Where an item came from, for error messages: ``val_map.txt:LINE``, or the image's
        path in a class-folder dataset."""
        if self.layout == "class-folders":
            return str(self.root / self.all_items[row][0])
        return f"{self.map_path}:{self.line_numbers[row]}"

    def fingerprint(self) -> str:
        """Identity of the listed content: sha256 of val_map.txt (or of the class-folder
        listing) and of every image's bytes.

        Content, not a stat signature (size + mtime + inode, as make and rsync use): the
        fingerprint is compared across copies and machines (results, export records), and a
        copy has other inodes and times. Re-reading every image per run would cost seconds on
        ImageNet, so the hashes are memoised per file by (size, mtime, ctime, inode), like
        git's index: rewriting a file changes its ctime even when its size is kept and its
        mtime is set back (touch cannot set ctime), so an edited image is always re-read.
        """
        if self._fingerprint is None:
            digest = hashlib.sha256(self._map_bytes).hexdigest()
            self._fingerprint = hash_json({"val_map": digest, "images": self.content()})
        return self._fingerprint

    def content(self) -> list[str]:
        """sha256 (32 hex) of every listed image's bytes, in ``all_items`` order (memoised):
        what the fingerprint hashes, and what a calibration list is checked against."""
        if self._content is None:
            self._content = content_hashes(self.root, [rel for rel, _ in self.all_items],
                                           self._stats)
        return self._content

    def hold_out(self, relpaths: list[str]) -> None:
        """Remove these items from evaluation (in place) so the QSL never contains them.

        Idempotent for the same items; holding out a different set removes those too.
        """
        drop = set(relpaths)
        unknown = drop - {rel for rel, _ in self.all_items}
        if unknown:
            raise ValueError(f"cannot hold out items not in {self.root}: {sorted(unknown)[:3]}")
        keep = [i for i in self.cache_rows if self.all_items[i][0] not in drop]
        already = set(self.held_out)
        self.held_out.extend(rel for rel in dict.fromkeys(relpaths) if rel not in already)
        self.cache_rows = np.asarray(keep, dtype=np.int64)


def content_hashes(root: Path, rels: Sequence[str], stats: Sequence[os.stat_result]) -> list[str]:
    """sha256 (32 hex) of each file ``root/rel``; a file whose (size, mtime, ctime, inode) is
    what it was when last hashed comes from a memo in the cache instead of being read again."""
    memo_path = _memo_path(root)
    memo = _read_memo(memo_path) if memo_path is not None else {}
    out: list[str] = []
    todo: list[int] = []
    for i, (rel, info) in enumerate(zip(rels, stats, strict=True)):
        entry = memo.get(rel)
        if isinstance(entry, list) and entry[:4] == _signature(info):
            out.append(str(entry[4]))
        else:
            out.append("")
            todo.append(i)
    if not todo:
        return out

    def one(i: int) -> str:
        try:
            return hash_file(Path(root) / rels[i], 32)
        except OSError as exc:
            raise UserError(f"image {Path(root) / rels[i]} cannot be read ({exc.strerror}); "
                            "fix its permissions or remove its line") from None

    with ThreadPoolExecutor(max(1, min(8, len(todo)))) as pool:
        for i, digest in zip(todo, pool.map(one, todo), strict=True):
            out[i] = digest
    if memo_path is not None:
        _write_memo(memo_path, rels, stats, out)
    return out


def _memo_path(root: Path) -> Path | None:
    """One memo per dataset folder (by real path); None when the cache cannot be created."""
    try:
        folder = cache_dir("datasets") / "content-hashes"
    except OSError:
        return None
    return folder / f"{hash_json(os.path.realpath(root))}.json"


def _signature(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _read_memo(path: Path) -> dict[str, list]:
    try:
        data = json.loads(path.read_text())
        files = data["files"] if data.get("version") == MEMO_VERSION else {}
        return files if isinstance(files, dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_memo(path: Path, rels: Sequence[str], stats: Sequence[os.stat_result],
                hashes: Sequence[str]) -> None:
    """Keep the hashes of files that changed long enough ago (see ``RACY_NS``)."""
    settled = time.time_ns() - RACY_NS
    files = {rel: [*_signature(info), digest]
             for rel, info, digest in zip(rels, stats, hashes, strict=True)
             if max(info.st_mtime_ns, info.st_ctime_ns) < settled}
    try:
        atomic_write_json(path, {"version": MEMO_VERSION, "files": files})
    except OSError as exc:  # a read-only cache only costs re-hashing next time
        log.debug("cannot write the content-hash memo %s: %s", path, exc)


def parse_val_map(data: bytes, path: Path, num_classes: int | None = None,
                  named_in: str | os.PathLike | None = None
                  ) -> tuple[list[tuple[str, int]], list[int]]:
    """Parse ``<relative path> <label>`` lines; blank lines are skipped, anything else is bad.

    A label is any integer >= 0: the label space is the dataset's. With ``num_classes`` (the
    names of a labels file, ``named_in``) each label must have a name. Without, a top label of
    exactly 1000 is ImageNet's 1-based convention (ILSVRC devkit, TF-slim) and refused.
    """
    try:
        text = data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError:
        msg = f"{path} is not UTF-8 text; write it as '<relative path> <label>' lines"
        raise UserError(msg) from None
    items: list[tuple[str, int]] = []
    lines: list[int] = []
    seen: dict[str, tuple[int, str]] = {}  # normalised path -> (line, path as written)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = line.rsplit(maxsplit=1)
        label = _parse_label(parts[1]) if len(parts) == 2 else None
        if label is None:
            raise UserError(
                f"{path}:{number}: malformed line {quoted(line)}; "
                "expected '<relative path> <label>' with an integer label >= 0"
            )
        if num_classes is not None and label >= num_classes:
            raise UserError(
                f"{path}:{number}: label {label} has no class name: {named_in or 'the labels'} "
                f"names {num_classes} classes (labels 0..{num_classes - 1}); fix the label or "
                "pass the labels file of this dataset"
            )
        rel = parts[0]
        if os.path.isabs(rel):
            raise UserError(f"{path}:{number}: path {quoted(rel)} is absolute; make it relative")
        key = os.path.normpath(rel)  # ./img/x, img//x and img/../img/x are img/x
        if key in seen:
            first, written = seen[key]
            also = "" if written == rel else f" as {quoted(written)}"
            raise UserError(
                f"{path}:{number}: {quoted(rel)} is listed again (first at line {first}{also}); "
                "remove the duplicate"
            )
        seen[key] = (number, rel)
        items.append((rel, label))
        lines.append(number)
    if num_classes is None:
        _refuse_one_based(items, lines, path)
    return items, lines


def _refuse_one_based(items: list[tuple[str, int]], lines: list[int], path: Path) -> None:
    """Labels 0..1000 in a bare val_map are ImageNet's 1..1000, one off every class."""
    if max((label for _, label in items), default=-1) != NUM_CLASSES:
        return
    number = next(line for (_, label), line in zip(items, lines, strict=True)
                  if label == NUM_CLASSES)
    raise UserError(
        f"{path}:{number}: label {NUM_CLASSES} means 1-based labels (ILSVRC devkit or "
        "TF-slim style); MLPerf's val_map.txt is 0-based 0..999 in sorted-synset order: "
        "convert the file (see docs/topics/your-model.md, Label conventions)"
    )


def parse_path_list(path: Path) -> list[tuple[str, int]]:
    """Parse an MLPerf-style list (one relative path per line, optional trailing label)."""
    try:
        text = path.read_text(encoding="utf-8").removeprefix(BOM)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"cannot read list {path} ({exc.__class__.__name__}); "
            "pass a text file with one relative image path per line"
        ) from None
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) == 2 and _parse_label(parts[1]) is not None:
            line = parts[0]
        out.append((line, number))
    return out


def _parse_label(token: str) -> int | None:
    return int(token) if token.isascii() and token.isdigit() else None  # not "+5", "5_0"
