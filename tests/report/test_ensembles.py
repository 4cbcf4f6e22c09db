"""The report's Ensembles section. "Members alone, combined" is computed from known inputs
(latencies add, throughputs combine per sample). Ratios point the right way (above 1x: the
ensemble is faster, for latency and throughput alike). The accuracy gain over the best member is
paired per sample. A results folder with ensembles renders the section, its CSVs and its figure;
one without renders none of it, and ensemble rows leave the existing tables working ("n/a"
against FP32)."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import statistics
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Rectangle

from quantmark.ground.records import RunRecord
from quantmark.report import ensemble_figure, ensembles, figures
from quantmark.report.characterize import baseline, family, load, variant
from quantmark.report.ensemble_tables import SPEED_HEADER, markdown, speed_cells
from quantmark.report.intervals import speedup_text
from quantmark.report.stats import accuracy_change
from quantmark.report.sweep_report import write
from tests.report.synthetic import OFFLINE, SINGLE, accuracy_run, config, study

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs/example-sweep/runs/resnet50/torch-fp32"
SINGLE_DETAIL = (EXAMPLE / "SingleStream-b1-r1/vm-torch-fp32/resnet50/SingleStream/performance"
                 / "run_1/mlperf_log_detail.txt")
ACCURACY_DETAIL = EXAMPLE / "accuracy/vm-torch-fp32/resnet50/Offline/accuracy/mlperf_log_detail.txt"
MEMBERS = ("efficientnet-lite0@ort-int8", "efficientnet-lite1@ov-int8",
           "efficientnet-lite2@tflite-int8")
NAME = "+".join(MEMBERS)
MS = 1e6
# SingleStream latencies (ms) of three repeats; the members' sum per repeat: 60, 61, 61.9
ALONE = {MEMBERS[0]: [10.0, 11.0, 10.5], MEMBERS[1]: [20.0, 21.0, 20.4],
         MEMBERS[2]: [30.0, 29.0, 31.0]}
COMBINED_MS = [60.0, 61.0, 61.9]
SEQUENTIAL = [60.5, 60.2, 61.5]  # within the noise of the members run one after another
CONCURRENT = [35.0, 36.0, 35.5]  # clearly faster
RSS = {MEMBERS[0]: 300.0, MEMBERS[1]: 350.0, MEMBERS[2]: 400.0,
       "ensemble-sequential": 700.0, "ensemble-concurrent": 800.0}
SHARES = {"ensemble-sequential": (0.17, 0.33, 0.5), "ensemble-concurrent": (0.3, 0.3, 0.4)}


def as_ensemble(results: dict, sut: str, accuracy: dict | None = None) -> dict:
    """A member-shaped results.json turned into an ensemble run's, as the ensemble SUT writes
    it (the fields the report reads)."""
    mode = "concurrent" if "concurrent" in sut else "sequential"
    parts = [{"member": m, "model": m.split("@")[0], "sut": m.split("@")[1], "calls": 10,
              "busy_s": share, "time_share": share}
             for m, share in zip(MEMBERS, SHARES[sut], strict=True)]
    results["config"].update(sut=sut, model=NAME, ensemble=",".join(MEMBERS), ensemble_mode=mode,
                             ensemble_combine="mean")
    results["sut"] = {"name": sut, "framework": "ensemble", "precision": "ensemble",
                      "device": "cpu", "fp32_baseline": None}
    results["model"] = {"name": NAME, "members": list(MEMBERS)}
    results["ensemble"] = {"name": NAME, "mode": mode, "combine": "mean", "members": parts,
                           **({"accuracy": accuracy} if accuracy else {})}
    return results


def member(label: str, values: list[float], scenario=SINGLE, **kwargs):
    model, _, sut = label.rpartition("@")
    made = config(sut, values, scenario=scenario, **kwargs)
    made.model = model
    for run in made.runs:
        run.results.config["model"] = model
        run.results.memory = {"peak_rss_mb": RSS[label]}
    return made


def ensemble(sut: str, values: list[float], scenario=SINGLE):
    made = config(sut, values, scenario=scenario)
    made.model = NAME
    for run in made.runs:
        run.results = RunRecord.of(as_ensemble(run.results.to_dict(), sut))
        run.results.memory = {"peak_rss_mb": RSS[sut]}
    return made


def latency_study():
    return study(*(member(m, [v * MS for v in ALONE[m]]) for m in MEMBERS),
                 ensemble("ensemble-sequential", [v * MS for v in SEQUENTIAL]),
                 ensemble("ensemble-concurrent", [v * MS for v in CONCURRENT]))


def test_members_combined_add_their_latencies_repeat_by_repeat():
    made = latency_study()
    found = ensembles.combined(made.configs[:3])
    assert found is not None and found.derived["paired"]
    assert found.metric_values() == pytest.approx([v * MS for v in COMBINED_MS])
    assert found.metric == pytest.approx(61.0 * MS)
    assert found.latency_metric


def test_members_combined_throughput_is_one_over_the_sum_of_times_per_sample():
    parts = [member(m, v, scenario=OFFLINE) for m, v in
             zip(MEMBERS, ([100.0, 50.0], [200.0, 100.0], [400.0, 200.0]), strict=True)]
    study(*parts)
    found = ensembles.combined(parts)
    # 1 / (1/100 + 1/200 + 1/400) = 400/7; each repeat on its own
    assert found.metric_values() == pytest.approx([400 / 7, 200 / 7])
    assert not found.latency_metric


def test_members_without_shared_repeats_combine_their_medians_without_an_interval():
    parts = [member(m, [v * MS for v in ALONE[m]], paired=False) for m in MEMBERS]
    study(*parts)
    found = ensembles.combined(parts)
    assert not found.derived["paired"]
    assert found.metric_values() == pytest.approx([(10.5 + 20.4 + 30.0) * MS])
    assert found.derived["metric_interval"].low is None  # one value: no interval


def test_latency_ratios_are_combined_over_ensemble_so_above_one_is_faster():
    table = ensembles.speed_tables(latency_study())[0]
    rows = {r.label: r for r in table.rows}
    assert list(rows) == [f"{m} alone" for m in MEMBERS] + [
        ensembles.COMBINED, "ensemble-sequential", "ensemble-concurrent"]
    concurrent, sequential = rows["ensemble-concurrent"], rows["ensemble-sequential"]
    expected = statistics.median(c / e for c, e in zip(COMBINED_MS, CONCURRENT, strict=True))
    assert concurrent.vs_combined.paired
    assert concurrent.vs_combined.point == pytest.approx(expected)
    assert concurrent.vs_combined.point > 1.6 and concurrent.vs_combined.verdict == "faster"
    assert sequential.vs_combined.verdict == "no measurable difference"
    assert speed_cells(sequential)[SPEED_HEADER.index("× members combined")].startswith(
        "no measurable difference (")
    versus = statistics.median(s / c for s, c in zip(SEQUENTIAL, CONCURRENT, strict=True))
    assert concurrent.vs_sequential.point == pytest.approx(versus)
    assert sequential.vs_sequential == ensembles.BASELINE
    assert rows[ensembles.COMBINED].vs_combined == ensembles.BASELINE


def test_throughput_ratios_are_ensemble_over_combined_so_above_one_is_faster():
    values = ([100.0, 104.0, 98.0], [200.0, 205.0, 196.0], [400.0, 390.0, 410.0])
    made = study(*(member(m, v, scenario=OFFLINE) for m, v in zip(MEMBERS, values, strict=True)),
                 ensemble("ensemble-sequential", [50.0, 52.0, 49.0], scenario=OFFLINE),
                 ensemble("ensemble-concurrent", [90.0, 93.0, 91.0], scenario=OFFLINE))
    rows = {r.label: r for r in ensembles.speed_tables(made)[0].rows}
    combined = rows[ensembles.COMBINED].config.metric_values()
    expected = statistics.median(e / c for e, c in zip([90.0, 93.0, 91.0], combined,
                                                       strict=True))
    assert rows["ensemble-concurrent"].vs_combined.point == pytest.approx(expected)
    assert rows["ensemble-concurrent"].vs_combined.verdict == "faster"  # ~1.6x the samples/s
    assert rows["ensemble-sequential"].vs_combined.verdict == "slower"  # 50 < ~57 samples/s
    assert rows["ensemble-sequential"].vs_combined.point < 1


def test_peak_rss_and_time_shares():
    rows = {r.label: r for r in ensembles.speed_tables(latency_study())[0].rows}
    assert rows[ensembles.COMBINED].peak_rss_mb == 1050.0
    assert rows["ensemble-sequential"].rss_vs_members == pytest.approx(700 / 1050)
    assert rows[f"{MEMBERS[2]} alone"].time_share == {"ensemble-sequential": 0.5,
                                                      "ensemble-concurrent": 0.4}
    cells = dict(zip(SPEED_HEADER, speed_cells(rows[f"{MEMBERS[0]} alone"]), strict=True))
    assert cells["time share"] == "sequential 17%, concurrent 30%"
    assert cells["peak RSS MB"] == "300"
    cells = dict(zip(SPEED_HEADER, speed_cells(rows["ensemble-concurrent"]), strict=True))
    assert cells["RSS × members"] == "0.76×"


def test_a_member_never_measured_alone_leaves_no_combined_row_and_no_ratio():
    made = study(member(MEMBERS[0], [10 * MS]), member(MEMBERS[1], [20 * MS]),
                 ensemble("ensemble-sequential", [60 * MS]))
    rows = {r.label: r for r in ensembles.speed_tables(made)[0].rows}
    assert rows[f"{MEMBERS[2]} alone"].config is None
    assert speed_cells(rows[f"{MEMBERS[2]} alone"])[2] == "not measured"
    assert rows[ensembles.COMBINED].config is None
    assert rows["ensemble-sequential"].vs_combined is None


def test_ensemble_rows_keep_the_existing_tables_working():
    made = latency_study()
    sequential = made.configs[3]
    assert (family("ensemble-sequential"), variant("ensemble-sequential")) == (
        "ensemble", "sequential")
    assert (family("ensemble-concurrent-vote"), variant("ensemble-concurrent-vote")) == (
        "ensemble", "concurrent-vote")
    assert baseline(sequential.first) == ""
    assert sequential.derived["speedup_vs_fp32"] is None
    assert speedup_text(sequential, "speedup_vs_fp32") == "n/a"
    assert speedup_text(sequential, "speedup_vs_best_fp32") == "n/a"
    assert speedup_text(made.configs[0], "speedup_vs_fp32") == "-"  # a member: no FP32 here
    assert figures.all_figures(made)  # every figure keyed by family still draws


# A results folder as the runner writes it: every member alone and both ensembles, SingleStream,
# three repeats (LoadGen's real detail log, its official metric set to the values above), and
# the sequential ensemble's accuracy run with each member's answers in members/<member>/.

LABELS = [n % 10 for n in range(20)]
WRONG = {MEMBERS[0]: {0, 1, 2, 3, 4, 5}, MEMBERS[1]: {0, 1, 2, 6, 7}, MEMBERS[2]: {0, 1, 8, 9},
         "ensemble": {0, 1}}  # top-1: 70, 75, 80 (the best) and 90


def predictions(who: str) -> list[int]:
    return [(label + 1) % 10 if n in WRONG[who] else label for n, label in enumerate(LABELS)]


def top1(who: str) -> float:
    return 100.0 * (len(LABELS) - len(WRONG[who])) / len(LABELS)


def correct(who: str) -> list[bool]:
    return [p == label for p, label in zip(predictions(who), LABELS, strict=True)]


def member_results(label: str, k: int, mode: str = "performance") -> dict:
    model, _, sut = label.rpartition("@")
    return {"config": {"sut": sut, "model": model, "batch_size": 1, "mode": mode,
                       "scenario": "SingleStream"},
            "sut": {"name": sut, "executed_precision": "int8"},
            "machine": {"hostname": "box"}, "settings": {"mode": "quick"}, "model": {},
            "repeat": {"index": k, "of": 3, "set": "s1"},
            "times": {"loadgen_ended_at": 1000.0 + k}, "memory": {"peak_rss_mb": RSS[label]},
            "dataset": {"builtin": False}}


def write_run(folder: Path, results: dict, latency_ms: float | None = None) -> None:
    """A run folder: a real LoadGen detail log (its official latency set) and results.json."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (SINGLE_DETAIL if latency_ms else ACCURACY_DETAIL).read_text()
    if latency_ms:
        text, count = re.subn(r'("key": "early_stopping_latency_ss", "value": )\d+',
                              rf"\g<1>{round(latency_ms * MS)}", text, count=1)
        assert count == 1
    (folder / "mlperf_log_detail.txt").write_text(text)
    (folder / "results.json").write_text(json.dumps(results))


def members_alone(root: Path) -> None:
    for label in MEMBERS:
        model, _, sut = label.rpartition("@")
        for k, value in enumerate(ALONE[label], start=1):
            write_run(root / f"box-{sut}" / model / "SingleStream/performance" / f"run_{k}",
                      member_results(label, k), value)
    own = root / "box-tflite-int8/efficientnet-lite2/SingleStream/accuracy"  # the best's own
    accuracy_run(own, predictions(MEMBERS[2]), LABELS, builtin=False)
    write_run(own, {**member_results(MEMBERS[2], 1, "accuracy"), "accuracy": {
        "top1": top1(MEMBERS[2])}})


def ensemble_accuracy() -> dict:
    classes = {m: predictions(m) for m in MEMBERS}
    pairs = {f"{a} vs {b}": 100.0 * sum(x == y for x, y in zip(classes[a], classes[b],
                                                               strict=True)) / len(LABELS)
             for i, a in enumerate(MEMBERS) for b in MEMBERS[i + 1:]}
    everyone = sum(len(set(c)) == 1 for c in zip(*classes.values(), strict=True))
    return {"members": {m: {"top1": top1(m), "good": 0, "total": 20} for m in MEMBERS},
            "ensemble": {"top1": top1("ensemble"), "good": 18, "total": 20},
            "agreement": {"all": 100.0 * everyone / len(LABELS), "pairs": pairs},
            "combined_check": {"checked": 20, "mismatches": 0}}


def with_ensembles(root: Path) -> None:
    members_alone(root)
    for sut, values in (("ensemble-sequential", SEQUENTIAL), ("ensemble-concurrent", CONCURRENT)):
        for k, value in enumerate(values, start=1):
            results = as_ensemble(member_results(MEMBERS[0], k), sut)
            results["memory"] = {"peak_rss_mb": RSS[sut]}
            write_run(root / f"box-{sut}" / NAME / "SingleStream/performance" / f"run_{k}",
                      results, value)
    folder = root / f"box-ensemble-sequential/{NAME}/SingleStream/accuracy"
    results = as_ensemble(member_results(MEMBERS[0], 1, "accuracy"), "ensemble-sequential",
                          ensemble_accuracy())
    accuracy_run(folder, predictions("ensemble"), LABELS, builtin=False)
    write_run(folder, {**results, "accuracy": {"top1": top1("ensemble")}})
    for label in MEMBERS:  # each member's answers in the run, as the ensemble SUT keeps them
        accuracy_run(folder / "members" / label, predictions(label), LABELS, builtin=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ensembles")
    with_ensembles(root / "results")
    write([root / "results"], root / "report")
    return root


def test_the_gain_over_the_best_member_is_paired_per_sample(written):
    section = ensembles.build(load([written / "results"]))
    (table,) = section.accuracy
    run = table.runs[0]
    assert [table.member_top1(m) for m in table.members] == [70.0, 75.0, 80.0]
    assert table.own == {MEMBERS[0]: None, MEMBERS[1]: None, MEMBERS[2]: 80.0}
    assert table.best(run).name == MEMBERS[2] and table.gain(run) == pytest.approx(10.0)
    assert run.change == accuracy_change(correct(MEMBERS[2]), correct("ensemble"))
    assert run.change.delta_points == pytest.approx(10.0)
    assert (run.change.only_baseline_right, run.change.only_candidate_right) == (0, 2)
    assert run.paired_with == "its answers in this run"
    assert table.agreement()[0] == ("all members", 60.0)  # they differ on samples 2-9


def test_without_the_members_answers_the_gain_pairs_with_the_best_members_own_run(
        written, tmp_path):
    shutil.copytree(written / "results", tmp_path / "results")
    shutil.rmtree(next((tmp_path / "results").rglob("members")))
    (table,) = ensembles.build(load([tmp_path / "results"])).accuracy
    assert table.runs[0].paired_with == "its own accuracy run"
    assert table.runs[0].change.delta_points == pytest.approx(10.0)


def md_table(markdown_text: str, heading: str) -> dict[str, dict[str, str]]:
    """The first table under ``heading``, row label -> header -> cell."""
    lines = markdown_text.split(f"### {heading}", 1)[1].splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("|"))
    end = next((n for n, line in enumerate(lines) if n > start and not line.startswith("|")),
               len(lines))
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[start:end]]
    return {row[0]: dict(zip(rows[0], row, strict=True)) for row in rows[2:]}


def test_a_folder_with_ensembles_renders_the_section_csvs_and_figure(written):
    out = written / "report"
    text = (out / "report.md").read_text()
    assert "## Ensembles" in text
    speed = md_table(text, f"{NAME} — SingleStream — box")
    assert "— box\n\nOfficial metric: 90th percentile latency (early stopping).\n" in text
    assert list(speed) == [f"{m} alone" for m in MEMBERS] + [
        ensembles.COMBINED, "ensemble-sequential", "ensemble-concurrent"]
    assert speed[ensembles.COMBINED]["official metric [95%]"].startswith("61.000 ms [")
    assert speed["ensemble-concurrent"]["× members combined"].startswith("1.7")
    assert speed["ensemble-sequential"]["× members combined"].startswith("no measurable")
    accuracy = md_table(text, f"{NAME} — accuracy — box")
    assert accuracy[f"{MEMBERS[2]} (best)"]["top-1 % own run"] == "80.00"
    assert accuracy["ensemble-sequential"]["Δ vs best member"] == f"+10.00 pt ({MEMBERS[2]})"
    assert accuracy["ensemble-sequential"]["combine check"] == "0 of 20 differ"
    figure = out / "figures" / ensemble_figure.filename("box", NAME)
    assert figure.is_file() and figure.stat().st_size > 10_000
    assert f"](figures/{figure.name})" in text
    page = (out / "report.html").read_text()
    assert "<h2>Ensembles</h2>" in page and f"Ensemble — {NAME} (box)" in page
    assert page.count("<img ") == len(list((out / "figures").glob("*.png")))
    with open(out / "ensemble_speed.csv", newline="") as handle:
        rows = {r["row"]: r for r in csv.DictReader(handle)}
    assert float(rows[ensembles.COMBINED]["metric_median"]) == pytest.approx(61.0 * MS)
    assert rows["ensemble-concurrent"]["vs_combined_verdict"] == "faster"
    assert rows["ensemble-sequential"]["vs_sequential_verdict"] == "baseline"
    with open(out / "ensemble_accuracy.csv", newline="") as handle:
        found = {r["row"]: r for r in csv.DictReader(handle)}
    assert float(found["ensemble-sequential"]["gain_vs_best_member_pts"]) == pytest.approx(10)
    assert found["ensemble-sequential"]["paired_verdict"] in ("better", "no measurable change")
    assert found["all members"]["kind"] == "agreement"


def test_ensemble_rows_in_the_main_tables_say_n_a_against_fp32(written):
    out = written / "report"
    with open(out / "report.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["sut"].startswith("ensemble-")]
    assert {r["sut"] for r in rows} == {"ensemble-sequential", "ensemble-concurrent"}
    assert all(r["framework"] == "ensemble" and r["speedup_vs_fp32"] == "" for r in rows)
    main = md_table("### " + (out / "report.md").read_text().split(f"## {NAME} — SingleStream",
                                                                   1)[1], "")
    assert {main[s]["× fw FP32"] for s in ("ensemble-sequential", "ensemble-concurrent")} == {
        "n/a"}


def test_a_folder_without_ensembles_renders_no_section(tmp_path):
    members_alone(tmp_path / "results")
    written = write([tmp_path / "results"], tmp_path / "report")
    assert len(written.study.configs) == 3
    assert markdown(ensembles.build(written.study)) == []
    out = tmp_path / "report"
    assert "Ensembles" not in (out / "report.md").read_text()
    assert "Ensembles" not in (out / "report.html").read_text()
    assert not list(out.glob("ensemble_*.csv"))
    assert not list((out / "figures").glob("ensemble-*.png"))


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures drawn, kept open instead of rendered to PNG."""
    kept: list = []
    monkeypatch.setattr(figures, "_png", lambda fig: kept.append(fig) or b"png")
    yield kept
    for fig in kept:
        plt.close(fig)


def test_the_figure_draws_the_medians_and_the_top1(written, drawn):
    section = ensembles.build(load([written / "results"]))
    assert ensemble_figure.ensemble_figure(section, "box", NAME) is not None
    speed, accuracy = drawn[0].axes
    widths = [p.get_width() for p in speed.patches if isinstance(p, Rectangle)]
    assert widths == pytest.approx([10.5, 20.4, 30.0, 61.0, 60.5, 35.5])
    tops = [p.get_width() for p in accuracy.patches if isinstance(p, Rectangle)]
    assert tops == pytest.approx([70.0, 75.0, 80.0, 90.0])


def test_the_console_prints_the_speed_table(monkeypatch, tmp_path):
    from rich.console import Console

    from quantmark.commands import report as report_verb
    from quantmark.report import sweep_report

    made = latency_study()
    monkeypatch.setattr(sweep_report, "write", lambda folders, output: sweep_report.Written(
        made, []))
    buffer = io.StringIO()
    monkeypatch.setattr(report_verb, "console", Console(file=buffer, width=400, color_system=None))
    report_verb.characterization([str(tmp_path)], tmp_path)
    printed = buffer.getvalue()
    assert f"ensemble {NAME} — SingleStream — box" in printed
    line = next(line for line in printed.splitlines() if ensembles.COMBINED in line)
    assert "61.000 ms [" in line and "baseline" in line and "1050" in line
