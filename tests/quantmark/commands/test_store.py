"""``run.py store import`` and ``run.py store info`` on SQLite and a real PostgreSQL server:
the checked-in example sweep and a results folder, twice, without duplicates."""

from __future__ import annotations

import pytest

from quantmark import cli
from quantmark.store import store_schema as schema
from quantmark.store.results_store import open_store
from tests.conftest import run_cli
from tests.quantmark.store import backends
from tests.quantmark.store.run_folders import EXAMPLE_SWEEP, T0, make_run

postgres, store_url = backends.postgres, backends.store_url  # the two back ends


def test_importing_the_example_sweep_twice_adds_it_once(store_url, capsys):
    assert cli.main(["store", "import", str(EXAMPLE_SWEEP), "--store", store_url]) == 0
    first = capsys.readouterr().out
    assert "200 jobs recorded (200 records), 0 already there" in first
    assert cli.main(["store", "import", str(EXAMPLE_SWEEP), "--store", store_url]) == 0
    assert "0 jobs recorded (0 records), 200 already there" in capsys.readouterr().out
    with open_store(store_url) as store:
        counts = store.counts()
        points = store.points()
    assert counts["jobs"] == {"accuracy": 40, "sweep-cell": 160} and counts["records"] == 200
    assert len(points) == 160 and counts["series"] == 80  # two repeats a series
    assert {p.version for p in points} == {"0.1.0"} and {p.machine for p in points} == {"vm"}


def test_a_results_folder_with_a_repeat_set_imports_as_one_job_twice_over(store_url, tmp_path,
                                                                          capsys, monkeypatch):
    results = tmp_path / "results"
    for index in (1, 2, 3):
        make_run(results, value=40.0 + index, started_at=T0 + index, repeat=(index, 3, "s1"))
    make_run(results, sut="ort-int8", value=20.0)
    monkeypatch.setenv("QUANTMARK_STORE", store_url)  # the environment names the store
    assert cli.main(["store", "import", str(results)]) == 0
    assert "2 jobs recorded (4 records), 0 already there" in capsys.readouterr().out
    assert cli.main(["store", "import", str(results), "--tag", "baseline"]) == 0
    assert "0 jobs recorded (0 records), 4 already there" in capsys.readouterr().out
    with open_store(store_url) as store:
        assert [(p.series.sut, p.value, p.tags) for p in store.points()] == [
            ("ort-int8", 20.0, ("baseline",)), ("ov-bf16", 42.0, ("baseline",))]
    assert cli.main(["store", "info"]) == 0
    info = capsys.readouterr().out
    assert "jobs: 2 (1 repeat-set, 1 run)" in info and "records: 4" in info
    assert "series: 2" in info and f"schema: {schema.current_version()}" in info


def test_the_flag_wins_over_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QUANTMARK_STORE", str(tmp_path / "env.sqlite"))
    run = make_run(tmp_path / "results")
    assert cli.main(["store", "import", str(run), "--store", str(tmp_path / "flag.sqlite")]) == 0
    assert f"in {tmp_path / 'flag.sqlite'}" in capsys.readouterr().out
    assert not (tmp_path / "env.sqlite").exists()


def test_an_unreadable_record_is_left_out_and_named_exit_1(tmp_path, capsys):
    make_run(tmp_path / "results")
    broken = tmp_path / "results" / "other" / "results.json"
    broken.parent.mkdir()
    broken.write_text("{cut short")
    code = cli.main(["store", "import", str(tmp_path / "results"), "--store",
                     str(tmp_path / "s.sqlite")])
    out = capsys.readouterr().out
    assert code == 1 and "left out:" in out and "1 unreadable (left out)" in out
    assert "1 job recorded (1 records)" in out


@pytest.mark.parametrize("args", [["store", "import", "{tmp}/nowhere"],
                                  ["store", "import", "{tmp}"],
                                  ["store", "info", "--store", "mysql://h/db"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args):
    (tmp_path / "notes.txt").write_text("not results")
    proc = run_cli(*[a.format(tmp=tmp_path) for a in args], timeout=120,
                   env={"QUANTMARK_STORE": str(tmp_path / "s.sqlite")})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
