"""Detection datasets: a COCO-format or a YOLO-format folder (read by ``formats``), turned into
what quantmark's image machinery reads from a classification dataset
(``qsl.imagenet.ImageFolderDataset``: the cache, the calibration hold-out, the QSL) plus what
COCO mAP is scored against.

Rows are the images in a fixed order (``all_items``; a row's int "label" is its row number, as
a detection has no single label). The model's class k is the dataset's category
``categories[k]``: COCO's categories sorted by id (its 80 ids of 1..90 become 0..79, an
explicit map, never an offset), a YOLO dataset's names in order. ``ground_truth`` is a COCO
ground truth in each image's own pixels, so detections must be mapped back through the
letterbox (``qsl.preprocess.letterbox_geometry``) before scoring. Image sizes are the upright
sizes the model sees (EXIF orientation applied, as ``decode_and_crop`` does); boxes are taken
to be drawn on that upright image, as OpenCV-based tools (Ultralytics, MLPerf) draw them.

Every problem is a one-line UserError naming the file (and line or entry) and the fix, and
every image must stay inside the folder once symlinks are resolved, as for classification.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import ExifTags, UnidentifiedImageError

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_json
from quantmark.qsl.containment import Containment
from quantmark.qsl.imagenet import ImageFolderDataset, content_hashes
from quantmark.qsl.label_space import read_class_names
from quantmark.qsl.preprocess import open_image
from quantmark.tasks.detection.formats import COCO, YOLO, Annotations, read_coco, read_yolo

ANNOTATIONS = "annotations"
LAYOUTS = ("COCO format (annotations/instances_<split>.json, images in <split>/) or YOLO format "
           "(images/, labels/ and data.yaml naming the classes)")


class DetectionDataset:
    """A detection dataset usable wherever ``ImageFolderDataset`` is (same members), with
    ``categories``, ``image_sizes``, ``image_id`` and ``ground_truth`` for scoring."""

    builtin = False

    def __init__(self, root: Path, found: Annotations) -> None:
        self.root = root
        self.layout = found.layout
        self.source = found.source
        self.all_items = [(rel, row) for row, rel in enumerate(found.rels)]
        self.categories = found.categories
        self.classes = [name for _, name in found.categories]
        self.num_classes = len(self.classes)
        self._image_ids = found.image_ids
        self._identity = found.identity
        self._stats = _stat_images(root, found)
        self.image_sizes = _upright_sizes(root, found.rels)
        if found.declared_sizes is not None:
            _check_declared_sizes(self, found.declared_sizes)
        self._objects = _to_pixels(found, self.image_sizes) if found.normalised \
            else found.objects
        self.description = (f"{root} ({found.layout.upper()} format, {found.source.name}, "
                            f"{len(self.all_items)} images, {self.num_classes} classes)")
        self.held_out: list[str] = []
        self.cache_rows = np.arange(len(self.all_items), dtype=np.int64)
        self._fingerprint: str | None = None
        self._content: list[str] | None = None

    # the evaluation rows and the calibration hold-out behave exactly as a classification
    # dataset's (qsl.calibration_sets relies on them), so they are that class's own code
    __len__ = ImageFolderDataset.__len__
    items = ImageFolderDataset.items
    labels = ImageFolderDataset.labels
    held_out_count = ImageFolderDataset.held_out_count
    path = ImageFolderDataset.path
    hold_out = ImageFolderDataset.hold_out

    def __repr__(self) -> str:
        return (f"DetectionDataset({str(self.root)!r}, layout={self.layout!r}, items={len(self)}, "
                f"held_out={self.held_out_count})")

    def describe(self, row: int) -> str:
        """Where a row came from, for error messages."""
        if self.layout == COCO:
            return f"{self.source} image id {self._image_ids[row]}"
        return str(self.root / self.all_items[row][0])

    def image_id(self, row: int) -> int:
        """The image's id in ``ground_truth``: COCO's own, or a YOLO row's number + 1."""
        return self._image_ids[row]

    def fingerprint(self) -> str:
        """Identity of the annotations (a relabelled folder is another dataset) and of every
        image's bytes (memoised per file, as for classification)."""
        if self._fingerprint is None:
            self._fingerprint = hash_json({
                "layout": self.layout, "classes": self.categories,
                "annotations": hashlib.sha256(self._identity).hexdigest(),
                "images": self.content()})
        return self._fingerprint

    def content(self) -> list[str]:
        """sha256 (32 hex) of every image's bytes in ``all_items`` order (memoised)."""
        if self._content is None:
            self._content = content_hashes(self.root, [rel for rel, _ in self.all_items],
                                           self._stats)
        return self._content

    def ground_truth(self, rows: np.ndarray | None = None) -> dict[str, Any]:
        """COCO-format ground truth of ``rows`` (default: the evaluation rows) in original
        pixels, ready for pycocotools (``COCO()``, set ``dataset``, ``createIndex()``).
        Crowd regions keep iscrowd=1: COCOeval neither rewards nor penalises them."""
        chosen = self.cache_rows if rows is None else np.asarray(rows, dtype=np.int64)
        images, annotations = [], []
        for row in (int(r) for r in chosen):
            height, width = (int(v) for v in self.image_sizes[row])
            image_id = self._image_ids[row]
            images.append({"id": image_id, "file_name": self.all_items[row][0],
                           "width": width, "height": height})
            for category, box, area, crowd in self._objects[row]:
                annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                    "category_id": category, "bbox": list(box),
                                    "area": area, "iscrowd": crowd})
        return {"info": {"description": self.description}, "licenses": [], "images": images,
                "annotations": annotations,
                "categories": [{"id": cid, "name": name} for cid, name in self.categories]}


def open_detection_dataset(path: str | os.PathLike, names: str | os.PathLike | None = None
                           ) -> DetectionDataset:
    """Read a COCO- or YOLO-format dataset at ``path`` (its folder, or its instances JSON or
    data.yaml). ``names``: a labels file (one class name a line, in the model's order) naming
    a YOLO dataset's classes; a COCO dataset's must list as many as its categories."""
    given = Path(path).expanduser()
    if not given.exists():
        raise UserError(f"dataset {given} does not exist; pass --dataset-path DIR in {LAYOUTS}")
    names_list = read_class_names(names) if names is not None else None
    layout, root, source = _locate(given)
    if layout == COCO:
        found = read_coco(root, source, names_list, names)
    else:
        found = read_yolo(root, source, names_list)
    return DetectionDataset(root, found)


def check_model_classes(dataset: DetectionDataset, num_classes: int, model_name: str) -> None:
    """Refuse a model whose class count is not the dataset's: its class k would be scored as
    some other category, a figure that looks like an mAP and means nothing."""
    if num_classes == dataset.num_classes:
        return
    fix = ("pass the COCO-format dataset the model was trained on" if dataset.layout == COCO
           else "fix names in the dataset's YAML or pass --labels FILE with the model's class "
                "names, one a line")
    raise UserError(f"model {model_name} detects {num_classes} classes but dataset "
                    f"{dataset.root} ({dataset.source.name}) has {dataset.num_classes}; {fix}")


# ----------------------------------------------------------------------------- finding the format
def _locate(given: Path) -> tuple[str, Path, Path | None]:
    """(layout, dataset root, annotation file) of what ``--dataset-path`` names."""
    if given.is_file():
        if given.suffix == ".json":
            root = given.parent.parent if given.parent.name == ANNOTATIONS else given.parent
            return COCO, root, given
        if given.suffix in (".yaml", ".yml"):
            return YOLO, given.parent, given
        raise UserError(f"dataset file {given} is neither a COCO instances .json nor a YOLO "
                        f".yaml; pass --dataset-path DIR in {LAYOUTS}")
    jsons = sorted((given / ANNOTATIONS).glob("instances_*.json")) or \
        sorted(given.glob("instances_*.json"))
    if jsons:
        return COCO, given, _one_json(given, jsons)
    yamls = sorted(p for p in given.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if (given / "images").is_dir() or yamls:
        return YOLO, given, _one_yaml(given, yamls)
    raise UserError(f"dataset folder {given} is neither {LAYOUTS}; lay it out as one of them")


def _one_json(root: Path, jsons: list[Path]) -> Path:
    """The instances file to score: the only one, or the only validation one."""
    if len(jsons) == 1:
        return jsons[0]
    val = [p for p in jsons if p.stem.removeprefix("instances_").startswith("val")]
    if len(val) == 1:
        return val[0]
    listed = ", ".join(p.name for p in jsons)
    raise UserError(f"dataset folder {root} has several annotation files ({listed}); pass "
                    "--dataset-path FILE.json naming the one to score")


def _one_yaml(root: Path, yamls: list[Path]) -> Path | None:
    """data.yaml, or the folder's only YAML; None when it has none (names from --labels)."""
    if (root / "data.yaml").is_file():
        return root / "data.yaml"
    if len(yamls) <= 1:
        return yamls[0] if yamls else None
    raise UserError(f"dataset folder {root} has several YAML files "
                    f"({', '.join(p.name for p in yamls)}) and no data.yaml; pass "
                    "--dataset-path FILE.yaml naming the dataset's")


# ----------------------------------------------------------------------------- boxes and images
def _to_pixels(found: Annotations, sizes: np.ndarray
               ) -> list[list[tuple[int, list[float], float, int]]]:
    """YOLO's normalised (cx, cy, w, h) -> COCO's [x, y, w, h] in the image's pixels, clipped
    to the image (a box within ``formats.TOLERANCE`` of an edge); area is the box's."""
    out = []
    for row, objects in enumerate(found.objects):
        height, width = (float(v) for v in sizes[row])
        converted = []
        for label, (cx, cy, w, h), _, crowd in objects:
            x, y, bw, bh = (cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height
            if x < 0:
                x, bw = 0.0, bw + x
            if y < 0:
                y, bh = 0.0, bh + y
            bw, bh = min(bw, width - x), min(bh, height - y)
            converted.append((label, [x, y, bw, bh], bw * bh, crowd))
        out.append(converted)
    return out


def _stat_images(root: Path, found: Annotations) -> list[os.stat_result]:
    """Each image's stat once it is known to stay inside ``root``; missing images are refused
    all at once (first and count), one file listed twice through a link too."""
    inside, stats, missing = Containment(root), [], []
    files: dict[tuple[int, int], int] = {}
    for row, rel in enumerate(found.rels):
        try:
            info = inside.stat(rel, str(found.source))
        except OSError:
            missing.append(rel)
            continue
        first = files.setdefault((info.st_dev, info.st_ino), row)
        if first != row:
            raise UserError(f"{found.source}: {rel!r} is the same file as "
                            f"{found.rels[first]!r} through a link, so it would be scored "
                            "twice; list it once")
        stats.append(info)
    if missing:
        raise UserError(f"{len(missing)} of the {len(found.rels)} images {found.source.name} "
                        f"lists are missing, first {root / missing[0]}; restore them or pass "
                        "the annotation file of the images you have")
    return stats


def _upright_sizes(root: Path, rels: list[str]) -> np.ndarray:
    """(height, width) of each image as the model sees it (EXIF rotation applied), read from
    the file's header without decoding its pixels."""
    sizes = np.zeros((len(rels), 2), dtype=np.int64)
    for row, rel in enumerate(rels):
        try:
            with open_image(root / rel) as img:
                width, height = img.size
                if img.getexif().get(ExifTags.Base.Orientation, 1) in (5, 6, 7, 8):
                    width, height = height, width
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            reason = " ".join(str(exc).split())[:120]
            raise UserError(f"image {root / rel} cannot be read as an image ({reason}); "
                            "replace or remove it") from None
        sizes[row] = height, width
    return sizes


def _check_declared_sizes(dataset: DetectionDataset, declared: list[tuple[int, int]]) -> None:
    """A COCO entry's width/height must be the image's: boxes drawn on another size land
    elsewhere once mapped back."""
    for row, (height, width) in enumerate(declared):
        real_h, real_w = (int(v) for v in dataset.image_sizes[row])
        if (real_h, real_w) != (height, width):
            raise UserError(
                f"{dataset.describe(row)}: the file lists {dataset.all_items[row][0]} as "
                f"{width}x{height} but the image is {real_w}x{real_h} (EXIF orientation "
                "applied); fix width/height in the file or restore the original image")
