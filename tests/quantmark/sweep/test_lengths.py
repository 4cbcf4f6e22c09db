"""A text model's sequence length as a sweep dimension: each length its own cells, ids, folders
and RunConfig (``+seq=N``, as ``+size=`` for image sizes); a sweep without ``--seq-lens`` has
exactly the cells it had; lengths on an image model, sizes on a text model and bad values are
one line naming the fix."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.ground.records import SweepManifest, write_record
from quantmark.sweep.cell import cell_config
from quantmark.sweep.driver import MANIFEST, _open_manifest
from quantmark.sweep.plan import Cell, build_spec, cells, load_sweep_file, spec_from_args

IMAGE = {"models": "resnet50", "suts": "ort-int8,ort-fp32", "scenarios": "Offline",
         "batch_sizes": "8"}


@pytest.fixture(scope="module")
def text_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (model.onnx, tokenizer.json, config.json) in a folder named enc:
    the sweep names its model ``enc``."""
    from tests.tasks.text.tiny_encoder import tiny_encoder_folder

    return tiny_encoder_folder(tmp_path_factory.mktemp("text") / "enc")


def _text(model: Path, **settings: object) -> dict:
    return {"model_path": str(model), "suts": "ort-fp32,ort-int8dyn", "scenarios": "Offline",
            "batch_sizes": "8", **settings}


def _one_line(settings: dict) -> str:
    with pytest.raises(UserError) as info:
        build_spec(settings)
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


def test_a_text_sweep_without_seq_lens_has_todays_cells(text_model):
    spec = build_spec(_text(text_model))
    assert (spec.seq_lens, spec.padding, spec.tokenizer) == ([], "", None)
    assert [c.id for c in cells(spec)] == [
        "enc/ort-fp32/accuracy", "enc/ort-fp32/Offline-b8-r1",
        "enc/ort-int8dyn/accuracy", "enc/ort-int8dyn/Offline-b8-r1"]
    assert {c.seq_len for c in cells(spec)} == {0}


def test_each_seq_len_is_its_own_cells_folder_and_run(text_model, tmp_path):
    tokenizer = text_model.parent / "tokenizer.json"
    spec = build_spec(_text(text_model, seq_lens="16,32,128", padding="dynamic",
                            tokenizer=str(tokenizer), repeats=2))
    plan = cells(spec)
    ids = [c.id for c in plan if c.repeat == 1]
    # each length runs FP32 then INT8; 128 is the text task's default: today's ids
    assert ids == ["enc+seq=16/ort-fp32/accuracy", "enc+seq=16/ort-fp32/Offline-b8-r1",
                   "enc+seq=16/ort-int8dyn/accuracy", "enc+seq=16/ort-int8dyn/Offline-b8-r1",
                   "enc+seq=32/ort-fp32/accuracy", "enc+seq=32/ort-fp32/Offline-b8-r1",
                   "enc+seq=32/ort-int8dyn/accuracy", "enc+seq=32/ort-int8dyn/Offline-b8-r1",
                   "enc/ort-fp32/accuracy", "enc/ort-fp32/Offline-b8-r1",
                   "enc/ort-int8dyn/accuracy", "enc/ort-int8dyn/Offline-b8-r1"]
    assert len({c.id for c in plan}) == len(plan) == 12 + 6
    configs = {c.id: cell_config(tmp_path, spec, c) for c in plan}
    assert configs["enc+seq=16/ort-int8dyn/Offline-b8-r1"].seq_len == 16
    assert configs["enc+seq=32/ort-fp32/accuracy"].seq_len == 32
    assert configs["enc/ort-int8dyn/Offline-b8-r1"].seq_len == 0  # the task's default, 128
    assert {(c.padding, c.tokenizer) for c in configs.values()} == {("dynamic", str(tokenizer))}
    assert len({config.output for config in configs.values()}) == len(plan)
    assert configs["enc+seq=32/ort-fp32/accuracy"].output == str(
        tmp_path / "runs" / "enc+seq=32" / "ort-fp32" / "accuracy")
    assert plan[0].to_dict()["seq_len"] == 16  # the manifest records it
    assert Cell.from_dict(json.loads(json.dumps(plan[0].to_dict()))) == plan[0]


def test_seq_lens_are_written_one_way(text_model):
    assert build_spec(_text(text_model, seq_lens=" 32, 16,32")).seq_lens == [32, 16]
    assert build_spec(_text(text_model, seq_lens=[16, "32"])).seq_lens == [16, 32]
    assert build_spec(_text(text_model, seq_lens=64)).seq_lens == [64]
    # run.py's one --seq-len is one length; its default (0) is none
    assert build_spec(_text(text_model, seq_len=32)).seq_lens == [32]
    assert build_spec(_text(text_model, seq_len=0)).seq_lens == []
    # naming the default padding is no padding setting: it resumes a sweep that did not
    assert build_spec(_text(text_model, padding="fixed")).padding == ""


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "abc", ",", "16,0", "12x"])
def test_bad_seq_lens_are_one_line_naming_the_flag_and_the_fix(value):
    message = _one_line({**IMAGE, "seq_lens": value})
    assert message.startswith("--seq-lens (seq_lens in a sweep file)")
    assert "e.g. --seq-lens 32,128,384" in message


def test_seq_lens_on_an_image_model_are_one_line_naming_the_fix():
    message = _one_line({**IMAGE, "seq_lens": "32,128"})
    assert message.startswith("--seq-lens is a text model's setting, and resnet50 is a "
                              "classification model (it takes images)")
    assert "or drop --seq-lens" in message
    message = _one_line({**IMAGE, "padding": "dynamic"})
    assert message.startswith("--padding is a text model's setting, and resnet50")
    message = _one_line({"ensembles": "resnet50@ort-fp32,mobilenetv2@ort-fp32",
                         "seq_lens": "32"})
    assert "drop --seq-lens" in message


def test_image_sizes_on_a_text_model_are_one_line_naming_the_fix(text_model):
    message = _one_line(_text(text_model, image_sizes="64,128"))
    assert message.startswith("--image-sizes sweeps an image model's input size, and enc is "
                              "a text model (it takes tokens)")
    assert "--seq-lens 32,128,384" in message


def test_lengths_a_text_model_cannot_take_are_refused_before_any_cell(text_model):
    message = _one_line(_text(text_model, seq_lens="4,32"))
    assert message.startswith("--seq-lens (seq_lens in a sweep file) 4: a text model takes at "
                              "least 8 tokens")
    message = _one_line(_text(text_model, seq_lens="16,1024"))  # its positions: 512
    assert message.startswith("--seq-lens (seq_lens in a sweep file): sequence length 1024 is "
                              "out of range")
    assert _one_line(_text(text_model, padding="sideways")) == \
        "--padding 'sideways': give fixed or dynamic"


def test_a_sweep_file_gives_seq_lens_and_padding(text_model, tmp_path):
    path = tmp_path / "sweep.toml"
    head = f'model_path = "{text_model}"\nsuts = "ort-fp32"\nscenarios = "Offline"\n'
    path.write_text(head + 'seq_lens = [16, 32]\npadding = "dynamic"\n')
    spec = build_spec(load_sweep_file(str(path)))
    assert (spec.seq_lens, spec.padding) == ([16, 32], "dynamic")
    assert [c.id for c in cells(spec)][:2] == ["enc+seq=16/ort-fp32/accuracy",
                                               "enc+seq=16/ort-fp32/Offline-b8-r1"]
    yaml_path = tmp_path / "sweep.yaml"
    yaml_path.write_text(f"model_path: {text_model}\nsuts: ort-fp32\nseq-lens: 16,32\n")
    assert build_spec(load_sweep_file(str(yaml_path))).seq_lens == [16, 32]


@pytest.mark.parametrize("line, needle", [
    ("seq_lens = [16, 0]", ":4: seq_lens = '0' is not a sequence length"),
    ("seq_lens = [16, -2]", ":4: seq_lens = '-2' is not a sequence length"),
    ("seq_lens = 1.5", ":4: seq_lens = 1.5 is a number; seq_lens must be a whole number of "
                       "tokens or a list of them"),
    ('padding = "sideways"', ":4: padding = 'sideways': give fixed or dynamic"),
    ("padding = true", ":4: padding = True is a boolean; padding must be fixed or dynamic"),
])
def test_bad_text_keys_in_a_file_name_the_file_key_and_line(tmp_path, line, needle):
    path = tmp_path / "sweep.toml"
    path.write_text(f'models = ["minilm"]\nsuts = "ort-fp32"\nscenarios = "Offline"\n{line}\n')
    with pytest.raises(UserError) as info:
        load_sweep_file(str(path))
    assert f"sweep file {path}{needle}" in str(info.value)


def test_the_sweep_verb_reads_seq_lens_and_padding(text_model):
    from quantmark.commands import sweep as verb

    parser = argparse.ArgumentParser()
    verb.add_arguments(parser)
    args = parser.parse_args(["--model-path", str(text_model), "--suts", "ort-fp32",
                              "--seq-lens", "16,32", "--padding", "dynamic"])
    spec = spec_from_args(args, {"seq_lens": [64]})
    assert (spec.seq_lens, spec.padding) == ([16, 32], "dynamic")  # the flag wins
    args = parser.parse_args(["--model-path", str(text_model), "--suts", "ort-fp32"])
    assert spec_from_args(args, {}).seq_lens == []  # --seq-len's default 0: no length


def test_a_sweep_from_before_seq_lens_resumes_with_its_cells(tmp_path):
    """Its manifest lacks padding and tokenizer: they were the defaults."""
    spec = build_spec({**IMAGE, "output": str(tmp_path)})
    old = {k: v for k, v in spec.measuring_settings().items()
           if k not in ("padding", "tokenizer")}
    cells_before = {c.id: {**c.to_dict(), "status": "ok"} for c in cells(spec)}
    for entry in cells_before.values():
        del entry["seq_len"]
    write_record(tmp_path / MANIFEST, SweepManifest(settings=old, cells=cells_before))
    manifest = _open_manifest(tmp_path, spec)
    assert sorted(manifest.cells) == sorted(c.id for c in cells(spec))
    assert {Cell.from_dict(e).seq_len for e in manifest.cells.values()} == {0}
    with pytest.raises(UserError, match=r"other settings \(padding\)"):
        _open_manifest(tmp_path, replace(spec, padding="dynamic"))


def test_bad_seq_lens_through_run_py_exit_2_in_one_line(tmp_path):
    from tests.conftest import run_cli

    proc = run_cli("sweep", "--models", "resnet50", "--suts", "ort-fp32", "--seq-lens",
                   "32,0", "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "'0' is not a sequence length" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_seq_len_sweep_runs_each_length_and_reports_int8_speedup_by_length(text_model,
                                                                             tmp_path):
    """``run.py sweep --model-path <tiny encoder> --seq-lens 16,32``: each cell runs at its
    length (results.json says so), and the report has a speedup row per length, its accuracy
    under the text task's metric (cosine to FP32), never top-1."""
    import csv

    from tests.conftest import run_cli

    out = tmp_path / "sweep"
    proc = run_cli("sweep", "--model-path", str(text_model), "--suts", "ort-fp32,ort-int8dyn",
                   "--scenarios", "Offline", "--seq-lens", "16,32", "--seconds", "1",
                   "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = json.loads((out / "sweep.json").read_text())["cells"]
    assert sorted(cells) == sorted(f"enc+seq={n}/{sut}/{test}" for n in (16, 32)
                                   for sut in ("ort-fp32", "ort-int8dyn")
                                   for test in ("accuracy", "Offline-b8-r1"))
    for cell_id, entry in cells.items():
        assert entry["status"] == "ok", entry
        length = int(cell_id.split("/")[0].removeprefix("enc+seq="))
        assert entry["seq_len"] == length
        results = json.loads((out / entry["run_dir"] / "results.json").read_text())
        assert results["config"]["seq_len"] == length
        assert results["model"]["input"]["seq_len"] == length
        assert results["model"]["input"]["padding"] == "fixed"
        assert results["task"]["name"] == "text"
    rows = list(csv.DictReader((out / "speedup_by_seq_len.csv").open()))
    assert [(r["sut"], r["seq_len"]) for r in rows] == [("ort-int8dyn", "16"),
                                                        ("ort-int8dyn", "32")]
    assert all(float(r["speedup_vs_fp32"]) > 0 and r["fp32_baseline"] == "ort-fp32"
               for r in rows)
    markdown = (out / "report.md").read_text()
    table = markdown.split("## Speedup over FP32 by sequence length")[1].split("\n## ")[0]
    assert "| sequence length | × fw FP32 | verdict | Δ cosine to FP32 vs fw FP32 |" in table
    for length in (16, 32):
        assert f"| enc | built-in | Offline | 8 | ort-int8dyn | {length} | " in table
        assert f"## enc seq={length} — Offline — " in markdown
    assert "cosine to FP32 %" in markdown and "top-1" not in markdown
    assert list((out / "figures").glob("speedup-by-seq-len-*-enc-built-in-Offline-b8.png"))
