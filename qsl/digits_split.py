"""The second built-in workload's data: scikit-learn's 1,797 real handwritten digits, split once.

The digits are real, labelled and independent (one scan per sample: no crops, no augmentation),
so an INT8 accuracy change measured on them has a meaningful interval, unlike the 7-photo set.
They are split in half, stratified by class, with a fixed seed: the model trains on one half
(``train_arrays``, for ``quantmark.models.digits_cnn``) and is scored on the other.

The held-out half is written once into the cache as a class-per-folder tree,
``held-out/<digit>/<index>.png`` (8-bit grey PNG, value * 255 / 16 rounded half to even;
``<index>`` is the sample's position in ``load_digits``), with nothing else in it. Next to that
tree, ``contents.json`` records every file's sha256 in the built-in photo set's format, and each
open checks the tree against it (``qsl.builtin.verify``), plus that no file was added: a
damaged, partly deleted or grown tree is rebuilt with one warning line, never trusted. It is
written into a temp folder and renamed into place, so no reader ever sees half of it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import dist_version
from quantmark.ground.hashing import atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

from .builtin import CAL_MAP, CONTENTS, install, verify
from .groups import VAL_GROUPS

log = logging.getLogger(__name__)

# Bump when the tree's files change for the same split (naming, pixel scaling, format).
# 2: the calibration images (from the train half) are written beside the held-out tree
# 3: val_groups.txt says each scan is its own source (independent samples)
DIGITS_VERSION = 3
SPLIT_SEED = 0
HELD_OUT_FRACTION = 0.5
HELD_OUT = "held-out"  # the class-per-folder tree inside the cache folder
# INT8 calibration images, drawn from the TRAIN half (never scored): a hidden folder inside the
# tree (class-folder datasets skip hidden folders) listed by cal_map.txt, as the photos' are
CALIBRATION = ".calibration"
CALIBRATION_COUNT = 256
DATA_FILE = ("datasets", "data", "digits.csv.gz")  # inside the sklearn package
PIXEL_SCALE = 255.0 / 16.0  # load_digits' grey levels are 0..16
SOURCE = ("scikit-learn load_digits: 1,797 8x8 handwritten digits (UCI optdigits), 10 classes, "
          "one scan per sample")
SPLIT_RULE = (f"sklearn.model_selection.train_test_split(test_size={HELD_OUT_FRACTION}, "
              f"stratify=labels, random_state={SPLIT_SEED}); exact duplicate images dropped "
              "first, so no image is in both halves")


@dataclass(frozen=True)
class DigitsSplit:
    """Both halves as 8-bit grey pixels ``[N, 8, 8]`` (what the PNGs hold) and int64 labels;
    ``*_index`` are each sample's position in ``load_digits`` (ascending)."""

    train_x: np.ndarray
    train_y: np.ndarray
    train_index: np.ndarray
    held_x: np.ndarray
    held_y: np.ndarray
    held_index: np.ndarray
    description: dict[str, Any] = field(compare=False)


def _data_file() -> Path:
    """scikit-learn's digits file, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the built-in digits workload is scikit-learn's handwritten digits, and "
                        "scikit-learn is not installed: pip install 'quantmark[data]', or pass "
                        "--dataset-path")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*DATA_FILE)
    if not path.is_file():
        raise UserError(f"scikit-learn lacks its digits file {path}; reinstall it: "
                        "pip install --force-reinstall scikit-learn")
    return path


def split_key() -> str:
    """What decides the split (its rule, seed and data) as a short hash, without importing
    scikit-learn: names the cache folder and goes into the digits model's training recipe."""
    return hash_json({"version": DIGITS_VERSION, "seed": SPLIT_SEED,
                      "held_out": HELD_OUT_FRACTION, "data": hash_file(_data_file(), 64),
                      "scikit-learn": dist_version("scikit-learn")}, 12)


@functools.cache
def load_split() -> DigitsSplit:
    """The fixed, deterministic stratified split (computed once per process)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.rint(digits.images * PIXEL_SCALE).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    # independent samples: an image that appears twice would be in both halves
    _, first = np.unique(pixels.reshape(len(pixels), -1), axis=0, return_index=True)
    kept = np.sort(first)
    train_i, held_i = train_test_split(kept, test_size=HELD_OUT_FRACTION,
                                       stratify=labels[kept], random_state=SPLIT_SEED)
    train_i, held_i = np.sort(train_i), np.sort(held_i)
    description = {
        "source": SOURCE, "split": SPLIT_RULE, "samples": len(labels),
        "duplicates_dropped": len(labels) - len(kept), "train": len(train_i),
        "held_out": len(held_i), "classes": int(labels.max()) + 1,
        "pixels": "8-bit grey, value*255/16 rounded half to even",
        "key": split_key(), "scikit-learn": dist_version("scikit-learn"),
        "held_out_indices_sha256": hash_json(held_i.tolist(), 64),
    }
    return DigitsSplit(pixels[train_i], labels[train_i], train_i, pixels[held_i],
                       labels[held_i], held_i, description)


def train_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The TRAIN half: grey pixels ``[N, 8, 8]`` uint8 0..255 and labels ``[N]`` int64."""
    split = load_split()
    return split.train_x, split.train_y


def held_out_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The held-out half, as the tree on disk holds it."""
    split = load_split()
    return split.held_x, split.held_y


def split_description() -> dict[str, Any]:
    """The exact split, for outputs: source, rule, sizes and a hash of the held-out indices."""
    return dict(load_split().description)


def digits_description() -> str:
    """The built-in digits dataset in words, for every output that names a dataset."""
    split = load_split().description
    return (f"built-in: scikit-learn handwritten digits, held-out half ({split['held_out']} "
            f"of {split['samples']} real 8x8 grey scans, 10 classes, independent samples; "
            f"split {split['key']}), calibrated on {CALIBRATION_COUNT} train-half images")


def digits_dataset_root() -> Path:
    """The held-out class-per-folder tree, verified, and (re)built when absent or damaged."""
    top = cache_dir("datasets") / f"digits-v{DIGITS_VERSION}-{split_key()}"
    if top.exists():
        problem = verify_tree(top)
        if problem is None:
            return top / HELD_OUT
        log.warning("built-in digits dataset %s failed verification: %s; rebuilding it", top,
                    problem)
    else:
        log.info("writing the built-in digits dataset (held-out half of scikit-learn's digits, "
                 "one-off) into %s ...", top)
    tmp = Path(tempfile.mkdtemp(prefix=f".{top.name}.", dir=top.parent))
    try:
        write_tree(tmp, load_split())
        install(tmp, top, verify_tree, "built-in digits dataset")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return top / HELD_OUT


def verify_tree(top: Path) -> str | None:
    """None when the tree is exactly what was written (every recorded file's sha256, and no
    other file), else what is wrong (one phrase)."""
    problem = verify(top)
    if problem is not None:
        return problem
    recorded = set(json.loads((top / CONTENTS).read_text())["files"])
    for folder, _, names in os.walk(top / HELD_OUT):
        for name in names:
            rel = Path(folder, name).relative_to(top).as_posix()
            if rel not in recorded:
                return f"{rel} was not written by quantmark"
    return None


def write_tree(folder: Path, split: DigitsSplit) -> None:
    """The held-out PNGs under ``folder/held-out``, then, last, their sha256 in contents.json."""
    rels = []
    for pixels, label, index in zip(split.held_x, split.held_y, split.held_index, strict=True):
        rel = f"{HELD_OUT}/{label}/{index:04d}.png"
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(pixels)).save(folder / rel)  # uint8 2-D: mode L
        rels.append(rel)
    # every scan is its own source: accuracy intervals resample scans (the photos' crops of
    # one photo are resampled together instead)
    (folder / HELD_OUT / VAL_GROUPS).write_text("".join(
        f"{rel.removeprefix(HELD_OUT + '/')} scan-{index:04d}\n"
        for rel, index in zip(rels, split.held_index, strict=True)))
    pick = np.sort(np.random.default_rng(SPLIT_SEED).choice(len(split.train_y),
                                                            CALIBRATION_COUNT, replace=False))
    listed = []
    for i in pick:
        label, index = split.train_y[i], split.train_index[i]
        listed.append(f"{CALIBRATION}/{label}/{index:04d}.png")
        (folder / HELD_OUT / listed[-1]).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(split.train_x[i])).save(folder / HELD_OUT /
                                                                      listed[-1])
    (folder / HELD_OUT / CAL_MAP).write_text("".join(f"{rel}\n" for rel in listed))
    rels += [f"{HELD_OUT}/{rel}" for rel in (*listed, CAL_MAP, VAL_GROUPS)]
    files = {rel: hash_file(folder / rel, 64) for rel in rels}
    atomic_write_json(folder / CONTENTS, {"files": files, "sha256": hash_json(files, 64)})


