from __future__ import annotations

import hashlib
from pathlib import Path

from quantmark.qsl import open_dataset
from quantmark.qsl.builtin import CAL_MAP, LABELS, available_photos, generate
from quantmark.qsl.imagenet import ImageFolderDataset, parse_path_list


def test_builtin_sizes_and_labels(builtin_root: Path) -> None:
    ds = ImageFolderDataset(builtin_root, builtin=True)
    assert len(ds) >= 1024
    hand_labels = {photo.label for photo in LABELS}
    assert set(ds.labels.tolist()) <= hand_labels
    assert len(set(ds.labels.tolist())) >= 5  # several classes, roughly balanced
    cal = [rel for rel, _ in parse_path_list(builtin_root / CAL_MAP)]
    assert len(cal) >= 256
    assert not set(cal) & {rel for rel, _ in ds.items}
    assert all((builtin_root / rel).is_file() for rel in cal)


def test_open_dataset_none_is_builtin(builtin_root: Path, monkeypatch) -> None:
    monkeypatch.setattr("quantmark.qsl.builtin.builtin_dataset_root", lambda: builtin_root)
    ds = open_dataset(None)
    assert ds.builtin and ds.root == builtin_root


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return h.hexdigest()


def test_generation_is_deterministic(tmp_path: Path) -> None:
    photos = available_photos()
    assert photos
    generate(tmp_path / "a", photos, eval_count=20, cal_count=6)
    generate(tmp_path / "b", photos, eval_count=20, cal_count=6)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    lines = (tmp_path / "a" / "val_map.txt").read_text().splitlines()
    assert len(lines) == 20


def test_builtin_root_is_reused(builtin_root: Path, monkeypatch) -> None:
    from quantmark.qsl import builtin

    monkeypatch.setenv("QUANTMARK_CACHE", str(builtin_root.parent.parent))
    monkeypatch.setattr(builtin, "generate", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert builtin.builtin_dataset_root() == builtin_root
