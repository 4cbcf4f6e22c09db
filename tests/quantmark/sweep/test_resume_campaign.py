"""Resume by content, not by name (``quantmark.sweep.resume``): a finished cell is kept only when
its dataset, model file and settings files hold what they held, on the same hardware, and its
files are as it left them.

Every case but the last runs ``run_sweep`` in this process with the cells' LoadGen test
replaced by a stand-in that writes a run folder (a real ``results.json`` record, a log) in
milliseconds, so the decision is tested on real datasets (class folders of PNGs, fingerprinted
by their task as a run does) without minutes of runs. The last runs the user's report end to
end: ``run.py sweep --datasets /a/data``, then ``--datasets /b/data`` (45 images relabeled)
into the same folder.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import machine
from quantmark.ground.records import RESULTS, RunRecord, write_record
from quantmark.sweep import driver, resume
from quantmark.sweep.contents import dataset_identity
from quantmark.sweep.driver import MANIFEST, run_sweep
from quantmark.sweep.plan import Cell, SweepSpec

MODEL = "digits-cnn"  # a built-in 10-class model on 8x8 grey digits: class folders 0..9
OTHER_HARDWARE = "Some Other CPU (x86_64, 64 CPUs)"


# ----------------------------------------------------------------------------- helpers


def _dataset(folder: Path, seed: int = 0, relabel: int = 0) -> Path:
    """Ten class folders of three 8x8 grey PNGs, the same for the same seed; ``relabel``
    (up to 9) of them filed under the next class (the same images, other labels)."""
    rng = np.random.default_rng(seed)
    for label in range(10):
        (folder / str(label)).mkdir(parents=True)
        for index in range(3):
            pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
            Image.fromarray(pixels, "L").save(folder / str(label) / f"{index}.png")
    for label in range(relabel):
        (folder / str(label) / "0.png").rename(folder / str(label + 1) / f"moved-{label}.png")
    return folder


class StandIn:
    """``run_cell`` in milliseconds: a run folder with its record (the dataset's fingerprint
    and this machine, as a run records them) and a log; ``fail`` makes every cell fail."""

    def __init__(self, fail: bool = False) -> None:
        self.ran: list[str] = []
        self.fail = fail

    def __call__(self, root: Path, spec: SweepSpec, cell: Cell) -> dict[str, Any]:
        self.ran.append(cell.id)
        entry = {**cell.to_dict(), "message": "", "wall_s": 0.1, "peak_rss_mb": None,
                 "log": f"logs/{cell.id}.log"}
        if self.fail:
            return {**entry, "status": "failed", "message": "the SUT crashed"}
        run = root / "runs" / cell.id / "run_1"
        run.mkdir(parents=True, exist_ok=True)
        folder = cell.dataset or spec.dataset_path
        record = RunRecord(config={"model": cell.model, "dataset_path": folder},
                           dataset={"builtin": not folder,
                                    "fingerprint": dataset_identity(MODEL, folder)},
                           machine=machine(), summary={"samples_per_second": 100.0})
        write_record(run / RESULTS, record)
        (run / "mlperf_log_detail.txt").write_text(f"{cell.id}: 100 samples per second\n")
        return {**entry, "status": "ok", "run_dir": str(run.relative_to(root))}


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install a stand-in for the cells (and no store); returns the installer."""
    monkeypatch.setattr(driver, "record_in_store", lambda path: 0)

    def install(fail: bool = False) -> StandIn:
        runner = StandIn(fail)
        monkeypatch.setattr(driver, "run_cell", runner)
        return runner

    yield install


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """The sweep driver's warning lines (its logger, whatever the CLI's setup did)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                lines.append(record.getMessage())

    handler = Keep()
    logging.getLogger(driver.__name__).addHandler(handler)
    yield lines
    logging.getLogger(driver.__name__).removeHandler(handler)


def _spec(out: Path, **settings: Any) -> SweepSpec:
    return SweepSpec(models=[MODEL], suts=["ort-fp32"], scenarios=["Offline"],
                     batch_sizes=[8], output=str(out), **settings)


def _sweep(spec: SweepSpec) -> str:
    """Run the sweep; what it printed."""
    screen = io.StringIO()
    run_sweep(spec, console=Console(file=screen, width=400))
    return screen.getvalue()


def _refusal(spec: SweepSpec) -> str:
    """The one line a refused sweep says; the folder's manifest must be untouched."""
    before = (Path(spec.output) / MANIFEST).read_bytes()
    with pytest.raises(UserError) as info:
        _sweep(spec)
    assert "\n" not in str(info.value)
    assert (Path(spec.output) / MANIFEST).read_bytes() == before
    return str(info.value)


def _entries(out: Path) -> dict[str, Any]:
    return json.loads((out / MANIFEST).read_text())["cells"]


# ----------------------------------------------------------------------------- datasets


def test_same_folder_name_other_content_is_refused_naming_the_change(tmp_path, stand_in):
    """The user's report: /a/data, then /b/data (same name, images relabeled) into the same
    folder was "2 of 2 cells already finished" with the first dataset's figures."""
    first = _dataset(tmp_path / "a" / "data")
    second = _dataset(tmp_path / "b" / "data", relabel=5)
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, datasets=[str(first)]))
    again = stand_in()
    message = _refusal(_spec(out, datasets=[str(second)]))
    assert again.ran == []
    assert "2 finished cells measured with other inputs: dataset content changed" in message
    assert f"{MODEL}+data=data/ort-fp32/accuracy" in message
    assert "use a new --output" in message and "another name" in message


def test_another_sut_on_a_changed_dataset_of_the_same_name_is_refused(tmp_path, stand_in):
    """No cell of the second sweep was run before, but its report would show the first
    sweep's FP32 rows on /a/data beside INT8 rows on /b/data, both as ``data=data``."""
    first = _dataset(tmp_path / "a" / "data")
    second = _dataset(tmp_path / "b" / "data", relabel=2)
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, datasets=[str(first)]))
    again = stand_in()
    message = _refusal(replace(_spec(out, datasets=[str(second)]), suts=["ort-int8"]))
    assert again.ran == [] and "dataset content changed" in message
    assert f"{MODEL}+data=data/ort-fp32/" in message


def test_a_renamed_dataset_folder_with_the_same_content_resumes(tmp_path, stand_in):
    folder = _dataset(tmp_path / "photos")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, dataset_path=str(folder)))
    renamed = folder.rename(tmp_path / "photos-2024")
    again = stand_in()
    said = _sweep(_spec(out, dataset_path=str(renamed)))
    assert again.ran == []
    assert "resuming" in said and "2 of 2 cells already finished" in said
    # the manifest names the folder as it is now
    settings = json.loads((out / MANIFEST).read_text())["settings"]
    assert settings["dataset_path"] == str(renamed.resolve())


def test_a_dataset_changed_in_place_is_refused(tmp_path, stand_in):
    """Same path, same name: one image's bytes rewritten."""
    folder = _dataset(tmp_path / "data")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, dataset_path=str(folder)))
    image = folder / "3" / "1.png"
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8), "L").save(image)
    message = _refusal(_spec(out, dataset_path=str(folder)))
    assert "dataset content changed" in message and "restore the dataset" in message
    assert "another name" not in message  # one dataset: its name is in no cell id


def test_an_output_folder_moved_with_its_dataset_copied_elsewhere_resumes(tmp_path, stand_in):
    """Both copied to another place (another disk, another user's home): same content, other
    paths; the cells are kept."""
    folder = _dataset(tmp_path / "one" / "digits")
    stand_in()
    _sweep(_spec(tmp_path / "out", datasets=[str(folder)]))
    shutil.copytree(tmp_path / "out", tmp_path / "moved" / "out")
    shutil.copytree(folder, tmp_path / "two" / "digits")
    again = stand_in()
    said = _sweep(_spec(tmp_path / "moved" / "out", datasets=[str(tmp_path / "two" / "digits")]))
    assert again.ran == [] and "2 of 2 cells already finished" in said


def test_a_failed_cell_of_other_inputs_runs_again_said_in_one_line(tmp_path, stand_in):
    """A failure is no result to keep: with the dataset changed it runs again, and one line
    says which cells and why."""
    first = _dataset(tmp_path / "a" / "data")
    second = _dataset(tmp_path / "b" / "data", relabel=4)
    out = tmp_path / "out"
    stand_in(fail=True)
    _sweep(_spec(out, datasets=[str(first)]))
    again = stand_in()
    said = _sweep(_spec(out, datasets=[str(second)]))
    assert len(again.ran) == 2
    (line,) = [line for line in said.splitlines() if "re-running" in line]
    assert line.startswith("re-running 2 finished cell(s) measured with other inputs: "
                           "dataset content changed (")
    assert {e["status"] for e in _entries(out).values()} == {"ok"}


# ----------------------------------------------------------------------------- model and settings


def test_a_model_file_changed_in_place_is_refused(tmp_path, stand_in):
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"first weights")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, model_path=str(model)))
    model.write_bytes(b"retrained weights")
    message = _refusal(_spec(out, model_path=str(model)))
    assert "model file changed" in message and "restore the file to resume" in message


def test_a_model_file_renamed_with_the_same_bytes_resumes(tmp_path, stand_in):
    model = tmp_path / "mine.onnx"
    model.write_bytes(b"weights")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, model_path=str(model)))
    moved = model.rename(tmp_path / "kept.onnx")
    again = stand_in()
    assert "2 of 2 cells already finished" in _sweep(_spec(out, model_path=str(moved)))
    assert again.ran == []


def test_an_openvino_model_s_weights_file_is_part_of_the_model(tmp_path, stand_in):
    """``model.xml`` holds the graph, ``model.bin`` the weights: new weights, same graph."""
    graph = tmp_path / "model.xml"
    graph.write_text("<net/>")
    (tmp_path / "model.bin").write_bytes(b"weights one")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, model_path=str(graph)))
    (tmp_path / "model.bin").write_bytes(b"weights two")
    assert "model file changed" in _refusal(_spec(out, model_path=str(graph)))


def test_a_settings_file_changed_in_place_is_refused_naming_its_flag(tmp_path, stand_in):
    conf = tmp_path / "user.conf"
    conf.write_text("*.Offline.min_duration = 2000\n")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, user_conf=str(conf)))
    conf.write_text("*.Offline.min_duration = 60000\n")
    message = _refusal(_spec(out, user_conf=str(conf)))
    assert "setting --user-conf changed (its file's content)" in message


def test_another_setting_is_refused_as_before(tmp_path, stand_in):
    out = tmp_path / "out"
    stand_in()
    spec = _spec(out, threads=2)
    _sweep(spec)
    message = _refusal(replace(spec, threads=4))
    assert "other settings (threads)" in message and "new --output" in message


# ----------------------------------------------------------------------------- damaged cells


def _one_finished(tmp_path: Path, stand_in: Any) -> tuple[SweepSpec, dict[str, Any]]:
    spec = _spec(tmp_path / "out", accuracy=False)
    stand_in()
    _sweep(spec)
    (entry,) = _entries(tmp_path / "out").values()
    return spec, entry


def test_a_half_written_cell_runs_again_with_one_warning(tmp_path, stand_in, warnings):
    """The manifest says ok, but its run folder is gone (a copy that stopped half way)."""
    spec, entry = _one_finished(tmp_path, stand_in)
    shutil.rmtree(tmp_path / "out" / entry["run_dir"])
    again = stand_in()
    _sweep(spec)
    assert again.ran == [f"{MODEL}/ort-fp32/Offline-b8-r1"]
    assert len(warnings) == 1 and "run folder" in warnings[0] and "is missing" in warnings[0]


def test_edited_results_run_again_and_are_kept_aside(tmp_path, stand_in, warnings):
    spec, entry = _one_finished(tmp_path, stand_in)
    results = tmp_path / "out" / entry["run_dir"] / RESULTS
    results.write_text(results.read_text().replace("100.0", "900.0"))
    again = stand_in()
    _sweep(spec)
    assert len(again.ran) == 1 and len(warnings) == 1
    assert "results.json changed after the cell finished" in warnings[0]
    (aside,) = (tmp_path / "out" / entry["run_dir"]).parent.glob(resume.DAMAGED + "*")
    assert "900.0" in (aside / RESULTS).read_text()  # kept, where no report looks
    assert "900.0" not in results.read_text()  # the cell's own result is a new run
    assert resume.damage(tmp_path / "out", _entries(tmp_path / "out")[again.ran[0]]) is None


def test_a_truncated_log_runs_again(tmp_path, stand_in, warnings):
    spec, entry = _one_finished(tmp_path, stand_in)
    log = tmp_path / "out" / entry["run_dir"] / "mlperf_log_detail.txt"
    log.write_bytes(log.read_bytes()[:5])
    again = stand_in()
    _sweep(spec)
    assert len(again.ran) == 1 and "mlperf_log_detail.txt changed" in warnings[0]


def test_an_edited_manifest_entry_runs_again(tmp_path, stand_in, warnings):
    """Its figures in sweep.json (wall time) changed by hand."""
    spec, _ = _one_finished(tmp_path, stand_in)
    path = tmp_path / "out" / MANIFEST
    data = json.loads(path.read_text())
    for entry in data["cells"].values():
        entry["wall_s"] = 0.001
    path.write_text(json.dumps(data))
    again = stand_in()
    _sweep(spec)
    assert len(again.ran) == 1 and "its entry in sweep.json was edited" in warnings[0]


def test_an_untouched_sweep_resumes_without_warnings(tmp_path, stand_in, warnings):
    spec, _ = _one_finished(tmp_path, stand_in)
    again = stand_in()
    assert "1 of 1 cells already finished" in _sweep(spec)
    assert again.ran == [] and warnings == []


# ----------------------------------------------------------------------------- other machines


def test_cells_from_another_machine_s_output_folder_are_refused(tmp_path, stand_in,
                                                               monkeypatch):
    """A folder copied from a machine of other hardware: its figures are that machine's, and
    this sweep's cells would be measured here; refused, not mixed."""
    folder = _dataset(tmp_path / "data")
    out = tmp_path / "out"
    stand_in()
    with monkeypatch.context() as there:
        there.setattr(resume, "this_hardware", lambda: OTHER_HARDWARE)
        _sweep(_spec(out, dataset_path=str(folder)))
    message = _refusal(_spec(out, dataset_path=str(folder)))
    assert f"measured on other hardware ({OTHER_HARDWARE}; this machine: " in message
    assert "use a new --output for this machine's sweep" in message


def _as_before_inputs(out: Path) -> None:
    """Make the manifest's entries as a quantmark before this one wrote them."""
    path = out / MANIFEST
    data = json.loads(path.read_text())
    for entry in data["cells"].values():
        for key in ("inputs", "files", "seal"):
            entry.pop(key, None)
    path.write_text(json.dumps(data))


def test_an_older_manifest_resumes_by_what_its_records_say(tmp_path, stand_in):
    """Entries without inputs: the dataset is checked against each run's record."""
    first = _dataset(tmp_path / "a" / "data")
    out = tmp_path / "out"
    stand_in()
    _sweep(_spec(out, datasets=[str(first)]))
    _as_before_inputs(out)
    again = stand_in()
    assert "2 of 2 cells already finished" in _sweep(_spec(out, datasets=[str(first)]))
    assert again.ran == []
    second = _dataset(tmp_path / "b" / "data", relabel=3)
    _as_before_inputs(out)
    assert "dataset content changed" in _refusal(_spec(out, datasets=[str(second)]))


def test_an_older_manifest_s_unreadable_record_runs_again(tmp_path, stand_in, warnings):
    spec, entry = _one_finished(tmp_path, stand_in)
    _as_before_inputs(tmp_path / "out")
    results = tmp_path / "out" / entry["run_dir"] / RESULTS
    results.write_text(results.read_text()[:40])
    again = stand_in()
    _sweep(spec)
    assert len(again.ran) == 1 and "is not valid JSON" in warnings[0]


# ----------------------------------------------------------------------------- end to end


def _digits_folder(folder: Path, relabel: int) -> Path:
    """300 of scikit-learn's digits as class folders (8-bit grey PNGs, as the built-in set
    writes them); ``relabel`` of them filed under the next class."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    for label in range(10):
        (folder / str(label)).mkdir(parents=True)
    for label in range(10):
        chosen = np.flatnonzero(digits.target == label)[:30]
        for number, index in enumerate(chosen):
            target = (label + 1) % 10 if number < relabel // 9 and label < 9 else label
            pixels = np.rint(digits.images[index] * 255.0 / 16.0).astype(np.uint8)
            Image.fromarray(pixels, "L").save(folder / str(target) / f"{index}.png")
    return folder


@pytest.mark.slow
def test_the_users_two_datasets_named_data_end_to_end(tmp_path, quantmark_cache):
    """``run.py sweep --datasets /a/data``, then ``--datasets /b/data`` (45 images relabeled)
    into the same output: refused in one line (exit 2) naming the change, the first sweep's
    manifest untouched (today's code said "2 of 2 cells already finished", exit 0)."""
    from tests.conftest import run_cli

    first = _digits_folder(tmp_path / "a" / "data", relabel=0)
    second = _digits_folder(tmp_path / "b" / "data", relabel=45)
    flags = ("--models", MODEL, "--suts", "ort-fp32", "--scenarios", "Offline",
             "--batch-sizes", "8", "--seconds", "1", "--output", str(tmp_path / "out"))
    env = {"QUANTMARK_CACHE": str(quantmark_cache), "QUANTMARK_STORE": "off"}
    done = run_cli("sweep", *flags, "--datasets", str(first), env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    before = (tmp_path / "out" / MANIFEST).read_bytes()
    refused = run_cli("sweep", *flags, "--datasets", str(second), env=env)
    assert refused.returncode == 2, refused.stdout[-2000:]
    assert "already finished" not in refused.stdout
    assert refused.stderr.strip().count("\n") == 0 and "Traceback" not in refused.stderr
    assert "dataset content changed" in refused.stderr and "new --output" in refused.stderr
    assert (tmp_path / "out" / MANIFEST).read_bytes() == before
