"""The built-in offline dataset: augmented crops of real photos that installed packages ship.

No download is possible at run time, so the default dataset is generated once into the cache as
an ImageNet-format folder: ``val/*.jpg`` listed in ``val_map.txt`` (evaluation), with
``val_groups.txt`` naming each crop's source (crops of one photo, or of one scene's photos,
are one cluster for the accuracy interval), and ``cal/*.jpg`` listed in ``cal_map.txt``
(calibration, never evaluated).

Calibration crops are cut from OTHER photos than the evaluation crops: calibrating on crops of
the very photos the INT8 model is then scored on would bias its measured accuracy upward.
Calibration needs no labels, so it uses the photos that have no single ImageNet class.

Every evaluation photo was labelled BY HAND with one ImageNet-1k class (0-based) after looking at
it; no model produced a label. A pretrained model was only used afterwards as a sanity check that
the accuracy it reaches is meaningful (neither trivially 100 % nor noise). Crops vary in area
(some miss the object, which is what keeps accuracy below 100 %), aspect, flip, size, brightness.

Verified, not trusted: ``contents.json`` records the sha256 of every file the generator wrote
(images and maps) and a hash of itself. Each use checks every file against it; the per-file
hashes are remembered by (size, mtime, ctime, inode) as for any dataset's fingerprint, and a
rewrite changes ctime even when size and mtime are kept, so this costs a stat per file. A
mismatch (an edited, copied-over, missing or undecodable image, an edited map) regenerates the
set with one warning line: it is generated data, nobody is asked to repair it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image, ImageEnhance

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_json, atomic_write_text, hash_file, hash_json
from quantmark.ground.paths import cache_dir

from .groups import VAL_GROUPS
from .imagenet import VAL_MAP, content_hashes

log = logging.getLogger(__name__)

# Bump when generation changes: the folder name changes with it, so old copies are not reused.
# 2: calibration cut from photos the evaluation set does not use; val_groups.txt; contents.json.
# 3: natural photos only for calibration.
# 4: the motorcycle stereo pair is one source (one scene) in val_groups.txt.
BUILTIN_VERSION = 4
EVAL_COUNT = 1536  # > 1024, resnet50's MLPerf performance_sample_count
CAL_COUNT = 500  # MLPerf's ResNet-50 calibration list size
EVAL_SEED = 20240611
CAL_SEED = 777013
CAL_MAP = "cal_map.txt"
CONTENTS = "contents.json"  # sha256 of every generated file, written last


@dataclass(frozen=True)
class SourcePhoto:
    package: str  # importable package that ships the file
    resource: str  # path inside that package
    label: int  # 0-based ImageNet-1k class
    name: str  # the class name, for humans
    scene: str = ""  # photos of one scene (a stereo pair) share it; "" for a scene of its own

    @property
    def group(self) -> str:
        """The source the photo's crops cluster in: its scene (``motorcycle`` for the stereo
        pair: two views of one motorcycle in one garage are not two independent draws; as
        two groups, seeded sets covered the true change 92.7% of the time, with 7.1% false
        verdicts), else the photo's own name (``coffee``)."""
        return self.scene or PurePosixPath(self.resource).stem


@dataclass(frozen=True)
class CalibrationPhoto:
    package: str
    resource: str
    what: str  # what it shows, for humans


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
    SourcePhoto("skimage", "data/motorcycle_left.png", 665, "moped", scene="motorcycle"),
    SourcePhoto("skimage", "data/motorcycle_right.png", 665, "moped", scene="motorcycle"),
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

# The calibration split's photos: photographs among those skipped above, none an evaluation
# photo, so calibration never sees what INT8 is scored on. Natural scenes only: the microscopy,
# fundus and deep-field photos (black or stained backgrounds) set activation ranges that cost
# OpenVINO's INT8 6 points of top-1 (measured), and the drawings are left out. The grey
# photographs are calibrated as RGB, as they are decoded.
CALIBRATION: tuple[CalibrationPhoto, ...] = (
    CalibrationPhoto("skimage", "data/astronaut.png", "portrait of an astronaut, flag, shuttle"),
    CalibrationPhoto("sklearn", "datasets/images/flower.jpg", "an orange dahlia in foliage"),
    CalibrationPhoto("skimage", "data/camera.png", "a cameraman on a lawn (grey)"),
    CalibrationPhoto("skimage", "data/coins.png", "coins on a table (grey)"),
    CalibrationPhoto("skimage", "data/grass.png", "a lawn, close up (grey)"),
)


def available_photos() -> list[tuple[SourcePhoto, Path]]:
    """The LABELS photos whose package is installed (scikit-image always is)."""
    return _installed(LABELS)


def calibration_photos() -> list[tuple[CalibrationPhoto, Path]]:
    """The CALIBRATION photos whose package is installed."""
    return _installed(CALIBRATION)


def _installed(photos: Sequence) -> list:
    found = []
    for photo in photos:
        spec = importlib.util.find_spec(photo.package)
        if spec is None or not spec.submodule_search_locations:
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / photo.resource
        if path.is_file():
            found.append((photo, path))
    return found


def builtin_dataset_root() -> Path:
    """Folder of the built-in dataset, verified, and generated when absent or damaged
    (atomically: temp dir + rename)."""
    photos, cal_photos = available_photos(), calibration_photos()
    if not photos or not cal_photos:  # the lean (Raspberry Pi) install has none of them
        raise UserError("the built-in dataset is cut from photos that scikit-image, scikit-learn "
                        "and matplotlib ship, and they are not installed: pip install "
                        "'quantmark[data]', or pass --dataset-path (for a Pi: the dataset/ "
                        "folder that python run.py export wrote)")
    key = hash_json(
        {
            "version": BUILTIN_VERSION,
            "eval": [EVAL_COUNT, EVAL_SEED],
            "cal": [CAL_COUNT, CAL_SEED],
            "photos": [(p.resource, p.label) for p, _ in photos],
            "calibration_photos": [p.resource for p, _ in cal_photos],
        },
        12,
    )
    root = cache_dir("datasets") / f"builtin-v{BUILTIN_VERSION}-{key}"
    if root.exists():
        problem = verify(root)
        if problem is None:
            return root
        log.warning("built-in dataset %s failed verification: %s; regenerating it", root,
                    problem)
    else:
        log.info("generating the built-in dataset (%d + %d crops of %d + %d photos, one-off) "
                 "into %s ...", EVAL_COUNT, CAL_COUNT, len(photos), len(cal_photos), root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        generate(tmp, photos, cal_photos, EVAL_COUNT, CAL_COUNT)
        install(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def install(tmp: Path, root: Path, check: Callable[[Path], str | None] | None = None,
            what: str = "built-in dataset") -> None:
    """Rename ``tmp`` to ``root``, moving a damaged ``root`` aside first. Another process may
    race to do the same: generation is deterministic, so whichever copy lands is the same
    (``check``, default ``verify``: None when a folder is a good copy)."""
    check = check or verify
    for _ in range(3):
        try:
            os.rename(tmp, root)
            return
        except OSError:
            if not root.exists():
                raise
        if check(root) is None:  # another process has just put a good copy there
            return
        stale = Path(tempfile.mkdtemp(prefix=f".{root.name}.stale.", dir=root.parent))
        try:
            os.rename(root, stale)  # onto the empty folder
        except FileNotFoundError:
            pass
        finally:
            shutil.rmtree(stale, ignore_errors=True)
    raise OSError(f"cannot replace the damaged {what} {root}; delete it")


def verify(root: Path) -> str | None:
    """None when every file listed in ``contents.json`` has the sha256 recorded at generation,
    else what is wrong (one phrase)."""
    try:
        record = json.loads((root / CONTENTS).read_text())
        files, seal = record["files"], record["sha256"]
    except FileNotFoundError:
        return f"{CONTENTS} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{CONTENTS} cannot be read ({type(exc).__name__})"
    if not isinstance(files, dict) or not files or hash_json(files, 64) != seal:
        return f"{CONTENTS} was changed after generation"
    rels = sorted(files)
    stats = []
    for rel in rels:
        try:
            stats.append(os.stat(root / rel))
        except OSError:
            return f"{rel} is missing"
    try:
        got = content_hashes(root, rels, stats)
    except UserError:
        return "a file cannot be read"
    bad = [rel for rel, digest in zip(rels, got, strict=True)
           if len(digest) < 32 or not str(files[rel]).startswith(digest)]
    if bad:
        return (f"{len(bad)} of {len(rels)} files differ from what was generated "
                f"(first: {bad[0]})")
    return None


#: the folders quantmark generates under datasets/: the photos, the digits, the detection
#: canvases (tasks.detection.digits_detect), each regenerated when marked damaged
GENERATED_PREFIXES = ("builtin-v", "digits-v", "digits-detect-v")


def generated_root(path: str | os.PathLike) -> Path | None:
    """The built-in dataset folder that ``path`` lies in, or None for any other file."""
    datasets = os.path.realpath(cache_dir("datasets"))
    rel = os.path.relpath(os.path.realpath(path), datasets)
    top = Path(rel).parts[0] if rel != "." else ""
    return Path(datasets) / top if top.startswith(GENERATED_PREFIXES) else None


def forget(root: Path) -> None:
    """Mark a built-in set as damaged (a file that matched its hash but will not decode):
    without its ``contents.json`` the next use regenerates it."""
    (root / CONTENTS).unlink(missing_ok=True)


def generate(
    folder: Path,
    photos: list[tuple[SourcePhoto, Path]],
    cal_photos: list[tuple[CalibrationPhoto, Path]],
    eval_count: int = EVAL_COUNT,
    cal_count: int = CAL_COUNT,
) -> None:
    """Write the eval split (crops of ``photos``) with its maps and the calibration split
    (crops of ``cal_photos``), then, last, the sha256 of every file (deterministic for fixed
    seeds)."""
    folder.mkdir(parents=True, exist_ok=True)
    val = _write_split(folder, "val", [_load_rgb(path) for _, path in photos], eval_count,
                       EVAL_SEED)
    cal = _write_split(folder, "cal", [_load_rgb(path) for _, path in cal_photos], cal_count,
                       CAL_SEED)
    sources = [photo for photo, _ in photos]
    atomic_write_text(folder / VAL_MAP, "".join(f"{rel} {sources[i].label}\n" for rel, i in val))
    atomic_write_text(folder / VAL_GROUPS,
                      "".join(f"{rel} {sources[i].group}\n" for rel, i in val))
    atomic_write_text(folder / CAL_MAP, "".join(f"{rel}\n" for rel, _ in cal))
    written = [rel for rel, _ in val + cal] + [VAL_MAP, VAL_GROUPS, CAL_MAP]
    files = {rel: hash_file(folder / rel, 64) for rel in written}
    atomic_write_json(folder / CONTENTS, {"files": files, "sha256": hash_json(files, 64)})


def _write_split(folder: Path, split: str, images: list[Image.Image], count: int,
                 seed: int) -> list[tuple[str, int]]:
    """``count`` augmented crops into ``folder/split``: (relative path, source index) each."""
    (folder / split).mkdir(parents=True)
    rng = np.random.default_rng(seed)
    # Balanced over photos, shuffled so the order carries no class pattern.
    order = rng.permutation(np.arange(count) % len(images))
    out = []
    for i, which in enumerate(order):
        rel = f"{split}/{split}_{i:05d}.jpg"
        _augment(images[which], rng).save(folder / rel, quality=90)
        out.append((rel, int(which)))
    return out


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
