"""The built-in offline dataset: augmented crops of real photos that installed packages ship.

No download is possible at run time, so the default dataset is generated once into the cache as
an ImageNet-format folder: ``val/*.jpg`` listed in ``val_map.txt`` (evaluation) and ``cal/*.jpg``
listed in ``cal_map.txt`` (calibration; different seed, different files, never evaluated).

Every source photo was labelled BY HAND with one ImageNet-1k class (0-based) after looking at it;
no model produced a label. A pretrained model was only used afterwards as a sanity check that the
accuracy it reaches is meaningful (neither trivially 100 % nor noise). Crops vary in area (some
miss the object, which is what keeps accuracy below 100 %), aspect, flip, size and brightness.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text, hash_json
from quantmark.ground.paths import cache_dir

log = logging.getLogger(__name__)

# Bump when generation changes: the folder name changes with it, so old copies are not reused.
BUILTIN_VERSION = 1
EVAL_COUNT = 1536  # > 1024, resnet50's MLPerf performance_sample_count
CAL_COUNT = 500  # MLPerf's ResNet-50 calibration list size
EVAL_SEED = 20240611
CAL_SEED = 777013
CAL_MAP = "cal_map.txt"


@dataclass(frozen=True)
class SourcePhoto:
    package: str  # importable package that ships the file
    resource: str  # path inside that package
    label: int  # 0-based ImageNet-1k class
    name: str  # the class name, for humans


# Photo -> ImageNet class, chosen by looking at each photo.
LABELS: tuple[SourcePhoto, ...] = (
    # skimage coffee.png: a cup of espresso with crema on a saucer with a spoon -> 967 espresso.
    SourcePhoto("skimage", "data/coffee.png", 967, "espresso"),
    # skimage chelsea.png: close-up of a slim short-haired cat with a ticked, lightly striped
    # coat and big ears -> 285 Egyptian cat (closer than 281 tabby's blotched coat).
    SourcePhoto("skimage", "data/chelsea.png", 285, "Egyptian cat"),
    # skimage motorcycle_left/right.png: the same red Yamaha street motorcycle in a garage,
    # stereo pair. ImageNet has no "motorcycle"; 665 moped (a small motorbike) fits better than
    # 670 motor scooter (step-through, small wheels).
    SourcePhoto("skimage", "data/motorcycle_left.png", 665, "moped"),
    SourcePhoto("skimage", "data/motorcycle_right.png", 665, "moped"),
    # skimage rocket.jpg: a Falcon 9 rocket on its launch pad at dusk between lightning towers
    # -> 657 missile (ImageNet's rocket-on-pad class; 812 space shuttle has wings/orbiter).
    SourcePhoto("skimage", "data/rocket.jpg", 657, "missile"),
    # scikit-learn china.jpg: the Tower of Buddhist Incense at the Summer Palace, Beijing
    # -> 698 palace.
    SourcePhoto("sklearn", "datasets/images/china.jpg", 698, "palace"),
    # matplotlib grace_hopper.jpg: portrait of Grace Hopper in US Navy dress uniform and cap
    # -> 652 military uniform.
    SourcePhoto("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", 652, "military uniform"),
)
# Looked at and skipped (no sensible single ImageNet class): sklearn flower.jpg (a dahlia;
# ImageNet has daisy but no dahlia), skimage astronaut, camera, text, page, clock_motion
# (motion-blurred blob), coins (no coin class), horse (binary silhouette), hubble_deep_field,
# retina, ihc, cell, textures (brick/grass/gravel), logo, matplotlib Minduka (clip art).


def available_photos() -> list[tuple[SourcePhoto, Path]]:
    """The LABELS photos whose package is installed (scikit-image always is)."""
    found = []
    for photo in LABELS:
        spec = importlib.util.find_spec(photo.package)
        if spec is None or not spec.submodule_search_locations:
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / photo.resource
        if path.is_file():
            found.append((photo, path))
    return found


def builtin_dataset_root() -> Path:
    """Folder of the built-in dataset, generated on first use (atomically: temp dir + rename)."""
    photos = available_photos()
    if not photos:  # the lean (Raspberry Pi) install has none of the photo packages
        raise UserError("the built-in dataset is cut from photos that scikit-image, scikit-learn "
                        "and matplotlib ship, and none is installed: pip install "
                        "'quantmark[data]', or pass --dataset-path (for a Pi: the dataset/ "
                        "folder that python run.py export wrote)")
    key = hash_json(
        {
            "version": BUILTIN_VERSION,
            "eval": [EVAL_COUNT, EVAL_SEED],
            "cal": [CAL_COUNT, CAL_SEED],
            "photos": [(p.resource, p.label) for p, _ in photos],
        },
        12,
    )
    root = cache_dir("datasets") / f"builtin-v{BUILTIN_VERSION}-{key}"
    if (root / "val_map.txt").is_file():
        return root
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    log.info("generating the built-in dataset (%d + %d crops of %d photos, one-off) into %s ...",
             EVAL_COUNT, CAL_COUNT, len(photos), root)
    try:
        generate(tmp, photos)
        try:
            tmp.rename(root)
        except OSError:  # another process won the race; its copy is identical
            if not (root / "val_map.txt").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def generate(
    folder: Path,
    photos: list[tuple[SourcePhoto, Path]],
    eval_count: int = EVAL_COUNT,
    cal_count: int = CAL_COUNT,
) -> None:
    """Write the eval and calibration splits into ``folder`` (deterministic for fixed seeds)."""
    images = [_load_rgb(path) for _, path in photos]
    labels = [photo.label for photo, _ in photos]
    for split, count, seed, map_name, with_labels in (
        ("val", eval_count, EVAL_SEED, "val_map.txt", True),
        ("cal", cal_count, CAL_SEED, CAL_MAP, False),
    ):
        (folder / split).mkdir(parents=True)
        rng = np.random.default_rng(seed)
        # Balanced over photos, shuffled so the order carries no class pattern.
        order = rng.permutation(np.arange(count) % len(images))
        lines = []
        for i, which in enumerate(order):
            rel = f"{split}/{split}_{i:05d}.jpg"
            _augment(images[which], rng).save(folder / rel, quality=90)
            lines.append(f"{rel} {labels[which]}" if with_labels else rel)
        atomic_write_text(folder / map_name, "\n".join(lines) + "\n")


def _load_rgb(path: Path) -> Image.Image:
    with Image.open(path) as img:
        return img.convert("RGB")


def _augment(img: Image.Image, rng: np.random.Generator) -> Image.Image:
    """A random crop (area 12-100 %, aspect 3:4-4:3), flip, resize, brightness/contrast jitter."""
    w, h = img.size
    for _ in range(10):
        area = w * h * rng.uniform(0.12, 1.0)
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        cw, ch = int(round((area * aspect) ** 0.5)), int(round((area / aspect) ** 0.5))
        if cw <= w and ch <= h:
            break
    else:
        cw, ch = min(w, h), min(w, h)
    left = int(rng.integers(0, w - cw + 1))
    top = int(rng.integers(0, h - ch + 1))
    out = img.crop((left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    short = int(rng.integers(232, 321))  # sizes around and above 256: exercise the resize
    scale = short / min(cw, ch)
    out = out.resize(
        (max(1, round(cw * scale)), max(1, round(ch * scale))), Image.Resampling.BILINEAR
    )
    out = ImageEnhance.Brightness(out).enhance(float(rng.uniform(0.8, 1.2)))
    return ImageEnhance.Contrast(out).enhance(float(rng.uniform(0.85, 1.15)))
