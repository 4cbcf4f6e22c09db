"""The characterization's figures carry intervals: the metric is the median of its repeats with
a 95% interval, a speedup is a ratio of the right runs (paired by repeat index when both sides
have the same indices) with its verdict, a top-1 change is paired per sample (grouped by source
photo on the built-in dataset), and disturbed runs are counted."""

from __future__ import annotations

import pytest

from quantmark.report.intervals import (
    aligned,
    disturbed_lines,
    disturbed_text,
    metric_text,
    quality_change_text,
    repeat_index,
    speedup_text,
)
from quantmark.report.stats import accuracy_change, figure_interval, speedup
from tests.report.synthetic import (
    MODEL,
    SINGLE,
    SYSTEM,
    accuracy_run,
    config,
    run,
    study,
)

FP32 = [100.0, 110.0, 104.0]  # samples/s of three repeats: median 104, mean 104.67
INT8 = [200.0, 221.0, 207.0]  # about twice as fast in every repeat


def test_the_metric_is_the_median_of_its_repeats_with_its_interval():
    made = study(config("ort-fp32", FP32))
    d = made.configs[0].derived
    assert d["metric"] == 104.0 and d["metric_mean"] == pytest.approx(104.6667, abs=1e-4)
    assert d["metric_interval"] == figure_interval(FP32)
    low, high = d["metric_interval"].low, d["metric_interval"].high
    assert low < 104.0 < high and d["metric_interval"].method == "t-log"
    assert metric_text(made.configs[0]) == f"104.0/s [{low:.1f}, {high:.1f}]"
    single = study(config("ort-fp32", [104.0])).configs[0]
    assert metric_text(single) == "104.0/s (n=1)"


def test_repeat_index_from_the_sweep_cell_or_the_runner_record():
    assert repeat_index(run("ort-fp32", 1.0, sweep_repeat=2)) == 2
    assert repeat_index(run("ort-fp32", 1.0, runner_repeat=3)) == 3
    assert repeat_index(run("ort-fp32", 1.0)) is None


def test_a_speedup_pairs_the_repeats_with_the_same_index():
    fp32 = config("ort-fp32", FP32)
    int8 = config("ort-int8", INT8)
    int8.runs.reverse()  # found in another order: still aligned by index
    made = study(fp32, int8)
    assert aligned(int8, fp32) == (FP32, INT8, True)
    ratio = int8.derived["speedup_vs_fp32_ratio"]
    assert ratio == speedup(FP32, INT8, higher_is_better=True, paired=True)
    assert ratio.paired and ratio.verdict == "faster" and 1.9 < ratio.low < ratio.high < 2.2
    assert int8.derived["speedup_vs_fp32"] == ratio.point
    assert int8.derived["speedup_vs_best_fp32_ratio"] == ratio  # the only FP32
    assert speedup_text(int8, "speedup_vs_fp32") == ratio.text()
    own = made.configs[0].derived  # the FP32 is its own reference: exactly 1, no ratio
    assert own["speedup_vs_fp32"] == 1.0 and own["speedup_vs_fp32_ratio"] is None
    assert speedup_text(made.configs[0], "speedup_vs_fp32") == "baseline"


def test_repeats_from_the_runner_record_pair_too_and_others_do_not():
    fp32 = config("ort-fp32", FP32, paired=False)
    for k, r in enumerate(fp32.runs, start=1):
        r.results.repeat = {"index": k}
    study(fp32, int8 := config("ort-int8", INT8))
    assert int8.derived["speedup_vs_fp32_ratio"].paired
    unindexed = config("ort-fp32", FP32, paired=False)
    study(unindexed, other := config("ort-int8", INT8))
    found = other.derived["speedup_vs_fp32_ratio"]
    assert not found.paired
    assert found == speedup(FP32, INT8, higher_is_better=True, paired=False)


def test_an_overlapping_speedup_is_no_measurable_difference():
    made = study(config("ort-fp32", FP32, paired=False),
                 config("ort-int8", [95.0, 118.0, 104.0], paired=False))
    int8 = made.configs[1]
    found = int8.derived["speedup_vs_fp32_ratio"]
    assert found.low < 1.0 < found.high and not found.significant
    assert found.verdict == "no measurable difference"
    assert speedup_text(int8, "speedup_vs_fp32").startswith("no measurable difference (")


def test_a_latency_speedup_is_faster_when_the_latency_is_lower():
    made = study(config("ort-fp32", [10e6, 11e6, 10.4e6], scenario=SINGLE),
                 config("ort-int8", [5e6, 5.6e6, 5.1e6], scenario=SINGLE))
    found = made.configs[1].derived["speedup_vs_fp32_ratio"]
    assert found.verdict == "faster" and 1.8 < found.point < 2.2
    assert metric_text(made.configs[1]).startswith("5.100 ms [")


def test_one_run_gives_no_interval():
    made = study(config("ort-fp32", [100.0]), config("ort-int8", [200.0]))
    found = made.configs[1].derived["speedup_vs_fp32_ratio"]
    assert found.point == pytest.approx(2.0) and found.verdict == "no interval (n=1)"
    assert speedup_text(made.configs[1], "speedup_vs_fp32") == "2.00x (n=1, no interval)"


def _accuracy(tmp_path, builtin: bool) -> tuple[dict, list[int], list[int], list[int]]:
    """FP32 and INT8 accuracy runs over 4 photos of 5 crops each (label = photo): FP32 misses
    samples 0 and 5, INT8 misses 5, 10, 11 and 15. Only FP32 is right on 10, 11 and 15, only
    INT8 on 0."""
    labels = [n // 5 for n in range(20)]
    fp32 = [(label + 1) % 4 if n in (0, 5) else label for n, label in enumerate(labels)]
    int8 = [(label + 1) % 4 if n in (5, 10, 11, 15) else label for n, label in enumerate(labels)]
    return {(SYSTEM, MODEL, sut): accuracy_run(tmp_path / sut, p, labels, builtin=builtin)
            for sut, p in (("ort-fp32", fp32), ("ort-int8", int8))}, labels, fp32, int8


@pytest.mark.parametrize("builtin", [True, False])
def test_the_top1_change_is_paired_per_sample(tmp_path, builtin):
    records, labels, fp32, int8 = _accuracy(tmp_path, builtin)
    made = study(config("ort-fp32", FP32), config("ort-int8", INT8), accuracy=records)
    change = made.configs[1].derived["quality_change"]
    expected = accuracy_change([p == label for p, label in zip(fp32, labels, strict=True)],
                               [p == label for p, label in zip(int8, labels, strict=True)],
                               groups=labels if builtin else None)
    assert change == expected
    # INT8 lost samples 10, 11, 15 and won sample 0: -2 of 20 samples
    assert (change.only_baseline_right, change.only_candidate_right) == (3, 1)
    assert change.delta_points == pytest.approx(-10.0)
    assert change.n_groups == (4 if builtin else 20)  # the built-in crops: one photo each
    assert made.configs[1].derived["quality_change_vs_fp32"] == pytest.approx(-10.0)
    assert quality_change_text(made.configs[1]) == change.text()
    assert made.configs[0].derived["quality_change"] is None
    assert quality_change_text(made.configs[0]) == "baseline"


def test_disturbed_runs_are_counted_and_unknown_is_not_disturbed():
    made = study(config("ort-fp32", FP32, disturbed=False),
                 config("ort-int8", INT8, disturbed=True, why=("other processes used 0.93 of "
                                                               "2 cores",)),
                 config("ov-int8", INT8))
    quiet, noisy, unknown = made.configs
    assert (noisy.derived["disturbed"], noisy.derived["disturbance_checked"]) == (3, 3)
    assert noisy.derived["disturbed_why"] == ["other processes used 0.93 of 2 cores"]
    assert [disturbed_text(c) for c in made.configs] == ["no", "yes (3 of 3)", "-"]
    assert (unknown.derived["disturbed"], unknown.derived["disturbance_checked"]) == (0, 0)
    assert quiet.derived["disturbed"] == 0
    lines = disturbed_lines(made.configs)
    assert len(lines) == 1 and lines[0].startswith("ort-int8, Offline, batch 1 (m on box)")
    assert "3 of 3 runs disturbed (other processes used 0.93 of 2 cores)" in lines[0]
