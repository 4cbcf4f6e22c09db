"""An ImageNet-format folder: ``val_map.txt`` (``<relative path> <label>``) next to the images.

This is the layout MLPerf's ResNet-50 reference reads. Every problem with it is a UserError of one
line naming the file (and line) and the fix, so run.py can print it instead of a traceback.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from quantmark.errors import UserError
from quantmark.hashing import hash_json

VAL_MAP = "val_map.txt"
NUM_CLASSES = 1000


class ImageFolderDataset:
    """Images listed in ``val_map.txt``; some may be held out for calibration (see ``hold_out``).

    ``all_items`` is the full list (the preprocessed cache is built over it, so holding out a
    different calibration subset never rebuilds the cache). ``items``/``labels`` are the
    evaluation items only, and ``cache_rows`` maps each of them to its row in the cache.
    """

    def __init__(self, root: str | os.PathLike, *, builtin: bool = False) -> None:
        self.root = Path(root).expanduser()
        self.builtin = builtin
        if not self.root.is_dir():
            raise UserError(
                f"dataset folder {self.root} does not exist; "
                "pass --dataset-path DIR with val_map.txt and images"
            )
        self.map_path = self.root / VAL_MAP
        if not self.map_path.is_file():
            raise UserError(
                f"{self.map_path} is missing; an ImageNet-format folder needs val_map.txt "
                "with one '<relative path> <label>' line per image"
            )
        self._map_bytes = self.map_path.read_bytes()
        self.all_items, self.line_numbers = parse_val_map(self._map_bytes, self.map_path)
        if not self.all_items:
            raise UserError(f"{self.map_path} lists no images; add '<relative path> <label>' lines")
        self._sizes = self._stat_images()
        self.held_out: list[str] = []
        self.cache_rows = np.arange(len(self.all_items), dtype=np.int64)
        self._fingerprint: str | None = None

    def _stat_images(self) -> list[int]:
        """Sizes of every listed image; a missing one is a UserError naming its val_map line."""
        sizes = []
        for (rel, _), line in zip(self.all_items, self.line_numbers, strict=True):
            try:
                sizes.append((self.root / rel).stat().st_size)
            except OSError:
                raise UserError(
                    f"image {self.root / rel} listed at {self.map_path}:{line} does not exist; "
                    "restore the file or remove that line"
                ) from None
        return sizes

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
        """Where an item came from, for error messages: ``val_map.txt:LINE``."""
        return f"{self.map_path}:{self.line_numbers[row]}"

    def fingerprint(self) -> str:
        """Cheap identity: val_map.txt bytes plus every image's size (no image is read)."""
        if self._fingerprint is None:
            digest = hashlib.sha256(self._map_bytes).hexdigest()
            self._fingerprint = hash_json({"val_map": digest, "sizes": self._sizes})
        return self._fingerprint

    def hold_out(self, relpaths: list[str]) -> None:
        """Remove these items from evaluation (in place) so the QSL never contains them.

        Idempotent for the same items; holding out a different set removes those too.
        """
        drop = set(relpaths)
        unknown = drop - {rel for rel, _ in self.all_items}
        if unknown:
            raise ValueError(f"cannot hold out items not in {self.map_path}: {sorted(unknown)[:3]}")
        keep = [i for i in self.cache_rows if self.all_items[i][0] not in drop]
        already = set(self.held_out)
        self.held_out.extend(rel for rel in dict.fromkeys(relpaths) if rel not in already)
        self.cache_rows = np.asarray(keep, dtype=np.int64)


def parse_val_map(data: bytes, path: Path) -> tuple[list[tuple[str, int]], list[int]]:
    """Parse ``<relative path> <label>`` lines; blank lines are skipped, anything else is bad."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        msg = f"{path} is not UTF-8 text; write it as '<relative path> <label>' lines"
        raise UserError(msg) from None
    items: list[tuple[str, int]] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        parts = line.rsplit(maxsplit=1)
        label = _parse_label(parts[1]) if len(parts) == 2 else None
        if label is None and len(parts) == 2 and parts[1] == str(NUM_CLASSES):
            raise UserError(
                f"{path}:{number}: label {NUM_CLASSES} means 1-based labels (ILSVRC devkit or "
                "TF-slim style); MLPerf's val_map.txt is 0-based 0..999 in sorted-synset order: "
                "convert the file (see README, Label conventions)"
            )
        if label is None:
            raise UserError(
                f"{path}:{number}: malformed line {_short(line)}; "
                f"expected '<relative path> <label>' with a label 0..{NUM_CLASSES - 1}"
            )
        rel = parts[0]
        if os.path.isabs(rel):
            raise UserError(f"{path}:{number}: path {_short(rel)} is absolute; make it relative")
        if rel in seen:
            raise UserError(
                f"{path}:{number}: {_short(rel)} is listed again (first at line {seen[rel]}); "
                "remove the duplicate"
            )
        seen[rel] = number
        items.append((rel, label))
        lines.append(number)
    return items, lines


def parse_path_list(path: Path) -> list[tuple[str, int]]:
    """Parse an MLPerf-style list (one relative path per line, optional trailing label)."""
    try:
        text = path.read_text(encoding="utf-8")
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
    try:
        value = int(token)
    except ValueError:
        return None
    return value if 0 <= value < NUM_CLASSES else None


def _short(text: str, limit: int = 60) -> str:
    text = text.replace("\r", " ").replace("\n", " ")
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
