"""The store on SQLite and on a real PostgreSQL server: recording, idempotency, repeat sets,
filters, the schema guard and whole-or-nothing jobs."""

from __future__ import annotations

import json
import os
import signal
import statistics

import pytest
from sqlalchemy import func, select, update

from quantmark.ground.errors import UserError
from quantmark.report.stats import figure_interval
from quantmark.store import store_schema as schema
from quantmark.store.job_facts import LATENCY_PERCENTILE
from quantmark.store.results_store import Store, open_store, store_url
from tests.conftest import run_python
from tests.quantmark.store.run_folders import (
    ACCURACY_RUN,
    EXAMPLE_SWEEP,
    T0,
    make_run,
    template,
    write_run,
)

DAY = 86400.0


def _rows(store: Store, table) -> int:
    with store.engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(table)).scalar_one()


def test_a_real_run_folder_becomes_one_point_with_its_environment(store_url):
    run = (EXAMPLE_SWEEP / "runs" / "resnet50" / "ov-bf16" / "SingleStream-b1-r1" / "vm-ov-bf16"
           / "resnet50" / "SingleStream" / "performance" / "run_1")
    record = json.loads((run / "results.json").read_text())
    with open_store(store_url) as store:
        assert store.record(run) == 1
        [point] = store.points()
    assert (point.series.model, point.series.sut, point.series.scenario, point.series.metric) \
        == ("resnet50", "ov-bf16", "SingleStream", "latency_ms")
    assert point.value == record["summary"]["percentiles_ns"][LATENCY_PERCENTILE[
        "SingleStream"]] / 1e6
    assert (point.low, point.high, point.runs, point.valid) == (None, None, (point.value,), True)
    assert point.when == "2026-11-21T21:11:40Z" and point.version == "0.1.0"
    assert point.machine == "vm" and point.run_dir == str(run)
    env = point.environment
    assert env["machine.cpu_model"] == "AMD EPYC"
    assert env["machine.cpu_flags"] == "avx2,avx512f,avx512_vnni,avx512_bf16"
    assert env["machine.kernel"] == "6.18.44-fc-v445"
    assert env["software.openvino"] == "2026.4.1" and env["software.quantmark"] == "0.1.0"
    assert env["settings.threads"] == 0 and env["settings.batch_size"] == 1
    assert env["settings.workers"] == 1 and env["sut.threads"] == 2
    assert env["fingerprint.artifact_sha256"] == "ac653e463bc3bc8a"
    assert env["dataset.fingerprint"] == "0cfda8d9fe885848"
    assert not any("/tmp/" in str(value) for value in env.values()), "a path is no fact"


def test_recording_the_same_record_twice_adds_nothing(store_url, tmp_path):
    run = make_run(tmp_path / "results")
    with open_store(store_url) as store:
        assert store.record(run) == 1
        assert store.record(run) == 0
        assert store.record_file(run / "results.json") == "there"
        assert len(store.points()) == 1
        assert _rows(store, schema.records) == 1 and _rows(store, schema.jobs) == 1


def test_a_repeat_set_is_one_job_its_median_and_interval_of_the_valid_runs(store_url,
                                                                           tmp_path):
    values = [40.0, 44.0, 41.0, 90.0]
    runs = [make_run(tmp_path / "r", value=value, started_at=T0 + 60 * i,
                     repeat=(i + 1, 4, "set0001"), validity="INVALID" if value == 90 else "VALID",
                     disturbed=i == 1)
            for i, value in enumerate(values)]
    with open_store(store_url) as store:
        assert [store.record(run) for run in runs] == [1, 0, 0, 0]  # one job, grown run by run
        [point] = store.points()
    expected = figure_interval(values[:3])
    assert point.value == pytest.approx(statistics.median(values[:3]))
    assert (point.low, point.high) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert point.runs == (40.0, 44.0, 41.0) and point.left_out_runs == (90.0,)
    assert point.invalid_runs == 1 and point.valid and point.disturbed
    assert point.job_id == "set:set0001" and point.run_dir == str(runs[0].parent)
    assert point.when == "2026-11-21T21:11:40Z"  # the set's first run


def test_a_job_with_no_valid_run_has_no_figure_but_its_runs(store_url, tmp_path):
    run = make_run(tmp_path / "r", value=55.0, validity="INVALID")
    with open_store(store_url) as store:
        store.record(run)
        [point] = store.points()
    assert (point.value, point.valid, point.invalid_runs, point.left_out_runs) == \
        (None, False, 1, (55.0,))


def test_points_filter_and_come_ordered_by_series_then_time(store_url, tmp_path):
    made = [
        make_run(tmp_path / "a", sut="ort-fp32", value=30.0, started_at=T0 + 2 * DAY),
        make_run(tmp_path / "b", sut="ort-fp32", value=31.0, started_at=T0, host="pi5",
                 version="0.2.0"),
        make_run(tmp_path / "c", sut="ort-int8", value=20.0, started_at=T0 + DAY),
        make_run(tmp_path / "d", sut="ort-int8", scenario="Offline", value=300.0,
                 started_at=T0 + 3 * DAY),
    ]
    with open_store(store_url) as store:
        for run in made[:3]:
            store.record(run)
        store.record(made[3], tags=["nightly"])
        everything = store.points()
        assert [(p.series.sut, p.series.scenario, p.value) for p in everything] == [
            ("ort-fp32", "SingleStream", 31.0), ("ort-fp32", "SingleStream", 30.0),
            ("ort-int8", "Offline", 300.0), ("ort-int8", "SingleStream", 20.0)]
        assert [p.value for p in store.points(sut="ort-int8", scenario="SingleStream")] == [20.0]
        assert [p.value for p in store.points(machine="pi5")] == [31.0]
        assert [p.value for p in store.points(version="0.2.0")] == [31.0]
        assert [p.value for p in store.points(tag="nightly")] == [300.0]
        assert store.points(tag="nightly")[0].tags == ("nightly",)
        assert store.points(model="mobilenetv2") == []
        # dates are whole UTC days, both ends inclusive
        assert [p.value for p in store.points(since="2026-11-22")] == [30.0, 300.0, 20.0]
        assert [p.value for p in store.points(until="2026-11-22")] == [31.0, 20.0]
        assert [p.value for p in store.points(since="2026-11-22", until="2026-11-22")] == [20.0]
        assert store.count(sut="ort-fp32") == 2
        with pytest.raises(UserError, match="date 'last week': give YYYY-MM-DD"):
            store.points(since="last week")


def test_a_store_written_by_a_newer_schema_is_refused_in_one_line(store_url):
    with open_store(store_url) as store:
        with store.engine.begin() as connection:
            connection.execute(update(schema.schema_version).values(
                version=schema.current_version() + 1))
        where = store.where
    newest = schema.current_version()
    with pytest.raises(UserError) as refused:
        open_store(store_url)
    assert str(refused.value) == (f"{where} was written by a newer quantmark (schema "
                                  f"{newest + 1} > {newest}); upgrade quantmark or use another "
                                  "--store")
    assert "\n" not in str(refused.value)


def test_migrations_run_in_order_in_one_transaction(store_url, monkeypatch):
    steps = list(schema.MIGRATIONS)
    with open_store(store_url) as store:
        assert store.schema == schema.current_version() == len(steps)
    ran = []

    def step_2(connection):
        ran.append(2)
        connection.exec_driver_sql("CREATE TABLE planted (id INTEGER)")

    def step_3(connection):
        ran.append(3)
        raise RuntimeError("a migration step that fails")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, step_2, step_3])
    with pytest.raises(RuntimeError, match="fails"):
        open_store(store_url)
    assert ran == [2, 3]
    monkeypatch.setattr(schema, "MIGRATIONS", steps)
    with open_store(store_url) as store:  # still at its schema, and step_2's table rolled back
        assert store.schema == len(steps)
        with store.engine.connect() as connection:
            assert not connection.dialect.has_table(connection, "planted")


def test_an_error_inside_the_transaction_leaves_no_half_job(store_url, tmp_path, monkeypatch):
    good, bad = make_run(tmp_path / "a"), make_run(tmp_path / "b", started_at=T0 + 5)

    def fail(*_args):
        raise RuntimeError("killed between the job's rows and its figure")

    with open_store(store_url) as store:
        store.record(good)
        monkeypatch.setattr(Store, "_refresh_figure", fail)
        with pytest.raises(RuntimeError, match="killed"):
            store.record(bad)
        monkeypatch.undo()
        for table in (schema.jobs, schema.records, schema.figures):
            assert _rows(store, table) == 1, table.name
        assert store.record(bad) == 1  # nothing of it was there


def test_a_writer_killed_between_two_jobs_leaves_the_first_whole_and_no_second(store_url,
                                                                              tmp_path):
    first, second = make_run(tmp_path / "a"), make_run(tmp_path / "b", started_at=T0 + 5)
    child = run_python(f"""
        import os, signal
        from quantmark.store.results_store import Store, open_store
        store = open_store({store_url!r})
        store.record({str(first)!r})
        def die(*args):  # SIGKILL: no Python clean-up, no rollback from this side
            os.kill(os.getpid(), signal.SIGKILL)
        Store._refresh_figure = die
        store.record({str(second)!r})
        print("not killed")
        """, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    with open_store(store_url) as store:
        assert [p.value for p in store.points()] == [40.0]
        for table in (schema.jobs, schema.records, schema.figures):
            assert _rows(store, table) == 1, table.name
        with store.engine.connect() as connection:
            jobs_of_facts = connection.execute(
                select(func.count(schema.environment.c.job_id.distinct()))).scalar_one()
        assert jobs_of_facts == 1
        assert store.record(second) == 1


def test_the_store_url_comes_from_the_flag_then_the_environment_then_the_cache(
        tmp_path, monkeypatch):
    monkeypatch.delenv("QUANTMARK_STORE", raising=False)
    assert store_url().database == os.path.join(os.environ["QUANTMARK_CACHE"], "store",
                                                "results.sqlite")
    monkeypatch.setenv("QUANTMARK_STORE", str(tmp_path / "env.sqlite"))
    assert store_url().database == str(tmp_path / "env.sqlite")
    assert store_url("sqlite:///x.sqlite").database == "x.sqlite"
    assert store_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    monkeypatch.setenv("QUANTMARK_STORE", "off")
    with pytest.raises(UserError, match="store is off"):
        store_url()
    for bad, why in (("mysql://h/db", "PostgreSQL .* or SQLite"),
                     ("sqlite://", "in-memory SQLite store keeps nothing")):
        with pytest.raises(UserError, match=why):
            store_url(bad)


def test_a_file_that_is_no_database_is_one_line(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are notes, not a database\n" * 100)
    with pytest.raises(UserError) as refused:
        open_store(str(path))
    assert str(refused.value).startswith(f"cannot use the results store {path}: ")
    assert "\n" not in str(refused.value)


def test_records_of_every_kind_are_jobs_and_only_runs_have_figures(store_url, tmp_path):
    data = template("Offline")
    data["config"]["mode"] = "accuracy"
    data["accuracy"] = {"top1": 75.5}
    accuracy = write_run(tmp_path / "acc", data, ACCURACY_RUN)
    with open_store(store_url) as store:
        assert store.record(accuracy) == 1
        assert store.points() == []
        assert store.counts()["jobs"] == {"accuracy": 1}
        [job] = store.jobs_without_figures()
        assert json.loads(job["detail"]) == {"top1": 75.5}
