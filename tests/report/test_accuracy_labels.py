"""The accuracy tool scores against the dataset's own label space: a 10-class folder dataset's
labels (with its classes.txt beside the run's val_map.txt), any label of a larger space, and
still ImageNet's refusal of 1-based labels in a bare val_map."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.label_space import CLASSES_FILE, write_classes
from quantmark.report.accuracy import (
    main,
    read_classes,
    read_val_map_labels,
    run_samples,
)


def write_log(path: Path, answers: list[int]) -> Path:
    entries = [{"seq_id": i, "qsl_idx": i,
                "data": np.array([a], np.float32).tobytes().hex().upper()}
               for i, a in enumerate(answers)]
    path.write_text(json.dumps(entries))
    return path


def run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[int]]:
    """What a run of a 10-class folder dataset leaves: its val_map.txt (as record.py writes
    it from ``dataset.items``) and classes.txt."""
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "data"
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
             "truck"]
    for n, name in enumerate(names):
        for i in range(2):
            (root / name).mkdir(parents=True, exist_ok=True)
            pixels = np.full((4, 4, 3), 10 * n + i, np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    dataset = ImageFolderDataset(root)
    work = tmp_path / "run"
    work.mkdir()
    (work / "val_map.txt").write_text("".join(f"{rel} {label}\n" for rel, label in dataset.items))
    write_classes(work, dataset)
    return work, [label for _, label in dataset.items]


def test_a_ten_class_folder_run_is_scored_on_its_labels(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    work, labels = run_folder(tmp_path, monkeypatch)
    assert labels == [n for n in range(10) for _ in range(2)]
    assert read_classes(work)[:3] == ["airplane", "automobile", "bird"]
    answers = [*labels[:15], *[(label + 1) % 10 for label in labels[15:]]]
    log = write_log(work / "mlperf_log_accuracy.json", answers)
    code = main(["--mlperf-accuracy-file", str(log), "--imagenet-val-file",
                 str(work / "val_map.txt"), "--output", str(work / "accuracy.txt")])
    captured = capsys.readouterr()
    assert code == 0
    assert (work / "accuracy.txt").read_text().splitlines()[0] == \
        "accuracy=75.000%, good=15, total=20"
    assert "10 classes of classes.txt (airplane, automobile" in captured.err
    samples = run_samples(work)
    assert samples is not None and samples.labels == labels


def test_a_label_classes_txt_does_not_name_is_one_line(tmp_path: Path) -> None:
    (tmp_path / CLASSES_FILE).write_text("a\nb\n")
    (tmp_path / "val_map.txt").write_text("x.png 0\ny.png 2\n")
    with pytest.raises(UserError) as exc:
        read_val_map_labels(tmp_path / "val_map.txt")
    message = str(exc.value)
    assert "\n" not in message and "val_map.txt:2: label 2 has no class name" in message


def test_classes_txt_makes_label_1000_an_ordinary_label(tmp_path: Path) -> None:
    (tmp_path / CLASSES_FILE).write_text("".join(f"c{i}\n" for i in range(1001)))
    (tmp_path / "val_map.txt").write_text("x.png 0\ny.png 1000\n")
    assert read_val_map_labels(tmp_path / "val_map.txt") == [0, 1000]


def test_a_bare_val_map_reads_any_label(tmp_path: Path) -> None:
    (tmp_path / "val_map.txt").write_text("x.png 0\ny.png 21842\nz.png 1000\n")
    assert read_val_map_labels(tmp_path / "val_map.txt") == [0, 21842, 1000]
    assert read_classes(tmp_path) is None


def test_a_bare_val_map_topped_by_1000_is_still_1_based(tmp_path: Path) -> None:
    (tmp_path / "val_map.txt").write_text("x.png 0\ny.png 1000\nz.png 999\n")
    assert main(["--mlperf-accuracy-file", str(write_log(tmp_path / "a.json", [0, 1, 2])),
                 "--imagenet-val-file", str(tmp_path / "val_map.txt")]) == 2
    with pytest.raises(UserError, match=r"val_map.txt:2: label 1000 means 1-based labels"):
        read_val_map_labels(tmp_path / "val_map.txt")


def test_write_classes_only_where_the_dataset_names_them(tmp_path: Path) -> None:
    class Bare:
        classes = None

    write_classes(tmp_path, Bare())
    assert not (tmp_path / CLASSES_FILE).exists()
