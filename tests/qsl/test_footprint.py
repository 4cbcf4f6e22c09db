"""What a run's images take, judged before anything is built: the preprocessed cache against
the free disk, the loaded performance set against the memory available."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from quantmark.ground.errors import UserError
from quantmark.models.zoo import get_model
from quantmark.qsl import cache, footprint
from quantmark.qsl.imagenet import ImageFolderDataset
from quantmark.qsl.preprocess import recipe_for

GIB = 1 << 30


def test_the_cache_and_the_loaded_set_are_counted_in_bytes() -> None:
    assert footprint.cache_bytes(10, 100, 200) == 10 * 100 * 200 * 3 + footprint.NPY_HEADER
    assert footprint.loaded_bytes(4, 3, 10, 10) == 4 * 300 * 4  # float32
    assert footprint.loaded_bytes(4, 3, 10, 10, raw_pixels=True) == 4 * 300


def test_a_size_that_exhausts_memory_names_both_sizes() -> None:
    """Issue 43: --input-size 10000x10000 on a 40-image set: 40 float32 samples of 1.1 GiB
    each cannot be loaded into 8 GiB."""
    spec = replace(get_model("resnet50"), input_size=10000, input_width=10000)
    with pytest.raises(UserError, match=r"^40 loaded samples at 10000x10000 need 44\.7 GiB of "
                                        r"memory, more than the 8\.0 GiB available; pass a "
                                        r"smaller input size"):
        footprint.check_memory(spec, 40, 8 * GIB)
    footprint.check_memory(get_model("resnet50"), 40, 8 * GIB)  # 224x224: 24 MB
    footprint.check_memory(spec, 40, None)  # not known: not judged
    # the performance set is what is loaded, not the whole dataset
    footprint.check_memory(get_model("resnet50"), 50000, 1 * GIB)  # 1024 x 0.6 MB


def test_a_set_bigger_than_the_disk_is_refused_with_the_headroom(tmp_path: Path) -> None:
    footprint.check_disk(10, 100, 100, tmp_path, free=2 * GIB)
    with pytest.raises(UserError, match=r"^40 images at 10000x10000 need 11\.2 GiB of "
                                        r"preprocessed cache, more than the 9\.0 GiB free "
                                        r"\(1 GiB kept\)"):
        footprint.check_disk(40, 10000, 10000, tmp_path / "not" / "yet", free=10 * GIB)


def test_a_cache_built_already_needs_no_room(tmp_path: Path, monkeypatch) -> None:
    """A set whose cache exists is never refused for the disk (it is there); one whose cache
    is missing is, when the disk cannot hold it."""
    folder = tmp_path / "data" / "val"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (40, 30), (i, i, i)).save(folder / f"{i}.png")
    (tmp_path / "data" / "val_map.txt").write_text("".join(f"val/{i}.png {i}\n"
                                                         for i in range(3)))
    dataset = ImageFolderDataset(tmp_path / "data")
    spec = get_model("resnet50")
    real = shutil.disk_usage
    monkeypatch.setattr(footprint.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=GIB // 2))
    with pytest.raises(UserError, match="3 images at 224x224 need"):
        cache.check_set_fits(spec, dataset, 8 * GIB)
    final = cache.cache_path(cache.cache_key(dataset, recipe_for(spec, "NCHW")))
    final.parent.mkdir(parents=True)
    final.write_bytes(b"built")  # present: the cache's own check verifies it when opened
    cache.check_set_fits(spec, dataset, 8 * GIB)
