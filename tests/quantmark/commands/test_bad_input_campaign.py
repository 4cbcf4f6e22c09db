"""Issue 43's bad-input campaign on "your model" flags, as a user types them: each bad value
of ``--model-path``, ``--preprocess FILE``, ``--labels``, class folders, ``--num-classes``,
``--channel-order``, ``--sut-option keep_float``, the normalisation and size flags and the
sweep's and recommend's dimensions is one ``error:`` line with exit 2, found before anything
runs (no test process is launched, no sweep cell run, no search space built); the few that are
fine are shown doing the right thing.

Every command runs in this process (``cli.main``), with the launcher, the sweep's runner and
recommend's space replaced by stand-ins that fail the test if reached."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save
from PIL import Image

from quantmark import cli
from quantmark.commands import recommend as recommend_verb
from quantmark.commands import sweep as sweep_verb
from quantmark.qsl import footprint
from quantmark.run import checks, launch

CLASSES = 10
GIB = 1 << 30


class Reached(Exception):
    """A stand-in was reached: the command got past its checks."""


def _classifier(path: Path, height: int | str = 32, width: int | str = 32,
                outputs: tuple[str, ...] = ("logits",)) -> Path:
    """Pooling and a linear layer: [N, 3, H, W] -> one [N, 10] output per name."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(3, CLASSES)).astype(np.float32), "w"),
               numpy_helper.from_array(np.zeros(CLASSES, np.float32), "b")]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w", "b"], [outputs[0]])]
    nodes += [helper.make_node("Neg", [outputs[0]], [name]) for name in outputs[1:]]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                   ["N", 3, height, width])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", CLASSES])
         for name in outputs], weights)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The models (32x32, dynamic-size, two outputs), a 10-class folder dataset and labels."""
    root = tmp_path_factory.mktemp("campaign")
    data = root / "data"
    rng = np.random.default_rng(1)
    for c in range(CLASSES):
        (data / f"class{c}").mkdir(parents=True)
        for i in range(2):
            pixels = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(data / f"class{c}" / f"{i}.png")
    (root / "labels.txt").write_text("".join(f"class{c}\n" for c in range(CLASSES)))
    return {"model": _classifier(root / "cifar.onnx"),
            "dynamic": _classifier(root / "dynamic.onnx", "H", "W"),
            "two": _classifier(root / "two.onnx", outputs=("logits", "aux")),
            "data": data, "labels": root / "labels.txt", "root": root}


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test process, sweep or search may start: a refusal is found before any work."""
    def reached(*args: object, **kwargs: object) -> None:
        raise Reached

    monkeypatch.setattr(launch, "launch", reached)
    monkeypatch.setattr(sweep_verb, "run_sweep", reached)
    monkeypatch.setattr(recommend_verb, "make_space", reached)
    monkeypatch.setattr(recommend_verb, "make_measurer", reached)


def refused(capsys: pytest.CaptureFixture, argv: list[str], *needles: str) -> str:
    """``run.py ARGV`` exits 2 with one ``error:`` line holding every needle."""
    assert cli.main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


def run_args(files: dict[str, Path], tmp_path: Path, *flags: str, model: str = "model",
             scenario: str = "Offline", sut: str = "ort-fp32") -> list[str]:
    return ["--scenario", scenario, "--sut", sut, "--model-path", str(files[model]),
            "--dataset-path", str(files["data"]), "--output", str(tmp_path / "out"), *flags]


def cached_files(cache: Path) -> list[Path]:
    """The files of the preprocessed cache (its folder may exist: asking it is no harm)."""
    return [path for path in (cache / "preprocessed").rglob("*") if path.is_file()]


def recipe(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------- the campaign's findings


def test_a_size_that_exhausts_memory_is_refused_and_nothing_is_cached(
        files, tmp_path, capsys, monkeypatch) -> None:
    """Finding 2: --input-size 10000x10000 on a dynamic-size model started a ~30 GB cache
    file. 20 samples of 1.1 GiB cannot be loaded into 8 GiB: one line, nothing written."""
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checks, "available_memory", lambda meminfo=None: 8 * GIB)
    refused(capsys, run_args(files, tmp_path, "--input-size", "10000x10000", model="dynamic",
                             scenario="SingleStream"),
            "20 loaded samples at 10000x10000 need 22.4 GiB of memory", "8.0 GiB available")
    assert not cached_files(tmp_path / "cache")


def test_a_set_the_disk_cannot_hold_is_refused_before_a_byte(files, tmp_path, capsys,
                                                             monkeypatch) -> None:
    monkeypatch.setenv("QUANTMARK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checks, "available_memory", lambda meminfo=None: 64 * GIB)
    real = shutil.disk_usage
    monkeypatch.setattr(footprint.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=2 * GIB))
    refused(capsys, run_args(files, tmp_path, "--input-size", "5000", model="dynamic",
                             scenario="SingleStream"),
            "20 images at 5000x5000 need 1.4 GiB of preprocessed cache, more than the 1.0 GiB "
            "free (1 GiB kept)", "QUANTMARK_CACHE")
    assert not cached_files(tmp_path / "cache")


def test_recommend_refuses_such_a_size_before_its_space(files, tmp_path, capsys,
                                                        monkeypatch) -> None:
    monkeypatch.setattr(checks, "available_memory", lambda meminfo=None: 8 * GIB)
    refused(capsys, ["recommend", "--scenario", "SingleStream", "--model-path",
                     str(files["dynamic"]), "--dataset-path", str(files["data"]),
                     "--input-size", "10000x10000", "--output", str(tmp_path)],
            "loaded samples at 10000x10000")


@pytest.mark.parametrize("budget", ["inf", "nan", "-1", "0"])
def test_a_budget_that_measures_nothing_or_never_ends_is_one_line(files, tmp_path, capsys,
                                                                   budget) -> None:
    """Finding 3: --budget inf ended in an OverflowError traceback with exit 1."""
    refused(capsys, ["recommend", "--scenario", "Offline", "--model-path", str(files["model"]),
                     "--dataset-path", str(files["data"]), f"--budget={budget}",
                     "--output", str(tmp_path)],
            f"--budget {float(budget):g}: give minutes above 0 (a finite number)")


def test_a_short_side_below_the_input_size_names_both_numbers(files, tmp_path, capsys) -> None:
    """Finding 4: the child's traceback with exit 3; in run and in recommend (which ran every
    candidate into the same failure) alike."""
    flags = ("--resize", "short-side", "--resize-short", "16")
    refused(capsys, run_args(files, tmp_path, *flags),
            "--resize-short 16 is below the input size 32x32", "at least 32")
    refused(capsys, ["recommend", "--scenario", "Offline", "--model-path", str(files["model"]),
                     "--dataset-path", str(files["data"]), *flags, "--output", str(tmp_path)],
            "--resize-short 16 is below the input size 32x32")


@pytest.mark.parametrize("flags, needle", [
    (["--std=-1,1,1"], "a negative std"),
    (["--std=-62"], "a negative std"),
    (["--mean=-5"], "within the pixels' range (0-255 pixel units)"),
    (["--mean=0.5,120,0.5", "--std=0.2", "--scale=255"], "(0-1 units with scale 255)"),
    (["--scale=0"], "scale 0.0: give a positive number"),
    (["--scale=inf"], "scale inf: give a positive number"),
])
def test_a_meaningless_normalisation_is_refused_as_a_zero_std_is(files, tmp_path, capsys,
                                                                  flags, needle) -> None:
    """Finding 5: a negative --std was accepted where 0 is refused."""
    refused(capsys, run_args(files, tmp_path, *flags), needle)


def test_two_class_outputs_are_refused_naming_both(files, tmp_path, capsys) -> None:
    """Finding 6: the first of two [N, 10] outputs was scored without a word."""
    refused(capsys, run_args(files, tmp_path, model="two"),
            "has 2 float [N, classes] outputs ('logits' and 'aux')", "onnx.utils.extract_model")


# ---------------------------------------------------------------- --model-path


def test_an_empty_onnx_file_is_not_a_model(files, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    files = {**files, "empty": empty}
    refused(capsys, run_args(files, tmp_path, model="empty"),
            "is not a valid ONNX model (it holds no graph")


def test_a_file_that_is_not_onnx_is_one_line(files, tmp_path, capsys) -> None:
    text = tmp_path / "notes.onnx"
    text.write_text("these are my notes, not a model\n")
    refused(capsys, run_args({**files, "text": text}, tmp_path, model="text"),
            "is not a valid ONNX model")


def test_a_folder_named_like_a_model_is_one_line(files, tmp_path, capsys) -> None:
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    refused(capsys, run_args({**files, "folder": folder}, tmp_path, model="folder"),
            "is a directory")


# ---------------------------------------------------------------- --preprocess FILE


@pytest.mark.parametrize("name, text, needle", [
    ("list.json", "[1, 2]", "expected a table of keys"),
    ("typo.json", json.dumps({"means": [1, 2, 3]}), "unknown key 'means'"),
    ("negative.json", json.dumps({"std": [-1, 1, 1]}), "a negative std"),
    ("half.json", json.dumps({"resize": "short-side", "resize_short": 40.5}), "a whole one"),
    ("bool.json", json.dumps({"resize_short": True}), "a whole one"),
    ("units.json", json.dumps({"mean": [0.5, 120, 0.5], "scale": 255}),
     "(0-1 units with scale 255)"),
    ("order.json", json.dumps({"channel_order": "GBR"}), "choose RGB or BGR"),
    ("broken.toml", "std = [1, 2\n", "is not valid toml"),
    ("small.json", json.dumps({"resize": "short-side", "resize_short": 20}),
     "--resize-short 20 is below the input size 32x32"),
])
def test_a_bad_recipe_file_is_one_line(files, tmp_path, capsys, name, text, needle) -> None:
    refused(capsys, run_args(files, tmp_path, "--preprocess", recipe(tmp_path, name, text)),
            needle)


def test_a_missing_recipe_file_is_one_line(files, tmp_path, capsys) -> None:
    refused(capsys, run_args(files, tmp_path, "--preprocess", str(tmp_path / "gone.json")),
            "cannot read it (FileNotFoundError)")


# ---------------------------------------------------------------- --labels, class folders


@pytest.mark.parametrize("text, needle", [
    ("", "names no classes"),
    ("".join(f"class{c}\n" for c in range(9)) + "class0\n", "is named again (first at line 1)"),
    ("".join(f"cat{c}\n" for c in range(CLASSES)), "dataset class 'class0' is not among"),
])
def test_a_labels_file_that_cannot_map_the_folders_is_one_line(files, tmp_path, capsys, text,
                                                               needle) -> None:
    refused(capsys, run_args(files, tmp_path, "--labels", recipe(tmp_path, "labels.txt", text)),
            needle)


def test_a_labels_folder_is_named_a_folder(files, tmp_path, capsys) -> None:
    refused(capsys, run_args(files, tmp_path, "--labels", str(tmp_path)),
            f"labels file {tmp_path} is a folder, not a file")


def test_an_empty_class_folder_is_one_line(files, tmp_path, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(files["data"], data)
    for image in (data / "class3").iterdir():
        image.unlink()
    refused(capsys, run_args({**files, "data": data}, tmp_path),
            f"class folder {data / 'class3'} has no images")


def test_fewer_class_folders_than_classes_asks_for_labels(files, tmp_path, capsys) -> None:
    data = tmp_path / "data"
    for c in range(3):
        shutil.copytree(files["data"] / f"class{c}", data / f"class{c}")
    refused(capsys, run_args({**files, "data": data}, tmp_path),
            "has 3 class folders but model cifar has 10 classes", "--labels FILE")


# ---------------------------------------------------------------- classes and channels


@pytest.mark.parametrize("count, needle", [
    ("1", "--num-classes 1: give 2 or more"),
    ("-3", "--num-classes -3: give 2 or more"),
    ("5", "outputs 10 classes, not --num-classes 5"),
])
def test_a_class_count_the_model_does_not_have_is_one_line(files, tmp_path, capsys, count,
                                                           needle) -> None:
    refused(capsys, run_args(files, tmp_path, f"--num-classes={count}"), needle)


def test_an_unknown_channel_order_is_one_line(files, tmp_path, capsys) -> None:
    refused(capsys, run_args(files, tmp_path, "--channel-order", "XYZ"),
            "channel order 'XYZ': choose RGB or BGR")


def test_a_lower_case_channel_order_is_taken(files) -> None:
    """``bgr`` is BGR: the spec every run resolves says so."""
    from quantmark.ground.config import RunConfig
    from quantmark.models.preprocessing import recipe_data
    from quantmark.models.workload import resolve_spec

    config = RunConfig(scenario="Offline", sut="ort-fp32", model="cifar",
                       model_path=str(files["model"]),
                       preprocess=recipe_data(None, {"channel_order": "bgr"}))
    assert resolve_spec(config).channel_order == "BGR"


@pytest.mark.parametrize("flag", ["--seq-len=64", "--padding=dynamic"])
def test_a_text_setting_on_an_image_model_is_one_line(files, tmp_path, capsys, flag) -> None:
    refused(capsys, run_args(files, tmp_path, flag), "is a text model's setting",
            "model cifar takes images")


@pytest.mark.parametrize("size", ["0x32", "32x", "big"])
def test_a_size_that_is_no_size_is_one_line(files, tmp_path, capsys, size) -> None:
    refused(capsys, run_args(files, tmp_path, f"--input-size={size}", model="dynamic"),
            f"--input-size '{size}': give a size in pixels")


# ---------------------------------------------------------------- --sut-option keep_float


@pytest.mark.parametrize("options, sut, needle", [
    (["keep_float="], "ort-int8", "write KEY=VALUE"),
    (["keep_float=logits", "keep_float=pooled"], "ort-int8",
     "--sut-option keep_float is given twice (logits and pooled); give it once (a list of "
     "layers: keep_float=A,B)"),
    (["keep_float=flat"], "ort-fp32", "ort-fp32 cannot keep layers in float"),
])
def test_a_bad_keep_float_is_one_line(files, tmp_path, capsys, options, sut, needle) -> None:
    flags = [item for option in options for item in ("--sut-option", option)]
    refused(capsys, run_args(files, tmp_path, *flags, sut=sut), needle)


def test_a_layer_the_model_does_not_have_is_one_line(files, tmp_path) -> None:
    """The layers are the SUT's to name (its quantized graph's, as run.py diagnose lists
    them): the test process refuses an unknown one, in one line and exit 2 all the same."""
    from tests.conftest import run_cli
    from tests.quantmark.run.test_checks import one_line_error

    one_line_error(run_cli(*run_args(files, tmp_path, "--sut-option", "keep_float=no_such",
                                     sut="ort-int8"), timeout=300),
                   "no layer no_such to keep in FP32", "run.py diagnose")


# ---------------------------------------------------------------- sweep and recommend


def sweep_args(files: dict[str, Path], tmp_path: Path, *flags: str) -> list[str]:
    return ["sweep", "--suts", "ort-fp32", "--scenarios", "Offline", "--model-path",
            str(files["model"]), "--dataset-path", str(files["data"]), "--no-accuracy",
            "--output", str(tmp_path / "sweep"), *flags]


@pytest.mark.parametrize("flags, needle", [
    (["--batch-sizes", "0,8"], "--batch-sizes 0: must be whole numbers >= 1"),
    (["--batch-sizes", "abc"], "a number was expected"),
    (["--seq-lens", "32"], "--seq-lens is a text model's setting, and cifar is a "
                           "classification model"),
    (["--threads", "-1"], "--threads -1: must be a whole number >= 0"),
    (["--seconds", "inf"], "--seconds inf: must be a number > 0"),
])
def test_a_bad_sweep_dimension_is_one_line(files, tmp_path, capsys, flags, needle) -> None:
    refused(capsys, sweep_args(files, tmp_path, *flags), needle)


def test_a_single_stream_sweep_is_judged_at_batch_1(files, tmp_path, monkeypatch) -> None:
    """A SingleStream-only sweep runs batch 1: its default batch 8 (which would not fit at
    this size) is no reason to refuse it, as it was."""
    # a 1024x1024 float32 input is 12 MiB: batch 8 held 4 times over (384 MiB) does not fit
    # in 320 MiB; batch 1 (48 MiB) and the 20 loaded samples (240 MiB) do
    monkeypatch.setattr(checks, "available_memory", lambda meminfo=None: 320 << 20)
    argv = sweep_args(files, tmp_path, "--image-sizes", "1024")
    argv[argv.index("Offline")] = "SingleStream"
    argv[argv.index(str(files["model"]))] = str(files["dynamic"])
    with pytest.raises(Reached):
        cli.main(argv)


@pytest.mark.parametrize("flags, needle", [
    (["--batch-sizes", "0"], "--batch-sizes '0': give whole numbers of at least 1, e.g. "
                             "--batch-sizes 1,8,32"),
    (["--seconds=inf"], "--seconds inf: give seconds above 0 (a finite number)"),
    (["--latency=nan"], "--latency nan: give a bound above 0"),
    (["--max-accuracy-drop=inf"], "--max-accuracy-drop inf"),
])
def test_a_bad_recommend_setting_is_one_line(files, tmp_path, capsys, monkeypatch, flags,
                                             needle) -> None:
    from quantmark.recommend import space

    monkeypatch.setattr(recommend_verb, "make_space", lambda args, model: space.space(
        args.scenario, model, **recommend_verb.space_settings(args)))
    refused(capsys, ["recommend", "--scenario", "Offline", "--model-path", str(files["model"]),
                     "--dataset-path", str(files["data"]), "--suts", "ort-fp32",
                     "--output", str(tmp_path), *flags], needle)
