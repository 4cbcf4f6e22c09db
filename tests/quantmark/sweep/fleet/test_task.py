"""A cell's results tree travels from its node to the driver's sweep folder whole."""

from __future__ import annotations

from pathlib import Path

from quantmark.sweep.fleet.task import pack, unpack


def test_a_cells_archive_replaces_a_lost_attempts_leftovers(tmp_path: Path):
    node = tmp_path / "node"
    (node / "runs/m/s/Offline-b8-r1/run_1").mkdir(parents=True)
    (node / "runs/m/s/Offline-b8-r1/run_1/results.json").write_text("{}")
    (node / "logs/m/s").mkdir(parents=True)
    (node / "logs/m/s/Offline-b8-r1.log").write_text("new")
    sweep = tmp_path / "sweep"
    (sweep / "runs/m/s/Offline-b8-r1/.run_1.tmp-1").mkdir(parents=True)  # the lost attempt's
    (sweep / "logs/m/s").mkdir(parents=True)
    (sweep / "logs/m/s/Offline-b8-r1.log").write_text("old")
    (sweep / "runs/m/s/Offline-b8-r2").mkdir(parents=True)  # another cell: untouched

    unpack(pack(node), sweep, [sweep / "runs/m/s/Offline-b8-r1",
                               sweep / "logs/m/s/Offline-b8-r1.log"])
    cell = sweep / "runs/m/s/Offline-b8-r1"
    assert sorted(p.name for p in cell.iterdir()) == ["run_1"]
    assert (cell / "run_1/results.json").read_text() == "{}"
    assert (sweep / "logs/m/s/Offline-b8-r1.log").read_text() == "new"
    assert (sweep / "runs/m/s/Offline-b8-r2").is_dir()
    assert sorted(p.name for p in sweep.iterdir()) == ["logs", "runs"]  # no staging left


def test_a_cell_that_did_not_run_sends_nothing(tmp_path: Path):
    unpack(b"", tmp_path, [tmp_path / "runs/x"])
    assert list(tmp_path.iterdir()) == []
