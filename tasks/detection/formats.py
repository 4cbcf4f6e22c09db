"""The detection dataset formats quantmark reads: a COCO instances file with its image folder,
and a YOLO folder (``images/``, ``labels/<stem>.txt``, data.yaml naming the classes). Each reader
returns ``Annotations``: the images in a fixed order, the categories, each image's objects and
what identifies the annotations; ``datasets.DetectionDataset`` turns them into a dataset (image
sizes, pixels, ground truth). COCO's categories are sorted by id (its 80 ids of 1..90 become
model classes 0..79, an explicit map, never an offset); a YOLO dataset's classes are its names in
order, its boxes normalised (cx, cy, w, h) until the images' sizes are known.

Every problem is a one-line UserError naming the file (and line or entry) and the fix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.qsl.class_folders import IMAGE_EXTENSIONS
from quantmark.qsl.containment import Containment

log = logging.getLogger(__name__)

COCO, YOLO = "coco", "yolo"
#: a normalised YOLO coordinate this far outside 0..1 is a labelling tool's rounding; further
#: out, the label is wrong
TOLERANCE = 0.01


@dataclass
class Annotations:
    """What a format reader found, one entry per row: the image, its id, its objects
    (category id, [x, y, w, h], area, iscrowd) and the size the annotation file declares."""

    layout: str
    source: Path  # the annotation file (or folder) that messages name
    rels: list[str]
    image_ids: list[int]
    categories: list[tuple[int, str]]
    objects: list[list[tuple[int, list[float], float, int]]]
    identity: bytes  # what the fingerprint hashes besides the images: the annotations
    declared_sizes: list[tuple[int, int]] | None = None  # (height, width), COCO's
    normalised: bool = False  # YOLO: boxes are (cx, cy, w, h) in 0..1 until sizes are known


# ----------------------------------------------------------------------------- COCO
def read_coco(root: Path, json_path: Path, names: list[str] | None = None,
              names_file: Any = None) -> Annotations:
    """A COCO instances file and its image folder (the JSON's suffix: instances_val2017.json
    -> val2017/, or the JSON's own folder)."""
    folder = json_path.stem.removeprefix("instances_")
    if (root / folder).is_dir():
        image_dir = folder
    elif json_path.parent == root:
        image_dir = ""
    else:
        raise UserError(f"image folder {root / folder} of {json_path} does not exist; put the "
                        f"images of {json_path.name} there")
    data_bytes = _read_bytes(json_path)
    try:
        data = json.loads(data_bytes)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{json_path} is not valid JSON ({exc}); pass COCO's instances file"
                        ) from None
    if not isinstance(data, dict) or not all(isinstance(data.get(key), list) for key in
                                             ("images", "annotations", "categories")):
        raise UserError(f"{json_path} lacks COCO's images, annotations and categories lists; "
                        "pass a COCO instances file")
    categories = _coco_categories(data["categories"], json_path)
    if names is not None and len(names) != len(categories):
        raise UserError(f"labels file {names_file} names {len(names)} classes but {json_path} "
                        f"has {len(categories)} categories; drop --labels or pass one with "
                        "a name for each category, in id order")
    rels, ids, sizes = _coco_images(data["images"], json_path, image_dir)
    row_of = {image_id: row for row, image_id in enumerate(ids)}
    known = {cid for cid, _ in categories}
    objects: list[list[tuple[int, list[float], float, int]]] = [[] for _ in ids]
    for index, ann in enumerate(data["annotations"]):
        where = f"{json_path}: annotations[{index}]"
        image_id, category = _int(ann, "image_id", where), _int(ann, "category_id", where)
        if image_id not in row_of or category not in known:
            what = "image_id" if image_id not in row_of else "category_id"
            raise UserError(f"{where} names {what} {ann[what]}, which the file does not list; "
                            "fix or remove the annotation")
        objects[row_of[image_id]].append(_coco_object(ann, category, where))
    return Annotations(COCO, json_path, rels, ids, categories, objects, data_bytes, sizes)


def _int(entry: Any, key: str, where: str) -> int:
    value = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise UserError(f"{where} has no integer {key!r}; fix the entry (COCO format)")
    return value


def _coco_categories(entries: list, json_path: Path) -> list[tuple[int, str]]:
    """(id, name) sorted by id: model class k is the k-th category."""
    found: dict[int, str] = {}
    for index, entry in enumerate(entries):
        where = f"{json_path}: categories[{index}]"
        cid, name = _int(entry, "id", where), entry.get("name")
        if not isinstance(name, str) or cid in found:
            raise UserError(f"{where} has no name or repeats id {cid}; give each category "
                            "one id and a name")
        found[cid] = name
    if not found:
        raise UserError(f"{json_path} lists no categories; pass a COCO instances file")
    return sorted(found.items())


def _coco_images(entries: list, json_path: Path, image_dir: str
                 ) -> tuple[list[str], list[int], list[tuple[int, int]]]:
    rels, ids, sizes = [], [], []
    seen_ids, seen_rels = set(), set()
    for index, entry in enumerate(entries):
        where = f"{json_path}: images[{index}]"
        image_id = _int(entry, "id", where)
        width, height = _int(entry, "width", where), _int(entry, "height", where)
        name = entry.get("file_name")
        if not isinstance(name, str) or not name or os.path.isabs(name) or width < 1 or \
                height < 1:
            raise UserError(f"{where} needs a relative file_name and positive width and "
                            "height; fix the entry")
        rel = os.path.normpath(f"{image_dir}/{name}" if image_dir else name).replace(os.sep, "/")
        if image_id in seen_ids or rel in seen_rels:
            raise UserError(f"{where} repeats image id {image_id} or file {name!r}; list each "
                            "image once")
        seen_ids.add(image_id)
        seen_rels.add(rel)
        rels.append(rel)
        ids.append(image_id)
        sizes.append((height, width))
    if not rels:
        raise UserError(f"{json_path} lists no images; pass the instances file of a split")
    return rels, ids, sizes


def _coco_object(ann: dict, category: int, where: str
                 ) -> tuple[int, list[float], float, int]:
    box = ann.get("bbox")
    if not isinstance(box, list) or len(box) != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in box) or box[2] < 0 or box[3] < 0:
        raise UserError(f"{where} has bbox {box!r}; COCO's is [x, y, width, height] in pixels, "
                        "width and height >= 0")
    crowd = ann.get("iscrowd", 0)
    area = ann.get("area", box[2] * box[3])
    if crowd not in (0, 1) or not isinstance(area, (int, float)):
        raise UserError(f"{where} has iscrowd {crowd!r} or area {area!r}; iscrowd is 0 or 1 "
                        "and area a number")
    return category, [float(v) for v in box], float(area), int(crowd)


# ----------------------------------------------------------------------------- YOLO
def read_yolo(root: Path, yaml_path: Path | None, names: list[str] | None = None
              ) -> Annotations:
    """``images/`` (or data.yaml's ``val:`` folder) with ``labels/<stem>.txt`` beside, the
    classes named by the YAML's ``names`` or by ``names`` (a labels file's)."""
    data = _read_yaml(yaml_path) if yaml_path is not None else {}
    classes = names if names is not None else _yaml_names(data, yaml_path, root)
    image_dir = _yolo_image_dir(root, data, yaml_path)
    inside = Containment(root)
    rels = _list_images(root, image_dir, inside)
    objects, listing = [], {}
    for rel in rels:
        label = _label_rel(rel)
        path = root / label
        if not path.is_file():
            objects.append([])
            continue
        inside.stat(label, str(path))
        text = _read_bytes(path)
        objects.append(_parse_label_file(text, path, len(classes)))
        listing[label] = hashlib.sha256(text).hexdigest()
    if not listing:
        log.warning("YOLO dataset %s: none of its %d images has a label file (labels/<stem>.txt)"
                    "; every detection will count as a false positive", root, len(rels))
    identity = json.dumps({"names": classes, "images": rels, "labels": listing},
                          ensure_ascii=False).encode("utf-8")
    return Annotations(YOLO, yaml_path or root / "labels", rels,
                       [row + 1 for row in range(len(rels))],
                       list(enumerate(classes)), objects, identity, normalised=True)


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())[:160]
        raise UserError(f"{path} cannot be read as YAML ({reason}); fix it") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a YAML mapping; write 'names: [...]' and 'val: DIR'")
    return data


def _yaml_names(data: dict, yaml_path: Path | None, root: Path) -> list[str]:
    """The YAML's ``names``: a list, or a {0: name, 1: name, ...} mapping."""
    names = data.get("names")
    if names is None:
        raise UserError(f"YOLO dataset {root} names no classes; add data.yaml with "
                        "'names: [...]' in the model's class order, or pass --labels FILE "
                        "with one name a line")
    if isinstance(names, dict):
        keys = sorted(names, key=lambda k: (not isinstance(k, int), str(k)))
        if keys != list(range(len(names))):
            raise UserError(f"{yaml_path}: names' keys must be the class ids 0..{len(names) - 1}"
                            "; fix the mapping")
        names = [names[k] for k in keys]
    if not isinstance(names, list) or not names or \
            not all(isinstance(n, (str, int)) and str(n).strip() and "\n" not in str(n)
                    for n in names):
        raise UserError(f"{yaml_path}: names must be a list of class names (one line each); "
                        "fix it")
    return [str(n) for n in names]


def _yolo_image_dir(root: Path, data: dict, yaml_path: Path | None) -> str:
    """The images folder relative to ``root``: the YAML's ``val:``, else images/val, else
    images."""
    val = data.get("val")
    if val is not None:
        if not isinstance(val, str):
            raise UserError(f"{yaml_path}: val must name one folder of images; fix it")
        bases = [Path(), Path(data["path"])] if isinstance(data.get("path"), str) else [Path()]
        for base in bases:
            if not base.is_absolute() and (root / base / val).is_dir():
                return (base / val).as_posix()
        raise UserError(f"{yaml_path}: val folder {val!r} is not a folder inside {root}; point "
                        "val at the validation images (relative to the YAML)")
    for candidate in ("images/val", "images"):
        if (root / candidate).is_dir():
            return candidate
    raise UserError(f"YOLO dataset {root} has no images/ folder; put the images in images/ "
                    "(or images/val/) and their labels in labels/")


def _list_images(root: Path, image_dir: str, inside: Containment) -> list[str]:
    """Images under ``root/image_dir`` (sub-folders too, hidden ones skipped), sorted; a
    folder leading out of the dataset, or reached twice through a link, is refused."""
    found, seen, pending = [], set(), [image_dir]
    while pending:
        rel_dir = pending.pop()
        real = os.path.realpath(root / rel_dir)
        inside.check(rel_dir, real, str(root))
        if real in seen:
            raise UserError(f"folder {root / rel_dir} is reached twice through a symlink, so "
                            "its images would be counted twice; remove the link")
        seen.add(real)
        with os.scandir(root / rel_dir) as scan:
            for entry in scan:
                rel = f"{rel_dir}/{entry.name}"
                if entry.name.startswith("."):
                    continue
                if entry.is_dir():
                    pending.append(rel)
                elif Path(entry.name).suffix.lower() in IMAGE_EXTENSIONS:
                    found.append(rel)
    if not found:
        raise UserError(f"YOLO dataset {root} has no images in {root / image_dir} "
                        f"({' '.join(sorted(IMAGE_EXTENSIONS))}); add them")
    return sorted(found)


def _label_rel(image_rel: str) -> str:
    """Ultralytics' rule: the last images/ folder becomes labels/, the extension .txt (no
    images/ folder: the label lies beside the image)."""
    parts = image_rel.split("/")
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == "images":
            parts[index] = "labels"
            break
    parts[-1] = Path(parts[-1]).stem + ".txt"
    return "/".join(parts)


def _parse_label_file(data: bytes, path: Path, num_classes: int
                      ) -> list[tuple[int, list[float], float, int]]:
    """``class cx cy w h`` lines, normalised; boxes stay normalised until sizes are known."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text; write 'class cx cy w h' lines") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        where = f"{path}:{number}"
        values = _floats(tokens[1:]) if len(tokens) == 5 and tokens[0].isdigit() else None
        if values is None:
            raise UserError(f"{where}: malformed line {line.strip()[:60]!r}; expected "
                            "'class cx cy w h' (an integer class, four numbers in 0..1)")
        label, (cx, cy, w, h) = int(tokens[0]), values
        if label >= num_classes:
            raise UserError(f"{where}: class {label} is outside the {num_classes} names "
                            f"(0..{num_classes - 1}); fix the label or the names")
        corners = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        if w <= 0 or h <= 0 or min(corners) < -TOLERANCE or max(corners) > 1 + TOLERANCE:
            raise UserError(f"{where}: box {line.strip()[:60]!r} reaches outside the image "
                            "(normalised coordinates must lie in 0..1, sizes above 0); fix it")
        out.append((label, [cx, cy, w, h], 0.0, 0))
    return out


def _floats(tokens: list[str]) -> list[float] | None:
    try:
        values = [float(t) for t in tokens]
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values) else None


# ----------------------------------------------------------------------------- files
def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror}); fix its permissions") from None


