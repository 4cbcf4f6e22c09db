"""COCO- and YOLO-format detection datasets: class mapping, sizes, ground truth, fingerprint,
refusals, containment, and use by the image cache, the QSL and the calibration hold-out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.qsl.preprocess import LETTERBOX_PAD, PreprocessRecipe, decode_and_crop
from quantmark.tasks.detection.datasets import (
    DetectionDataset,
    check_model_classes,
    open_detection_dataset,
)

# (width, height) of the test images; the third has no objects
SIZES = [(64, 48), (40, 80), (50, 50), (33, 21)]
CATEGORIES = [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person"},
              {"id": 3, "name": "car"}]  # unsorted and non-contiguous, as COCO's 80 of 91
ANNOTATIONS = [  # (image id, category id, bbox, iscrowd)
    (101, 1, [2.0, 3.0, 20.5, 10.0], 0),
    (101, 90, [30.0, 20.0, 10.0, 15.0], 0),
    (102, 3, [0.0, 0.0, 40.0, 80.0], 1),
    (104, 90, [1.0, 1.0, 5.0, 5.0], 0),
]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own QUANTMARK_CACHE: no cache shared with another test or the user."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("QUANTMARK_CACHE", str(cache))
    return cache


def write_jpeg(path: Path, width: int, height: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def coco_record(**changes) -> dict:
    images = [{"id": 101 + i, "file_name": f"{i:012d}.jpg", "width": w, "height": h}
              for i, (w, h) in enumerate(SIZES)]
    annotations = [{"id": 7 + i, "image_id": image, "category_id": cat, "bbox": box,
                    "area": box[2] * box[3] * 0.5, "iscrowd": crowd, "segmentation": []}
                   for i, (image, cat, box, crowd) in enumerate(ANNOTATIONS)]
    return {"images": images, "annotations": annotations, "categories": CATEGORIES, **changes}


@pytest.fixture
def coco_root(tmp_path: Path) -> Path:
    root = tmp_path / "coco"
    for i, (w, h) in enumerate(SIZES):
        write_jpeg(root / "val2017" / f"{i:012d}.jpg", w, h, seed=i)
    write_json(root, coco_record())
    return root


def write_json(root: Path, record: dict, name: str = "instances_val2017.json") -> Path:
    path = root / "annotations" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


# label lines of the YOLO images, normalised cx cy w h; image 2 has no label file
YOLO_LABELS = {0: "0 0.5 0.5 0.25 0.5\n1 0.1 0.2 0.2 0.4\n", 1: "2 0.75 0.5 0.5 1.0\n",
               3: "\n1 0.5 0.5 1 1\n"}


@pytest.fixture
def yolo_root(tmp_path: Path) -> Path:
    root = tmp_path / "yolo"
    for i, (w, h) in enumerate(SIZES):
        write_jpeg(root / "images" / "val" / f"im{i}.jpg", w, h, seed=10 + i)
        if i in YOLO_LABELS:
            label = root / "labels" / "val" / f"im{i}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text(YOLO_LABELS[i])
    (root / "data.yaml").write_text("path: .\nval: images/val\n"
                                    "names:\n  0: cat\n  1: dog\n  2: bird\n")
    return root


# ----------------------------------------------------------------------------- COCO
def test_coco_categories_map_sorted_ids_to_contiguous_classes(coco_root: Path) -> None:
    ds = open_detection_dataset(str(coco_root))
    assert isinstance(ds, DetectionDataset) and ds.layout == "coco" and not ds.builtin
    assert ds.categories == [(1, "person"), (3, "car"), (90, "toothbrush")]
    assert ds.classes == ["person", "car", "toothbrush"] and ds.num_classes == 3
    assert ds.all_items == [(f"val2017/{i:012d}.jpg", i) for i in range(4)]
    assert [ds.image_id(r) for r in range(4)] == [101, 102, 103, 104]
    np.testing.assert_array_equal(ds.image_sizes, [(h, w) for w, h in SIZES])
    assert ds.image_sizes.shape == (4, 2) and ds.image_sizes.dtype.kind == "i"
    assert len(ds) == 4 and ds.labels.dtype == np.int64 and ds.labels.tolist() == [0, 1, 2, 3]
    assert ds.path(ds.all_items[0][0]) == coco_root / "val2017" / "000000000000.jpg"
    assert "instances_val2017.json" in ds.describe(1) and "102" in ds.describe(1)


def test_coco_ground_truth(coco_root: Path) -> None:
    from pycocotools.coco import COCO

    ds = open_detection_dataset(str(coco_root))
    gt = ds.ground_truth()
    assert [img["id"] for img in gt["images"]] == [101, 102, 103, 104]
    assert gt["images"][1] == {"id": 102, "file_name": "val2017/000000000001.jpg",
                               "width": 40, "height": 80}
    got = [(a["image_id"], a["category_id"], a["bbox"], a["iscrowd"])
           for a in gt["annotations"]]
    assert got == ANNOTATIONS  # original pixels, the dataset's own ids, crowd kept
    assert gt["annotations"][0]["area"] == 20.5 * 10 * 0.5  # COCO's own area, not the box's
    assert len({a["id"] for a in gt["annotations"]}) == 4
    assert [c["id"] for c in gt["categories"]] == [1, 3, 90]
    coco = COCO()
    coco.dataset = gt
    coco.createIndex()
    assert coco.getImgIds() == [101, 102, 103, 104] and len(coco.getAnnIds(imgIds=[103])) == 0
    subset = ds.ground_truth(np.array([3]))
    assert [img["id"] for img in subset["images"]] == [104]
    assert [a["bbox"] for a in subset["annotations"]] == [[1.0, 1.0, 5.0, 5.0]]


def test_coco_picks_the_val_split_and_accepts_the_json_itself(coco_root: Path) -> None:
    (coco_root / "train2017").mkdir()
    write_json(coco_root, coco_record(images=[]), "instances_train2017.json")
    assert len(open_detection_dataset(coco_root)) == 4  # instances_val2017 chosen
    named = open_detection_dataset(coco_root / "annotations" / "instances_val2017.json")
    assert named.root == coco_root and len(named) == 4
    write_json(coco_root, coco_record(), "instances_val2014.json")
    with pytest.raises(UserError, match="several annotation files.*--dataset-path FILE.json"):
        open_detection_dataset(coco_root)


def test_coco_json_beside_the_images(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    for i, (w, h) in enumerate(SIZES):
        write_jpeg(root / f"{i:012d}.jpg", w, h, seed=i)
    (root / "instances_mine.json").write_text(json.dumps(coco_record()))
    ds = open_detection_dataset(root)
    assert ds.all_items[0] == ("000000000000.jpg", 0) and ds.num_classes == 3


def test_coco_labels_file_must_match_the_categories(coco_root: Path, tmp_path: Path) -> None:
    names = tmp_path / "names.txt"
    names.write_text("a\nb\n")
    with pytest.raises(UserError, match="names 2 classes but .* has 3 categories"):
        open_detection_dataset(coco_root, names=str(names))


def test_coco_missing_images_named_with_count(coco_root: Path) -> None:
    (coco_root / "val2017" / "000000000001.jpg").unlink()
    (coco_root / "val2017" / "000000000003.jpg").unlink()
    with pytest.raises(UserError) as err:
        open_detection_dataset(coco_root)
    message = str(err.value)
    assert "2 of the 4 images" in message and "000000000001.jpg" in message
    assert "\n" not in message


def test_coco_size_mismatch_refused(coco_root: Path) -> None:
    record = coco_record()
    record["images"][2]["width"] = 51
    write_json(coco_root, record)
    with pytest.raises(UserError, match=r"as 51x50 but the image is 50x50"):
        open_detection_dataset(coco_root)


@pytest.mark.parametrize(("record", "match"), [
    ("not json", "not valid JSON"),
    ({"images": []}, "lacks COCO's images, annotations and categories"),
    (coco_record(categories=[]), "lists no categories"),
    (coco_record(images=[]), "lists no images"),
    (coco_record(annotations=[{"image_id": 999, "category_id": 1, "bbox": [0, 0, 1, 1]}]),
     r"annotations\[0\] names image_id 999"),
    (coco_record(annotations=[{"image_id": 101, "category_id": 2, "bbox": [0, 0, 1, 1]}]),
     r"annotations\[0\] names category_id 2"),
    (coco_record(annotations=[{"image_id": 101, "category_id": 1, "bbox": [0, 0, -1, 1]}]),
     r"annotations\[0\] has bbox"),
    (coco_record(categories=[{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]), "repeats id 1"),
])
def test_coco_malformed_files_refused(coco_root: Path, record, match: str) -> None:
    path = coco_root / "annotations" / "instances_val2017.json"
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    with pytest.raises(UserError, match=match):
        open_detection_dataset(coco_root)


def test_coco_symlink_escape_refused(coco_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jpg"
    write_jpeg(outside, 64, 48, seed=0)
    target = coco_root / "val2017" / "000000000000.jpg"
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(UserError, match="outside the dataset folder"):
        open_detection_dataset(coco_root)


def test_fingerprint_changes_on_relabel(coco_root: Path, yolo_root: Path) -> None:
    first = open_detection_dataset(coco_root).fingerprint()
    assert open_detection_dataset(coco_root).fingerprint() == first  # stable
    record = coco_record()
    record["annotations"][0]["category_id"] = 3
    write_json(coco_root, record)
    assert open_detection_dataset(coco_root).fingerprint() != first
    before = open_detection_dataset(yolo_root).fingerprint()
    (yolo_root / "labels" / "val" / "im1.txt").write_text("1 0.75 0.5 0.5 1.0\n")
    assert open_detection_dataset(yolo_root).fingerprint() != before
    (yolo_root / "labels" / "val" / "im1.txt").write_text(YOLO_LABELS[1])
    assert open_detection_dataset(yolo_root).fingerprint() == before
    (yolo_root / "data.yaml").write_text("val: images/val\nnames: [cat, dog, owl]\n")
    assert open_detection_dataset(yolo_root).fingerprint() != before


# ----------------------------------------------------------------------------- YOLO
def test_yolo_classes_and_pixel_boxes(yolo_root: Path) -> None:
    ds = open_detection_dataset(yolo_root)
    assert ds.layout == "yolo" and ds.categories == [(0, "cat"), (1, "dog"), (2, "bird")]
    assert ds.all_items == [(f"images/val/im{i}.jpg", i) for i in range(4)]
    assert [ds.image_id(r) for r in range(4)] == [1, 2, 3, 4]
    gt = ds.ground_truth()
    by_image: dict[int, list] = {}
    for ann in gt["annotations"]:
        by_image.setdefault(ann["image_id"], []).append((ann["category_id"], ann["bbox"]))
    expected: dict[int, list] = {}
    for row, text in YOLO_LABELS.items():
        width, height = SIZES[row]
        for line in filter(None, text.splitlines()):
            k, cx, cy, w, h = line.split()
            cx, cy, w, h = (float(v) for v in (cx, cy, w, h))
            expected.setdefault(row + 1, []).append(
                (int(k), [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]))
    assert by_image == expected  # exact: the same arithmetic, no rounding
    assert by_image[1][0] == (0, [24.0, 12.0, 16.0, 24.0])
    assert 3 not in by_image  # no label file: no objects, but the image is scored
    assert [img["id"] for img in gt["images"]] == [1, 2, 3, 4]
    assert all(a["iscrowd"] == 0 and a["area"] == a["bbox"][2] * a["bbox"][3]
               for a in gt["annotations"])


def test_yolo_flat_layout_with_a_labels_file(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    write_jpeg(root / "images" / "a.jpg", 20, 10, seed=1)
    (root / "labels").mkdir()
    (root / "labels" / "a.txt").write_text("1 0.5 0.5 0.5 0.5\n")
    with pytest.raises(UserError, match="add data.yaml with 'names.*--labels FILE"):
        open_detection_dataset(root)
    names = tmp_path / "names.txt"
    names.write_text("x\ny\n")
    ds = open_detection_dataset(root, names=str(names))
    assert ds.classes == ["x", "y"]
    assert ds.ground_truth()["annotations"][0]["bbox"] == [5.0, 2.5, 10.0, 5.0]


def test_yolo_upright_size_of_a_rotated_photo(tmp_path: Path) -> None:
    root = tmp_path / "rot"
    path = root / "images" / "a.jpg"
    path.parent.mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees
    Image.new("RGB", (40, 20), (200, 0, 0)).save(path, exif=exif)
    (root / "data.yaml").write_text("names: [a]\n")
    ds = open_detection_dataset(root)
    assert ds.image_sizes.tolist() == [[40, 20]]  # (height, width) as decode_and_crop sees it


@pytest.mark.parametrize(("label", "match"), [
    ("0 0.5 0.5 0.2\n", r"im0.txt:1: malformed line"),
    ("\n0 0.5 0.5 0.2 0.2 0.1\n", r"im0.txt:2: malformed line"),
    ("0 0.5 0.5 0.2 x\n", "malformed line"),
    ("-1 0.5 0.5 0.2 0.2\n", "malformed line"),
    ("3 0.5 0.5 0.2 0.2\n", r"im0.txt:1: class 3 is outside the 3 names"),
    ("0 0.95 0.5 0.2 0.2\n", "reaches outside the image"),
    ("0 0.5 0.5 0 0.2\n", "reaches outside the image"),
    ("0 0.5 0.5 0.2 nan\n", "malformed line"),
])
def test_yolo_bad_label_lines_refused(yolo_root: Path, label: str, match: str) -> None:
    (yolo_root / "labels" / "val" / "im0.txt").write_text(label)
    with pytest.raises(UserError, match=match) as err:
        open_detection_dataset(yolo_root)
    assert "\n" not in str(err.value)


def test_yolo_small_overshoot_is_clipped(yolo_root: Path) -> None:
    (yolo_root / "labels" / "val" / "im0.txt").write_text("0 0.502 0.5 1.0 0.5\n")
    ds = open_detection_dataset(yolo_root)
    x, y, w, h = ds.ground_truth(np.array([0]))["annotations"][0]["bbox"]
    assert x == pytest.approx(0.128) and x + w == pytest.approx(64.0)


@pytest.mark.parametrize(("yaml", "match"), [
    ("names: {0: a, 2: b}\n", "keys must be the class ids"),
    ("val: images/nope\nnames: [a]\n", "val folder 'images/nope' is not a folder"),
    ("names: [a\n", "cannot be read as YAML"),
    ("- a\n", "not a YAML mapping"),
])
def test_yolo_bad_yaml_refused(yolo_root: Path, yaml: str, match: str) -> None:
    (yolo_root / "data.yaml").write_text(yaml)
    with pytest.raises(UserError, match=match):
        open_detection_dataset(yolo_root)


def test_yolo_without_images_refused(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / "images").mkdir(parents=True)
    (root / "data.yaml").write_text("names: [a]\n")
    with pytest.raises(UserError, match="has no images in"):
        open_detection_dataset(root)
    with pytest.raises(UserError, match="neither COCO format"):
        open_detection_dataset(root / "images")
    with pytest.raises(UserError, match="does not exist"):
        open_detection_dataset(tmp_path / "nowhere")


def test_yolo_symlink_escape_refused(yolo_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    write_jpeg(outside / "x.jpg", 10, 10, seed=3)
    (yolo_root / "images" / "val" / "more").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UserError, match="outside the dataset folder"):
        open_detection_dataset(yolo_root)
    os.unlink(yolo_root / "images" / "val" / "more")
    (yolo_root / "images" / "val" / "y.jpg").symlink_to(outside / "x.jpg")
    with pytest.raises(UserError, match="outside the dataset folder"):
        open_detection_dataset(yolo_root)


def test_model_class_count_checked(coco_root: Path, yolo_root: Path) -> None:
    check_model_classes(open_detection_dataset(coco_root), 3, "m")
    with pytest.raises(UserError, match=r"model yolo11n detects 80 classes but dataset .* "
                                        r"has 3; pass the COCO-format dataset"):
        check_model_classes(open_detection_dataset(coco_root), 80, "yolo11n")
    with pytest.raises(UserError, match="has 3; fix names .* --labels FILE"):
        check_model_classes(open_detection_dataset(yolo_root), 2, "m")


# ----------------------------------------------------------------------------- image machinery
def test_cached_letterbox_images_and_qsl(coco_root: Path) -> None:
    from quantmark.qsl.cache import cached_images
    from quantmark.qsl.library import QuerySampleLibrary

    ds = open_detection_dataset(coco_root)
    recipe = PreprocessRecipe(resize_short=64, crop=64, resize_rule="letterbox", layout="NHWC",
                              mean=(0.0,), std=(255.0,))
    images = cached_images(ds, recipe, workers=1)
    assert images.shape == (4, 64, 64, 3) and images.dtype == np.uint8
    np.testing.assert_array_equal(images[1], decode_and_crop(ds.path(ds.all_items[1][0]),
                                                             recipe))
    assert (images[1][:, :16] == LETTERBOX_PAD).all()  # 40x80 portrait: bars left and right
    qsl = QuerySampleLibrary.from_dataset(ds, recipe, performance_sample_count=4, workers=1)
    qsl.load([0, 3])
    assert qsl.batch([0, 3]).shape == (2, 64, 64, 3)


def test_calibration_hold_out_leaves_the_evaluation_rows(coco_root: Path) -> None:
    from quantmark.qsl.calibration_sets import calibration_for

    ds = open_detection_dataset(coco_root)
    calibration = calibration_for(ds, count=1, seed=0,
                                  recipe=PreprocessRecipe(crop=32, resize_short=32,
                                                          resize_rule="letterbox"))
    assert ds.held_out_count == 1 and len(ds) == 3
    held = calibration.items[0]
    assert held not in [rel for rel, _ in ds.items]
    gt = ds.ground_truth()
    held_id = ds.image_id(next(row for rel, row in ds.all_items if rel == held))
    assert held_id not in [img["id"] for img in gt["images"]]
    assert held_id not in [a["image_id"] for a in gt["annotations"]]
    assert calibration.arrays().shape == (1, 3, 32, 32)
    assert ds.labels.tolist() == ds.cache_rows.tolist()


def test_yolo_yaml_chosen_or_named(yolo_root: Path) -> None:
    (yolo_root / "data.yaml").rename(yolo_root / "mine.yaml")
    assert open_detection_dataset(yolo_root).classes == ["cat", "dog", "bird"]  # the only one
    (yolo_root / "other.yml").write_text("names: [a]\n")
    with pytest.raises(UserError, match="several YAML files .* --dataset-path FILE.yaml"):
        open_detection_dataset(yolo_root)
    assert open_detection_dataset(yolo_root / "mine.yaml").num_classes == 3
