"""The built-in detection dataset: real handwritten digit scans pasted onto small canvases.

No download is possible at run time and no installed package ships a COCO-style set, so the
detection workload is made from scikit-learn's 1,797 real 8x8 digit scans, split exactly as the
classification built-in splits them (``quantmark.qsl.digits_split``): both built-ins hold out
the same scans. Each image is a 96x96 RGB canvas (a smooth coloured background with pixel
noise) holding one to four digits, each one real scan upscaled bilinearly to 16-36 px and tinted
with a colour that contrasts with the background; its box is the digit's tight ink box (pixels
whose ink is at least ``INK``). Digits never overlap (boxes are kept ``GAP`` px apart).

Independence: the evaluation canvases are made from the held-out scans only, and EVERY held-out
scan is pasted into exactly one evaluation canvas, so no two evaluation images share a scan and
each image is an independent unit for an accuracy interval. Training canvases reuse train-half
scans freely (new positions, sizes and colours each time); no train scan is ever evaluated.
There are as many independent evaluation units as the held-out half allows: 899 scans in 356
images, no more (reusing a scan would add images, not independent ones). Measured on them, a
bootstrap over images puts the standard error of the built-in detector's mAP@[.5:.95] near 0.4
point, so a change of about 1 point is resolved (a paired FP32/INT8 comparison, more finely).

The folder is laid out as COCO's own: ``val2017/<id:012d>.png`` with
``annotations/instances_val2017.json`` (evaluation) and ``train2017/`` with
``annotations/instances_train2017.json`` (training). Category ids are COCO-like and NOT
contiguous (``CATEGORY_IDS``: digit d has id 2d + 1), so a model's class index must be mapped to
a category id explicitly, as COCO's 80-of-91 ids must be. Annotations carry an extra ``scan``
field (the scan's index in ``load_digits``) so independence can be checked.

Written once into the cache as the digits tree is: generated into a temp folder, sha256 of every
file in ``contents.json``, renamed into place; each use verifies every file (and that none was
added) and rebuilds a damaged tree with one warning line. Pixels are computed in numpy (no
resampling library), so the bytes depend only on the split, this file and the seeds.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from quantmark.ground.hashing import atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir
from quantmark.qsl import digits_split
from quantmark.qsl.builtin import CONTENTS, install, verify

log = logging.getLogger(__name__)

# Bump when the files change for the same code hash (it is in the identity too).
CANVAS_VERSION = 1
CANVAS = 96  # square canvas side in pixels: the detector's input size
DIGIT_SIZE = (16, 36)  # a digit's rendered height in px, inclusive
ASPECT = (0.75, 1.1)  # rendered width / height
INK = 0.25  # ink level (0..1) at or above which a pixel belongs to the digit's box
GAP = 2  # px kept free between two digits' boxes
DIGITS_PER_IMAGE = (1, 4)
TRAIN_IMAGES = 3000
SEED = 20250611
TRIES = 40  # placements tried for one digit before it moves on to the next canvas
CATEGORY_IDS = tuple(2 * digit + 1 for digit in range(10))  # COCO-like: not contiguous
VAL, TRAIN = "val2017", "train2017"
ANNOTATIONS = "annotations"
PARTS = (VAL, TRAIN)
EVAL_IMAGES = 356  # what generation yields (the tests check it): ``DESCRIPTION`` quotes it
EVAL_OBJECTS = 899  # every held-out scan once

DESCRIPTION = (
    f"built-in detection set (not COCO): {EVAL_IMAGES} independent {CANVAS}x{CANVAS} canvases "
    f"holding {EVAL_OBJECTS} real handwritten digit scans (scikit-learn load_digits, the "
    "classification built-in's held-out half, each scan in exactly one image), 1-4 digits "
    "per image on noisy coloured backgrounds, 10 classes; the detector was trained by "
    f"quantmark on {TRAIN_IMAGES} canvases of the other half's scans")


@dataclass(frozen=True)
class Canvas:
    """One image and its objects: (x, y, w, h) ink boxes, digits and scan indices."""

    pixels: np.ndarray  # [CANVAS, CANVAS, 3] uint8 RGB
    boxes: list[tuple[int, int, int, int]]
    digits: list[int]
    scans: list[int]


def builtin_detection_identity() -> dict[str, Any]:
    """What the dataset's bytes depend on, without generating it: the digits split's key, this
    file's source, the version and the seed (the folder's name and the detector's recipe)."""
    return {"version": CANVAS_VERSION, "split": digits_split.split_key(), "seed": SEED,
            "code": hash_file(Path(__file__), 64), "train_images": TRAIN_IMAGES}


def identity_key() -> str:
    return hash_json(builtin_detection_identity(), 12)


def builtin_detection_root() -> Path:
    """The COCO-format folder, verified, and (re)built when absent or damaged."""
    top = cache_dir("datasets") / f"digits-detect-v{CANVAS_VERSION}-{identity_key()}"
    if top.exists():
        problem = verify_tree(top)
        if problem is None:
            return top
        log.warning("built-in detection dataset %s failed verification: %s; rebuilding it",
                    top, problem)
    else:
        log.info("writing the built-in detection dataset (digit canvases, one-off) into %s ...",
                 top)
    tmp = Path(tempfile.mkdtemp(prefix=f".{top.name}.", dir=top.parent))
    try:
        write_tree(tmp)
        install(tmp, top, verify_tree, "built-in detection dataset")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return top


def verify_tree(top: Path) -> str | None:
    """None when every recorded file has its sha256 and no other file was added, else what is
    wrong (one phrase)."""
    problem = verify(top)
    if problem is not None:
        return problem
    recorded = set(json.loads((top / CONTENTS).read_text())["files"])
    for part in (*PARTS, ANNOTATIONS):
        for folder, _, names in os.walk(top / part):
            for name in names:
                rel = Path(folder, name).relative_to(top).as_posix()
                if rel not in recorded:
                    return f"{rel} was not written by quantmark"
    return None


# ----------------------------------------------------------------------------- rendering
def upscale(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize of a 2-D float array sampled at pixel centres, zero outside it (the
    ink fades out at the scan's border instead of being cut)."""
    padded = np.pad(np.asarray(grid, dtype=np.float64), 1)

    def weights(out: int, size: int) -> np.ndarray:
        where = (np.arange(out) + 0.5) * size / out - 0.5 + 1.0  # in padded coordinates
        low = np.clip(np.floor(where).astype(int), 0, size)
        frac = where - low
        matrix = np.zeros((out, size + 2))
        matrix[np.arange(out), low] = 1.0 - frac
        matrix[np.arange(out), low + 1] += frac
        return matrix

    rows, cols = weights(height, grid.shape[0]), weights(width, grid.shape[1])
    return rows @ padded @ cols.T


def background(rng: np.random.Generator) -> np.ndarray:
    """A smooth random colour field with pixel noise, float 0..255 ``[CANVAS, CANVAS, 3]``."""
    base = rng.uniform(0, 255, 3)
    field = np.clip(base + rng.normal(0, 35, (4, 4, 3)), 0, 255)
    smooth = np.stack([upscale(field[..., c], CANVAS + 32, CANVAS + 32)[16:-16, 16:-16]
                       for c in range(3)], -1)
    return smooth + rng.normal(0, 6, smooth.shape)


def ink_colour(rng: np.random.Generator, behind: np.ndarray) -> np.ndarray:
    """A colour whose luminance differs from the background's by at least 90 levels."""
    lum = np.array([0.299, 0.587, 0.114])
    target = float(behind.reshape(-1, 3).mean(0) @ lum)
    for _ in range(TRIES):
        colour = rng.uniform(0, 255, 3)
        if abs(colour @ lum - target) >= 90:
            return colour
    return np.full(3, 0.0 if target > 127 else 255.0)


def place(rng: np.random.Generator, scan: np.ndarray, taken: list[tuple[int, int, int, int]]
          ) -> tuple[np.ndarray, int, int, tuple[int, int, int, int]] | None:
    """The scan rendered at a random size, and a position where its ink box keeps ``GAP`` px
    from every box in ``taken``: (alpha, x, y, box), or None when no try fits."""
    height = int(rng.integers(DIGIT_SIZE[0], DIGIT_SIZE[1] + 1))
    width = max(8, int(round(height * rng.uniform(*ASPECT))))
    alpha = np.clip(upscale(scan / 255.0, height, width), 0.0, 1.0)
    rows, cols = np.nonzero(alpha >= INK)
    r0, r1, c0, c1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    for _ in range(TRIES):
        x = int(rng.integers(-c0, CANVAS - c1 + 1))
        y = int(rng.integers(-r0, CANVAS - r1 + 1))
        box = (x + int(c0), y + int(r0), int(c1 - c0), int(r1 - r0))
        if all(_apart(box, other) for other in taken):
            return alpha, x, y, box
    return None


def _apart(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return (a[0] + a[2] + GAP <= b[0] or b[0] + b[2] + GAP <= a[0]
            or a[1] + a[3] + GAP <= b[1] or b[1] + b[3] + GAP <= a[1])


def paint(canvas: np.ndarray, alpha: np.ndarray, x: int, y: int, colour: np.ndarray) -> None:
    """Blend ``colour`` into ``canvas`` through ``alpha`` placed at (x, y), clipped to it."""
    height, width = alpha.shape
    ys, xs = slice(max(y, 0), min(y + height, CANVAS)), slice(max(x, 0), min(x + width, CANVAS))
    cut = alpha[ys.start - y:ys.stop - y, xs.start - x:xs.stop - x, None]
    canvas[ys, xs] = canvas[ys, xs] * (1.0 - cut) + colour * cut


def compose(rng: np.random.Generator, queue: list[int], scans: np.ndarray, labels: np.ndarray,
            indices: np.ndarray) -> Canvas:
    """One canvas from the scans at the front of ``queue`` (positions into ``scans``), which
    are removed from it; a scan that does not fit stays queued for the next canvas."""
    pixels = background(rng)
    want = min(int(rng.integers(DIGITS_PER_IMAGE[0], DIGITS_PER_IMAGE[1] + 1)), len(queue))
    boxes: list[tuple[int, int, int, int]] = []
    digits, used = [], []
    for slot in range(want):
        i = queue[slot]
        got = place(rng, scans[i], boxes)
        if got is None:
            continue
        alpha, x, y, box = got
        paint(pixels, alpha, x, y, ink_colour(rng, pixels[max(y, 0):y + alpha.shape[0],
                                                          max(x, 0):x + alpha.shape[1]]))
        boxes.append(box)
        digits.append(int(labels[i]))
        used.append(i)
    for i in used:
        queue.remove(i)
    image = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    return Canvas(image, boxes, digits, [int(indices[i]) for i in used])


def eval_canvases(split: digits_split.DigitsSplit) -> list[Canvas]:
    """Canvases until every held-out scan is in exactly one (a shuffled queue, each scan
    taken once)."""
    rng = np.random.default_rng([SEED, 0])
    queue = [int(i) for i in rng.permutation(len(split.held_y))]
    out = []
    while queue:
        out.append(compose(rng, queue, split.held_x, split.held_y, split.held_index))
    return out


def train_canvases(split: digits_split.DigitsSplit, count: int = TRAIN_IMAGES) -> list[Canvas]:
    """``count`` canvases of train-half scans, the scans drawn in repeated shuffled passes so
    each is used about equally often."""
    rng = np.random.default_rng([SEED, 1])
    queue: list[int] = []
    out = []
    while len(out) < count:
        if len(queue) < DIGITS_PER_IMAGE[1]:
            queue += [int(i) for i in rng.permutation(len(split.train_y))]
        out.append(compose(rng, queue, split.train_x, split.train_y, split.train_index))
    return out


# ----------------------------------------------------------------------------- writing
def coco_json(canvases: list[Canvas], part: str) -> dict[str, Any]:
    """COCO's instances file for ``canvases`` (image ids from 1, in order)."""
    images, annotations = [], []
    for image_id, canvas in enumerate(canvases, 1):
        images.append({"id": image_id, "file_name": f"{image_id:012d}.png",
                       "width": CANVAS, "height": CANVAS})
        for box, digit, scan in zip(canvas.boxes, canvas.digits, canvas.scans, strict=True):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": CATEGORY_IDS[digit], "bbox": list(box),
                                "area": box[2] * box[3], "iscrowd": 0, "scan": scan})
    return {"info": {"description": f"quantmark built-in digit canvases, {part}",
                     "version": f"v{CANVAS_VERSION}-{identity_key()}"},
            "licenses": [], "images": images, "annotations": annotations,
            "categories": [{"id": cid, "name": str(digit), "supercategory": "digit"}
                           for digit, cid in enumerate(CATEGORY_IDS)]}


def write_tree(folder: Path) -> None:
    """Both parts' PNGs and instances files, then, last, every file's sha256 in contents.json."""
    split = digits_split.load_split()
    rels = []
    for part, canvases in ((VAL, eval_canvases(split)), (TRAIN, train_canvases(split))):
        (folder / part).mkdir(parents=True, exist_ok=True)
        record = coco_json(canvases, part)
        for entry, canvas in zip(record["images"], canvases, strict=True):
            rel = f"{part}/{entry['file_name']}"
            Image.fromarray(canvas.pixels, "RGB").save(folder / rel)
            rels.append(rel)
        rel = f"{ANNOTATIONS}/instances_{part}.json"
        (folder / ANNOTATIONS).mkdir(exist_ok=True)
        (folder / rel).write_text(json.dumps(record, separators=(",", ":")) + "\n")
        rels.append(rel)
    files = {rel: hash_file(folder / rel, 64) for rel in rels}
    atomic_write_json(folder / CONTENTS, {"files": files, "sha256": hash_json(files, 64)})
