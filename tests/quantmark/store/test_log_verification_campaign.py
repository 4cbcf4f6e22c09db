"""Issue 43 item 4: no figure enters the store, a report or a comparison unchecked against
LoadGen's own logs. The user campaign's three findings, then bad input and faults: each is a
one-line refusal or a visible flag, with a nonzero exit wherever the figure would be wrong.

The folders are real runs (docs/example-sweep's records and LoadGen logs, rewritten to say a
known figure by ``run_folders.make_run``); the last test makes a real quick run end to end."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from quantmark import cli
from quantmark.commands.history import validity_text
from quantmark.report.loadgen_log import DETAIL_FILE, SUMMARY_FILE
from quantmark.store import job_facts, recording
from quantmark.store import store_schema as schema
from quantmark.store.results_store import open_store
from tests.conftest import run_cli
from tests.quantmark.store import backends
from tests.quantmark.store.run_folders import EXAMPLE_SWEEP, T0, make_run
from tests.report.loadgen_runs import cut_before, relog

postgres, store_url = backends.postgres, backends.store_url  # the two back ends
RATE = 183806.0  # the campaign's figure, samples/s


def perf(root: Path, host: str = "vm", sut: str = "ov-bf16") -> Path:
    return root / f"{host}-{sut}" / "resnet50" / "Offline" / "performance"


def repeat_set(root: Path, values: tuple[float, ...] = (RATE, 179000.0, 186500.0), *,
               set_id: str = "s1", start: float = T0, **kwargs: Any) -> list[Path]:
    """A repeat set of Offline runs a minute apart, its logs saying ``values``."""
    return [make_run(root, scenario="Offline", value=value, started_at=start + 60 * i,
                     repeat=(i + 1, len(values), set_id), **kwargs)
            for i, value in enumerate(values)]


def edit(run: Path, **summary: Any) -> None:
    """Edit the run's results.json summary (by hand, as the campaign did)."""
    data = json.loads((run / "results.json").read_text())
    data["summary"].update(summary)
    (run / "results.json").write_text(json.dumps(data, indent=1))


def times_ten(run: Path) -> None:
    said = json.loads((run / "results.json").read_text())["summary"]
    edit(run, samples_per_second=said["samples_per_second"] * 10,
         metric_value=said["metric_value"] * 10)


def store_import(capsys, store: str, *folders: Path) -> tuple[int, list[str]]:
    code = cli.main(["store", "import", *map(str, folders), "--store", store])
    return code, capsys.readouterr().out.splitlines()


def refusals(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("refused: ")]


def counts(lines: list[str]) -> str:
    return next(line for line in lines if " recorded (" in line)


def points(store: str) -> list[Any]:
    with open_store(store) as opened:
        return opened.points()


# ------------------------------------------------------------------------------- findings

def test_finding_1_store_import_refuses_an_edited_figure(tmp_path, capsys):
    """results.json x10 was recorded (1838060 samples/s, exit 0) though LoadGen's log in the
    same folder says 183806; history then showed the edited figure."""
    [run] = repeat_set(tmp_path / "results", (RATE,))
    times_ten(run)
    store = str(tmp_path / "s.sqlite")
    code, lines = store_import(capsys, store, tmp_path / "results")
    assert code == 1
    [refused] = refusals(lines)
    assert "samples/s 1838060, LoadGen's 183806" in refused and str(run) in refused
    assert counts(lines).startswith("0 jobs recorded (0 records), 0 already there, 1 refused")
    assert points(store) == []
    assert cli.main(["history", "--store", store]) == 1  # nothing recorded: nothing shown
    assert "1838060" not in capsys.readouterr().out


def test_finding_2_a_changed_copy_of_a_repeat_set_is_refused_not_merged(tmp_path, capsys):
    """A changed copy of a set joined the original's job (139950 [134574, 143740] became
    570169 [119997, 1159038]) and the import said "0 jobs recorded (3 records)"."""
    original = tmp_path / "original"
    repeat_set(original)
    store = str(tmp_path / "s.sqlite")
    assert store_import(capsys, store, original)[0] == 0
    [before] = points(store)
    changed = tmp_path / "changed"  # the same set, other runs: its logs say x4
    repeat_set(changed, tuple(4 * v for v in (RATE, 179000.0, 186500.0)), start=T0 + 3600)
    code, lines = store_import(capsys, store, changed)
    assert code == 1 and len(refusals(lines)) == 3
    first = refusals(lines)[0]
    assert "the store already holds its repeat set (set:s1" in first
    assert f"repeat 1 is already recorded from {perf(original)}/run_1/results.json" in first
    assert "figure 183806 there, 735224 here" in first
    assert counts(lines).startswith("0 jobs recorded (0 records), 0 already there, 3 refused")
    [after] = points(store)
    assert (after.value, after.low, after.high, after.runs) == \
        (before.value, before.low, before.high, before.runs)


def test_finding_3_compare_reads_loadgens_figures_and_flags_an_edited_one(tmp_path, capsys):
    """An edited figure gave "B is faster: 6.45x" while report showed the logged one."""
    a, b = tmp_path / "a", tmp_path / "b"
    repeat_set(a, (1000.0, 1010.0, 990.0))
    runs = repeat_set(b, (1005.0, 995.0, 1000.0), sut="ov-int8")
    for run in runs:
        times_ten(run)
    code = cli.main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    assert code == 1
    assert "no measurable difference: B is 1.00x A" in out and "faster" not in out
    flags = [line for line in out.splitlines() if line.startswith("B: ")]
    assert len(flags) == 3 and all("results.json disagrees with LoadGen's logs" in f
                                   and "compare used LoadGen's figure" in f for f in flags)


def test_finding_3_a_run_only_loadgen_calls_invalid_gets_no_verdict_unsaid(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    repeat_set(a, (1000.0, 1010.0, 990.0))
    runs = repeat_set(b, (3000.0, 3050.0, 2990.0), sut="ov-int8")
    relog(runs[1], result_validity="INVALID", result_min_duration_met=False)
    code = cli.main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    assert code == 1
    assert "B: left out vm-ov-int8/resnet50/Offline/performance/run_2: INVALID: min duration " \
           "not met" in out
    assert "validity VALID, LoadGen's INVALID" in out
    for run in runs:  # every run INVALID by its logs: no verdict at all, one line
        relog(run, result_validity="INVALID", result_min_duration_met=False)
    proc = run_cli("compare", str(a), str(b), timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "every one is INVALID or incomplete" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------- bad input and faults

@pytest.mark.parametrize(("fault", "named"), [
    ("edited summary", "mlperf_log_summary.txt: says Samples per second"),
    ("missing detail log", "mlperf_log_detail.txt: missing"),
    ("truncated detail log", "mlperf_log_detail.txt: it stops before LoadGen's results"),
    ("empty detail log", "mlperf_log_detail.txt: empty"),
    ("a line that is not LoadGen's", "line(s) are not LoadGen JSON"),
    ("cut summary", "mlperf_log_summary.txt: cut off"),
])
def test_logs_that_cannot_back_the_record_are_refused_by_the_store(tmp_path, capsys, fault,
                                                                   named):
    [run] = repeat_set(tmp_path / "results", (RATE,))
    detail, summary = run / DETAIL_FILE, run / SUMMARY_FILE
    if fault == "edited summary":
        summary.write_text(summary.read_text().replace(f"Samples per second: {RATE}",
                                                       f"Samples per second: {RATE * 10}"))
    elif fault == "missing detail log":
        detail.unlink()
    elif fault == "truncated detail log":
        cut_before(detail, "result_validity", extra=20)
    elif fault == "empty detail log":
        detail.write_text("")
    elif fault == "a line that is not LoadGen's":
        detail.write_text(detail.read_text().replace(":::MLLOG {\"key\": \"result_validity\"",
                                                     ":::MLLOG {garbage} {\"key\": \"x\""))
    else:
        summary.write_text(summary.read_text()[:200])
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and named in refused and "it says VALID" in refused, refused
    assert points(str(tmp_path / "s.sqlite")) == []


@pytest.mark.parametrize(("change", "named"), [
    ({"validity": "INVALID"}, "validity INVALID, LoadGen's VALID"),
    ({"scenario": "SingleStream"}, "scenario SingleStream, LoadGen's Offline"),
    ({"loadgen_version": "5.1.0"}, "LoadGen version 5.1.0, LoadGen's 6.0.17"),
    ({"query_count": 2}, "queries 2, LoadGen's 1"),  # Offline is one query
])
def test_an_edited_record_field_is_refused_naming_it(tmp_path, capsys, change, named):
    [run] = repeat_set(tmp_path / "results", (RATE,))
    edit(run, **change)
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and named in refused, refused


def test_invalid_in_the_logs_but_valid_in_results_json_is_refused(tmp_path, capsys):
    [run] = repeat_set(tmp_path / "results", (RATE,))
    relog(run, result_validity="INVALID", result_min_duration_met=False)
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and "validity VALID, LoadGen's INVALID" in refused


def test_an_edited_latency_percentile_is_refused(tmp_path, capsys):
    """A SingleStream job's figure in the store is its p90."""
    run = make_run(tmp_path / "results", value=40.0)
    data = json.loads((run / "results.json").read_text())
    edit(run, percentiles_ns={**data["summary"]["percentiles_ns"], "90.00": 4_000_000})
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and "p90 latency (ns) 4000000, LoadGen's 40000000" in refused


def test_a_record_of_a_scenario_loadgen_did_not_run_is_refused(tmp_path, capsys):
    """An Offline run's logs beside a record of a SingleStream run."""
    single = make_run(tmp_path / "results", value=40.0)
    offline = make_run(tmp_path / "other", scenario="Offline", value=RATE)
    for name in (DETAIL_FILE, SUMMARY_FILE):
        shutil.copyfile(offline / name, single / name)
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and "its config asks for SingleStream, LoadGen ran Offline" in refused


def test_an_accuracy_record_beside_performance_logs_is_refused(tmp_path, capsys):
    [run] = repeat_set(tmp_path / "results", (RATE,))
    data = json.loads((run / "results.json").read_text())
    data["config"]["mode"] = "accuracy"
    (run / "results.json").write_text(json.dumps(data))
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    [refused] = refusals(lines)
    assert code == 1 and "asks for accuracy mode, LoadGen ran PerformanceOnly" in refused


def test_logs_swapped_between_two_runs_are_named_by_their_start(tmp_path, capsys):
    runs = repeat_set(tmp_path / "results", (RATE, RATE))  # the same figure: only the start
    for name in (DETAIL_FILE, SUMMARY_FILE):
        first = (runs[0] / name).read_bytes()
        (runs[0] / name).write_bytes((runs[1] / name).read_bytes())
        (runs[1] / name).write_bytes(first)
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), tmp_path / "results")
    assert code == 1 and len(refusals(lines)) == 2
    assert all("(the logs of another run)" in line for line in refusals(lines))


def test_a_folder_copied_from_another_machine_is_checked_the_same(tmp_path, capsys):
    home, copy = tmp_path / "home", tmp_path / "from-pi5"
    repeat_set(home, host="pi5")
    shutil.copytree(home, copy)
    store = str(tmp_path / "s.sqlite")
    code, lines = store_import(capsys, store, copy)  # an intact copy: recorded
    assert code == 0 and counts(lines).startswith("1 job recorded (3 records), 0 already")
    code, lines = store_import(capsys, store, home)  # the same runs: already there
    assert code == 0 and counts(lines).startswith("0 jobs recorded (0 records), 3 already")
    times_ten(perf(copy, host="pi5") / "run_2")
    code, lines = store_import(capsys, str(tmp_path / "fresh.sqlite"), copy)
    assert code == 1 and len(refusals(lines)) == 1
    assert counts(lines).startswith("1 job recorded (2 records), 0 already there, 1 refused")


def test_duplicated_runs_count_once_and_compare_flags_the_copy(tmp_path, capsys):
    runs = repeat_set(tmp_path / "b", (3000.0, 3030.0, 2970.0), sut="ov-int8")
    shutil.copytree(runs[0], runs[0].parent / "run_4")  # the same run, twice in the folder
    store = str(tmp_path / "s.sqlite")
    code, lines = store_import(capsys, store, tmp_path / "b")
    assert code == 0 and counts(lines).startswith("1 job recorded (3 records), 1 already there")
    [point] = points(store)
    assert len(point.runs) == 3
    repeat_set(tmp_path / "a", (1000.0, 1010.0, 990.0))
    code = cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 1 and "B is faster: 3.00x A" in out
    assert "is a copy of" in out and "(the same LoadGen test)" in out


def test_only_one_changed_run_of_a_copy_is_refused_and_the_counts_are_true(tmp_path, capsys):
    original, copy = tmp_path / "original", tmp_path / "copy"
    repeat_set(original)
    shutil.copytree(original, copy)
    run_2 = perf(copy) / "run_2"
    relog(run_2, result_samples_per_second=999.0)  # logs and record rewritten together
    edit(run_2, samples_per_second=999.0, metric_value=999.0)
    store = str(tmp_path / "s.sqlite")
    store_import(capsys, store, original)
    code, lines = store_import(capsys, store, copy)
    assert code == 1 and len(refusals(lines)) == 1
    assert "figure 179000 there, 999 here" in refusals(lines)[0]
    assert counts(lines).startswith("0 jobs recorded (0 records), 2 already there, 1 refused")


def test_a_run_joining_a_stored_set_from_another_machine_is_refused(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    repeat_set(tmp_path / "a", (RATE, 179000.0))
    make_run(tmp_path / "b", scenario="Offline", value=180000.0, started_at=T0 + 120,
             repeat=(3, 2, "s1"), host="pi5")
    store_import(capsys, store, tmp_path / "a")
    code, lines = store_import(capsys, store, tmp_path / "b")
    [refused] = refusals(lines)
    assert code == 1 and "the set ran on vm, this run on pi5" in refused


def test_a_later_run_of_a_stored_set_is_counted_as_joining_it(tmp_path, capsys):
    runs = repeat_set(tmp_path / "results")
    store = str(tmp_path / "s.sqlite")
    aside = tmp_path / "aside"
    shutil.move(runs[2], aside)
    store_import(capsys, store, tmp_path / "results")
    shutil.move(aside, runs[2])
    code, lines = store_import(capsys, store, tmp_path / "results")
    assert code == 0 and counts(lines).startswith(
        "0 jobs recorded (0 records), 1 run added to jobs recorded before, 2 already there")


def test_recording_a_run_whose_record_disagrees_costs_a_warning_not_the_run(
        tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.setattr(logging.getLogger("quantmark"), "propagate", True)
    monkeypatch.setenv("QUANTMARK_STORE", str(tmp_path / "s.sqlite"))
    [run] = repeat_set(tmp_path / "results", (RATE,))
    times_ten(run)
    try:
        with caplog.at_level(logging.WARNING, logger="quantmark.store.recording"):
            assert recording.record(run) == 0
    finally:
        recording._close_all()
    [warning] = {r.getMessage() for r in caplog.records}  # (run.py's handler may echo it)
    assert f"{run}: results.json disagrees with LoadGen's logs (official metric value " \
           "1838060, LoadGen's 183806" in warning and "; not recorded;" in warning
    assert points(str(tmp_path / "s.sqlite")) == []


def test_report_shows_loadgens_figure_flags_the_record_and_exits_1(tmp_path, capsys):
    [run] = repeat_set(tmp_path / "results", (RATE,))
    times_ten(run)
    code = cli.main(["report", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert code == 1
    [flag] = [line for line in out.splitlines() if line.startswith("not LoadGen's: ")]
    assert "results.json disagrees with LoadGen's logs (official metric value 1838060, " \
           "LoadGen's 183806" in flag and "the figures shown are LoadGen's" in flag
    [row] = csv.DictReader(io.StringIO((tmp_path / "results" / "report.csv").read_text()))
    assert (row["metric_value"], row["samples_per_s"]) == ("183806", "183806.00")
    markdown = (tmp_path / "results" / "report.md").read_text()
    assert "results.json disagree with LoadGen's logs" in markdown


def test_the_characterization_flags_the_record_and_exits_1(tmp_path, capsys):
    repeat_set(tmp_path / "results", (RATE, 179000.0, 186500.0))
    times_ten(perf(tmp_path / "results") / "run_1")
    code = cli.main(["report", str(tmp_path / "results"), "--output", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1
    [flag] = [line for line in out.splitlines() if line.startswith("not LoadGen's: ")]
    assert "the report shows LoadGen's figures" in flag and "run_1" in flag


class _OldImport:
    """What quantmark did before it checked records: the record's own summary, unchecked."""

    def __init__(self, *_args: Any) -> None:
        pass

    def check(self, *_args: Any) -> _OldImport:
        return self

    def record(self, record: Any) -> Any:
        return record


def test_figures_a_schema_1_store_recorded_unchecked_are_flagged_until_checked(
        store_url, tmp_path, capsys, monkeypatch):
    runs = repeat_set(tmp_path / "results")
    times_ten(runs[0])
    with monkeypatch.context() as old:  # the edited run, recorded by an older quantmark
        old.setattr(job_facts, "verify", _OldImport)
        with open_store(store_url) as store:
            store.record(tmp_path / "results")
            with store.engine.begin() as connection:  # what migrating schema 1 leaves
                connection.execute(update(schema.records).values(checked=None))
    [point] = points(store_url)
    assert point.unchecked_runs == 3
    assert validity_text(point) == "VALID, UNCHECKED (3 not checked against LoadGen's logs)"
    assert cli.main(["history", "--store", store_url]) == 0
    out = capsys.readouterr().out
    assert "1 job(s) were recorded before the store checked figures against LoadGen's logs " \
           f"(UNCHECKED): their figures are results.json's; run.py store import " \
           f"{perf(tmp_path / 'results')} checks them" in out
    code, lines = store_import(capsys, store_url, tmp_path / "results")
    assert code == 1 and len(refusals(lines)) == 1  # the edited one: refused, still flagged
    assert "0 jobs recorded (0 records), 2 already there, 1 refused" in counts(lines)
    [point] = points(store_url)
    assert point.unchecked_runs == 1
    from quantmark.store.dashboard import to_html

    assert "UNCHECKED" in to_html([point], [], tmp_path)


def test_a_schema_1_store_migrates_with_its_records_unchecked(store_url, monkeypatch):
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
    with open_store(store_url) as store:
        assert store.schema == 1
        with store.engine.begin() as connection:
            connection.exec_driver_sql(
                "INSERT INTO jobs (id, job_key, kind, folder, started_at, recorded_at, version,"
                " machine, detail) VALUES (1, 'k', 'run', '/f', 1.0, 1.0, '0.1.0', 'vm', '{}')")
            connection.exec_driver_sql(
                "INSERT INTO records (job_id, sha256, path, kind, started_at, disturbed) "
                "VALUES (1, 'abc', '/f/results.json', 'run', 1.0, false)")
    monkeypatch.undo()
    with open_store(store_url) as store:
        assert store.schema == schema.current_version() == 2
        with store.engine.connect() as connection:
            checked = connection.execute(schema.records.select()).mappings().one()["checked"]
    assert checked is None


def test_the_checked_in_example_sweep_is_all_loadgens(tmp_path, capsys):
    code, lines = store_import(capsys, str(tmp_path / "s.sqlite"), EXAMPLE_SWEEP)
    assert code == 0 and refusals(lines) == []
    assert counts(lines).startswith("200 jobs recorded (200 records), 0 already there")


# ------------------------------------------------------------------------ a real quick run

@pytest.mark.slow
def test_a_real_quick_repeat_set_edited_after_the_run(tmp_path, trivial_plugin_path,
                                                       quantmark_cache, capsys):
    """``run.py --repeats 3`` (the trivial plugin SUT, quick, 1 s runs), recorded by the run
    itself; then a copy with one results.json x10: import refuses it, compare and report
    show LoadGen's figure with the flag, exit 1."""
    conf = tmp_path / "user.conf"
    conf.write_text("*.*.min_duration = 1000\n")
    out, store = tmp_path / "results", str(tmp_path / "s.sqlite")
    env = {"PYTHONPATH": str(trivial_plugin_path), "QUANTMARK_CACHE": str(quantmark_cache),
           "QUANTMARK_STORE": store}
    proc = run_cli("--scenario", "Offline", "--sut", "trivial-fp32", "--model", "mobilenetv2",
                   "--user-conf", str(conf), "--repeats", "3", "--output", str(out), env=env,
                   timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [before] = points(store)  # recorded by the run, every run checked
    assert before.unchecked_runs == 0 and len(before.runs) + before.invalid_runs == 3
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    run_1 = next(edited.rglob("run_1"))
    said = json.loads((run_1 / "results.json").read_text())["summary"]["samples_per_second"]
    times_ten(run_1)
    code, lines = store_import(capsys, str(tmp_path / "fresh.sqlite"), edited)
    [refused] = refusals(lines)
    assert code == 1 and f"LoadGen's {said:.7g}" in refused
    code, lines = store_import(capsys, store, out)  # the run recorded itself
    assert code == 0 and counts(lines).startswith("0 jobs recorded (0 records), 3 already")
    assert cli.main(["compare", str(out), str(edited)]) == 1
    compared = capsys.readouterr().out
    assert "B is 1.00x A" in compared and "results.json disagrees" in compared
    assert cli.main(["report", str(edited)]) == 1
    assert f"{said:.2f} samples/s" in capsys.readouterr().out
