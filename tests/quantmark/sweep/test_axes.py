"""Input size and dataset as sweep dimensions: each value its own cells, ids and folders, its
own RunConfig; a sweep without them has exactly the cells it had; bad values are one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.sweep.cell import cell_config
from quantmark.sweep.plan import build_spec, cells, load_sweep_file, spec_from_args

BASE = {"models": "resnet50", "suts": "ort-int8,ort-fp32", "scenarios": "Offline",
        "batch_sizes": "8"}


def _dataset(folder: Path, images: int = 16) -> Path:
    """A val_map.txt dataset folder (its images are not read before a cell runs)."""
    folder.mkdir(parents=True)
    (folder / "val_map.txt").write_text("".join(f"img{i}.jpg {i % 3}\n" for i in range(images)))
    return folder


def _one_line(settings: dict) -> str:
    with pytest.raises(UserError) as info:
        build_spec(settings)
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


def test_a_sweep_without_the_new_flags_has_todays_cells():
    ids = [c.id for c in cells(build_spec(BASE))]
    assert ids == ["resnet50/ort-fp32/accuracy", "resnet50/ort-fp32/Offline-b8-r1",
                   "resnet50/ort-int8/accuracy", "resnet50/ort-int8/Offline-b8-r1"]


def test_each_image_size_is_its_own_cells_and_folder_the_models_own_size_has_none(tmp_path):
    spec = build_spec({**BASE, "image_sizes": "64,128,224", "repeats": 2})
    plan = cells(spec)
    ids = [c.id for c in plan if c.repeat == 1]
    # each size runs FP32 then INT8; 224 is resnet50's own size: today's ids
    assert ids == ["resnet50+size=64/ort-fp32/accuracy", "resnet50+size=64/ort-fp32/Offline-b8-r1",
                   "resnet50+size=64/ort-int8/accuracy", "resnet50+size=64/ort-int8/Offline-b8-r1",
                   "resnet50+size=128/ort-fp32/accuracy",
                   "resnet50+size=128/ort-fp32/Offline-b8-r1",
                   "resnet50+size=128/ort-int8/accuracy",
                   "resnet50+size=128/ort-int8/Offline-b8-r1",
                   "resnet50/ort-fp32/accuracy", "resnet50/ort-fp32/Offline-b8-r1",
                   "resnet50/ort-int8/accuracy", "resnet50/ort-int8/Offline-b8-r1"]
    assert len({c.id for c in plan}) == len(plan) == 12 + 6
    configs = {c.id: cell_config(tmp_path, spec, c) for c in plan}
    assert configs["resnet50+size=64/ort-int8/Offline-b8-r1"].input_size == "64"
    assert configs["resnet50/ort-int8/Offline-b8-r1"].input_size == ""
    assert len({config.output for config in configs.values()}) == len(plan)
    assert configs["resnet50+size=128/ort-fp32/accuracy"].output == str(
        tmp_path / "runs" / "resnet50+size=128" / "ort-fp32" / "accuracy")


def test_sizes_are_written_one_way():
    spec = build_spec({**BASE, "image_sizes": "96x96, 96,224x224,128X160"})
    assert spec.image_sizes == ["96", "224", "128x160"]
    assert {c.input_size for c in cells(spec)} == {"96", "", "128x160"}
    file_form = build_spec({**BASE, "image_sizes": [96, "128x160"]})
    assert file_form.image_sizes == ["96", "128x160"]


@pytest.mark.parametrize("value", ["0", "abc", "12x", "x12", "64,0x64", "-3", ",", "1.5"])
def test_bad_image_sizes_are_one_line_naming_the_flag_and_the_fix(value):
    message = _one_line({**BASE, "image_sizes": value})
    assert "--image-sizes (image_sizes in a sweep file)" in message
    assert "e.g. --image-sizes 64,128,224x320" in message


def test_bad_image_size_in_a_file_names_the_file_key_and_line(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('models = ["resnet50"]\nsuts = "ort-fp32"\nimage_sizes = [64, "12x"]\n')
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    assert f"sweep file {path}:3: image_sizes = '12x' is not an image size" in str(info.value)
    path.write_text('models = ["resnet50"]\nsuts = "ort-fp32"\nimage_sizes = 1.5\n')
    with pytest.raises(UserError, match=r":3: image_sizes = 1.5 is a number; image_sizes must "
                                        r"be an image size"):
        load_sweep_file(str(path))
    path.write_text('models = ["resnet50"]\nsuts = "ort-fp32"\nimage_sizes = [64, "96x128"]\n')
    assert build_spec(load_sweep_file(str(path))).image_sizes == ["64", "96x128"]


def test_a_size_too_large_for_memory_is_refused_before_any_cell(monkeypatch):
    import quantmark.run.checks as checks

    monkeypatch.setattr(checks, "available_memory", lambda meminfo: 2 ** 30)  # 1 GiB
    build_spec({**BASE, "image_sizes": "64,128"})
    message = _one_line({**BASE, "image_sizes": "64,4096"})
    assert "--batch-sizes 8" in message and "4096x4096" in message


def test_a_model_file_of_another_size_is_refused_per_size(tmp_path):
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"not onnx")
    message = _one_line({**BASE, "suts": "ort-fp32", "model_path": str(model),
                         "image_sizes": "64"})
    assert message.startswith("image size 64 (--image-sizes")


def test_each_dataset_is_its_own_cells_and_run(tmp_path):
    flowers, birds = _dataset(tmp_path / "flowers"), _dataset(tmp_path / "birds")
    spec = build_spec({**BASE, "suts": "ort-fp32", "datasets": f"{flowers},{birds}",
                       "image_sizes": "128"})
    plan = cells(spec)
    assert [c.id for c in plan] == [
        "resnet50+size=128+data=flowers/ort-fp32/accuracy",
        "resnet50+size=128+data=flowers/ort-fp32/Offline-b8-r1",
        "resnet50+size=128+data=birds/ort-fp32/accuracy",
        "resnet50+size=128+data=birds/ort-fp32/Offline-b8-r1"]
    runs = [cell_config(tmp_path, spec, c) for c in plan]
    assert [r.dataset_path for r in runs] == [str(flowers.resolve())] * 2 + \
        [str(birds.resolve())] * 2
    assert plan[0].to_dict()["dataset"] == str(flowers.resolve())  # the manifest records it


def test_one_dataset_path_keeps_todays_ids(tmp_path):
    one = _dataset(tmp_path / "one")
    spec = build_spec({**BASE, "suts": "ort-fp32", "dataset_path": str(one)})
    plan = cells(spec)
    assert [c.id for c in plan] == ["resnet50/ort-fp32/accuracy",
                                    "resnet50/ort-fp32/Offline-b8-r1"]
    assert cell_config(tmp_path, spec, plan[1]).dataset_path == str(one)


def test_bad_datasets_are_one_line(tmp_path):
    one = _dataset(tmp_path / "a" / "data")
    same_name = _dataset(tmp_path / "b" / "data")
    message = _one_line({**BASE, "datasets": f"{one},{tmp_path / 'missing'}"})
    assert message.startswith("--datasets (datasets in a sweep file): dataset folder "
                              f"{tmp_path / 'missing'} does not exist; give existing")
    message = _one_line({**BASE, "datasets": f"{one},{same_name}"})
    assert f"{one} and {same_name} are both named data" in message
    message = _one_line({**BASE, "datasets": str(one), "dataset_path": str(one)})
    assert "--datasets and --dataset-path both name the dataset" in message
    message = _one_line({"ensembles": "resnet50@ort-fp32,mobilenetv2@ort-fp32",
                         "image_sizes": "64"})
    assert "drop --ensemble" in message


def test_a_flag_replaces_the_files_dataset_either_way(tmp_path):
    one, two = _dataset(tmp_path / "one"), _dataset(tmp_path / "two")
    path = tmp_path / "sweep.toml"
    path.write_text(f'models = ["resnet50"]\nsuts = "ort-fp32"\ndatasets = ["{one}", "{two}"]\n')
    args = argparse.Namespace(file=str(path), retry_failed=False, dataset_path=str(one),
                              datasets=None)
    spec = spec_from_args(args, load_sweep_file(str(path)))
    assert (spec.dataset_path, spec.datasets) == (str(one), [])
    path.write_text(f'models = ["resnet50"]\nsuts = "ort-fp32"\ndataset_path = "{one}"\n')
    args = argparse.Namespace(file=str(path), retry_failed=False, dataset_path=None,
                              datasets=f"{one},{two}")
    spec = spec_from_args(args, load_sweep_file(str(path)))
    assert spec.dataset_path is None and len(spec.datasets) == 2


def test_bad_image_size_through_run_py_exits_2_in_one_line(tmp_path):
    from tests.conftest import run_cli

    proc = run_cli("sweep", "--models", "resnet50", "--suts", "ort-fp32", "--image-sizes",
                   "64,12x", "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "'12x' is not an image size" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_sweep_file_gives_the_models_classes_and_recipe(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('models = ["resnet50"]\nsuts = "ort-fp32"\nimage_sizes = 96\n'
                    'num_classes = 10\n[preprocess]\npreset = "cifar10"\nmean = [0.5]\n')
    spec = build_spec(load_sweep_file(str(path)))
    assert (spec.image_sizes, spec.num_classes) == (["96"], 10)
    assert spec.preprocess == {"preset": "cifar10", "mean": [0.5]}
    config = cell_config(tmp_path, spec, cells(spec)[0])
    assert (config.input_size, config.num_classes, config.preprocess) == \
        ("96", 10, {"preset": "cifar10", "mean": [0.5]})
    path.write_text('models = ["resnet50"]\nsuts = "ort-fp32"\n[preprocess]\nmeen = [0.5]\n')
    message = _one_line(load_sweep_file(str(path)))
    assert message.startswith("preprocess: unknown key 'meen'; the keys are preset,")


def test_the_sweep_verb_reads_the_new_flags():
    from quantmark.commands import sweep as verb

    parser = argparse.ArgumentParser()
    verb.add_arguments(parser)
    args = parser.parse_args(["--models", "resnet50", "--suts", "ort-fp32", "--image-sizes",
                              "64,96x128", "--preprocess", "imagenet"])
    spec = spec_from_args(args, {"num_classes": 10})
    assert spec.image_sizes == ["64", "96x128"]
    assert spec.num_classes == 10  # the flag's default does not replace the file's value
    assert spec.preprocess == {"preset": "imagenet"}
