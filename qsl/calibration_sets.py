"""Calibration images for post-training quantisation, never drawn from the performance samples.

MLPerf forbids calibrating on the images being scored. Three sources, in order of preference:
the built-in dataset's own ``cal_map.txt`` split; a user list (MLPerf style, one relative path per
line, typically pointing into the *train* folder); or a seeded subset held out of the user's
dataset, which is then removed from its evaluation items (``dataset.hold_out``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_json

from .builtin import CAL_MAP
from .cache import load_or_build
from .imagenet import ImageFolderDataset, content_hashes, parse_path_list
from .preprocess import PreprocessRecipe, normalise, recipe_for

DEFAULT_COUNT = 500  # MLPerf ResNet-50 calibration list size
DEFAULT_SEED = 0
# images the runner's calibration set holds: the built-in split's, or out of an ImageNet folder
CALIBRATION_COUNT = {"builtin": 256, "imagenet": 500}


@dataclass
class CalibrationSet:
    """Which images calibrate a model, and a hash that says so in results."""

    root: Path  # items are relative to this folder
    items: list[str]
    source: str  # "builtin cal_map.txt" | "user list FILE" | "held out from dataset"
    count: int
    seed: int | None
    recipe: PreprocessRecipe = field(default_factory=PreprocessRecipe)
    _content: list[str] | None = field(default=None, repr=False, compare=False)

    def content(self) -> list[str]:
        """sha256 of each image's bytes (memoised like the dataset fingerprint): an image
        edited in place, same name and size, is other calibration data."""
        if self._content is None:
            self._content = content_hashes(self.root, self.items,
                                           [(self.root / rel).stat() for rel in self.items])
        return self._content

    @property
    def recipe_key(self) -> str:
        return self.recipe.key()

    def hash(self) -> str:
        """Identity of the calibration data: a changed image list changes quantised results."""
        return hash_json(
            {
                "source": self.source,
                "count": self.count,
                "seed": self.seed,
                "recipe": self.recipe_key,
                "items": self.items,
                "content": self.content(),
            }
        )

    def arrays(self, recipe: PreprocessRecipe | None = None) -> np.ndarray:
        """float32 batch ``(count, ...)`` in the recipe's layout (geometry cached like the QSL)."""
        recipe = recipe or self.recipe
        if recipe.key() != self.recipe_key:
            raise ValueError(
                "calibration set was made for another recipe; call calibration_for(recipe=...)"
            )
        paths = [self.root / rel for rel in self.items]
        key = hash_json({"calibration": self.hash(), "geometry": recipe.geometry_key()})
        uint8 = load_or_build(paths, [f"calibration {self.source}"] * len(paths), recipe, key)
        return normalise(np.asarray(uint8), recipe)


def calibration_for(
    dataset: ImageFolderDataset,
    count: int = DEFAULT_COUNT,
    seed: int = DEFAULT_SEED,
    list_file: str | os.PathLike | None = None,
    list_root: str | os.PathLike | None = None,
    recipe: PreprocessRecipe | None = None,
) -> CalibrationSet:
    """Pick calibration images for ``dataset`` without touching its evaluation items.

    With ``list_file`` its entries are resolved against ``list_root`` (default: the dataset
    folder) and all of them are used (``count`` is ignored). Without one, the built-in dataset
    uses ``count`` items of its calibration split and any other dataset holds out ``count``
    seeded items, removing them from ``dataset.items``.
    """
    recipe = recipe or PreprocessRecipe()
    if count < 1:
        raise UserError(f"calibration count {count} must be at least 1; pass a positive count")
    if list_file is not None:
        return _from_list(dataset, Path(list_file), list_root, recipe)
    if dataset.builtin:
        entries = parse_path_list(dataset.root / CAL_MAP)
        if count > len(entries):
            raise UserError(
                f"the built-in dataset has {len(entries)} calibration images, "
                f"not {count}; ask for at most {len(entries)}"
            )
        items = [rel for rel, _ in entries]
        if count < len(items):
            pick = np.sort(np.random.default_rng(seed).choice(len(items), count, replace=False))
            items = [items[i] for i in pick]
        return CalibrationSet(dataset.root, items, f"builtin {CAL_MAP}", count, seed, recipe)
    return _held_out(dataset, count, seed, recipe)


def _from_list(
    dataset: ImageFolderDataset, list_file: Path, list_root, recipe: PreprocessRecipe
) -> CalibrationSet:
    if not list_file.is_file():
        raise UserError(
            f"calibration list {list_file} does not exist; pass an existing file "
            "with one relative image path per line"
        )
    root = Path(list_root) if list_root is not None else dataset.root
    entries = parse_path_list(list_file)
    if not entries:
        raise UserError(f"calibration list {list_file} is empty; add one image path per line")
    evaluated = {os.path.realpath(dataset.path(rel)) for rel, _ in dataset.items}
    for rel, line in entries:
        path = root / rel
        if not path.is_file():
            raise UserError(
                f"calibration image {path} listed at {list_file}:{line} does not "
                f"exist; fix the path (relative to {root}) or remove that line"
            )
        if os.path.realpath(path) in evaluated:
            raise UserError(
                f"calibration image {rel} ({list_file}:{line}) is also an "
                "evaluation item; calibrate on other images (e.g. the train set)"
            )
    items = [rel for rel, _ in entries]
    calibration = CalibrationSet(root, items, f"user list {list_file}", len(items), None, recipe)
    _refuse_copies(dataset, calibration, list_file, [line for _, line in entries])
    return calibration


def _refuse_copies(dataset: ImageFolderDataset, calibration: CalibrationSet, list_file: Path,
                   lines: list[int]) -> None:
    """A calibration image with the bytes of an evaluation image (a copy under another name
    or folder) is refused like the image itself: MLPerf forbids calibrating on scored images.
    Both sides are hashed anyway (the dataset fingerprint, the calibration hash)."""
    content = dataset.content()
    evaluated: dict[str, int] = {}
    for row in dataset.cache_rows:
        evaluated.setdefault(content[row], int(row))
    copies = [(i, evaluated[digest]) for i, digest in enumerate(calibration.content())
              if digest in evaluated]
    if not copies:
        return
    first, row = copies[0]
    more = f" (and {len(copies) - 1} more of its images)" if len(copies) > 1 else ""
    raise UserError(
        f"calibration image {calibration.items[first]} ({list_file}:{lines[first]}) has the "
        f"same bytes as evaluation image {dataset.all_items[row][0]} ({dataset.describe(row)})"
        f"{more}; calibrate on other images (e.g. the train set) or remove those lines"
    )


def _held_out(
    dataset: ImageFolderDataset, count: int, seed: int, recipe: PreprocessRecipe
) -> CalibrationSet:
    # Drawn from all listed items (not the current evaluation items) so that calling this
    # twice with the same seed holds out the same images instead of eating more of the set.
    available = len(dataset.all_items)
    if count >= available:
        raise UserError(
            f"cannot hold out {count} calibration images from {available} "
            f"images in {dataset.root}; pass a smaller count or a list"
        )
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(available, count, replace=False))
    items = [dataset.all_items[i][0] for i in pick]
    dataset.hold_out(items)
    return CalibrationSet(dataset.root, items, "held out from dataset", count, seed, recipe)


class CalibrationProvider:
    """Calibration data for INT8 SUTs, chosen before the QSL exists and decoded only on use.

    The same images are held out of an ImageNet folder whatever the SUT, so FP32 and INT8 are
    scored on the same evaluation set: at most 500 (MLPerf's calibration list size), at most a
    tenth of the folder. ``--calibration-list`` holds nothing out.
    """

    def __init__(self, dataset: ImageFolderDataset, spec: Any, list_file: str | None) -> None:
        if dataset.builtin:
            count = CALIBRATION_COUNT["builtin"]
        else:  # a hold-out size; a --calibration-list uses all its entries instead
            count = min(CALIBRATION_COUNT["imagenet"], len(dataset) // 10)
        self._dataset_size = len(dataset)
        self._set = None
        if count > 0 or list_file:
            self._set = calibration_for(dataset, count=max(count, 1), seed=0,
                                        list_file=list_file, recipe=recipe_for(spec, "NCHW"))

    def _require(self):
        if self._set is None:
            raise UserError(f"the dataset has only {self._dataset_size} images, too few to hold "
                            "out calibration images; pass --calibration-list FILE")
        return self._set

    def arrays(self, layout: str):
        """float32 calibration batch in ``layout`` (the set itself is kept NCHW)."""
        data = self._require().arrays()
        return data if layout == "NCHW" else np.ascontiguousarray(data.transpose(0, 2, 3, 1))

    def hash(self) -> str:
        return self._require().hash()

    def describe(self) -> dict[str, Any] | None:
        if self._set is None:
            return None
        return {"source": self._set.source, "count": self._set.count, "seed": self._set.seed,
                "hash": self._set.hash(), "items_sample": self._set.items[:5]}
