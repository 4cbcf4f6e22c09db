"""Intervals and ratios on synthetic samples whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as scipy_stats

from quantmark.report.stats import (
    MIN_VERDICT_GROUPS,
    ORDER_STAT_MIN_N,
    accuracy_change,
    figure_interval,
    order_rank,
    speedup,
)


def _coverage(draw, truth: float, trials: int = 400) -> float:
    hits = 0
    for _ in range(trials):
        interval = draw()
        hits += interval.low <= truth <= interval.high
    return hits / trials


def test_three_repeats_cover_the_true_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(7)
    # log-normal speeds around 40 samples/s, 5% noise: the median of the distribution is 40
    coverage = _coverage(lambda: figure_interval(40 * np.exp(rng.normal(0, 0.05, 3))), 40.0)
    assert 0.90 <= coverage <= 0.99


def _log_noise(rng: np.random.Generator, model: str, n: int) -> np.ndarray:
    """Run-to-run noise of log(figure), 5%: log-normal (the house's model), Student t with 3
    degrees of freedom (heavy tails), or log-normal with one run in ten 40% slower (a
    disturbance the monitor did not flag: skewed)."""
    if model == "t3":
        return 0.05 * rng.standard_t(3, n) / np.sqrt(3)
    noise = rng.normal(0, 0.05, n)
    return noise - np.log(1.4) * (rng.random(n) < 0.1) if model == "slow" else noise


def _true_median(model: str) -> float:
    """The median of exp(noise) for ``model`` (solved for the slow-run mixture)."""
    if model != "slow":
        return 1.0

    def below(m: float) -> float:
        return (0.9 * scipy_stats.norm.cdf(m / 0.05)
                + 0.1 * scipy_stats.norm.cdf((m + np.log(1.4)) / 0.05) - 0.5)
    return float(np.exp(optimize.brentq(below, -1, 1)))


def _holds(hits: int, trials: int, nominal: float = 0.95) -> bool:
    """The measured rate is at or above ``nominal`` within simulation error: its 95%
    Clopper-Pearson interval reaches it."""
    return scipy_stats.binomtest(hits, trials).proportion_ci(0.95).high >= nominal


@pytest.mark.parametrize("model", ["lognormal", "t3", "slow"])
def test_ten_runs_and_more_cover_the_median_at_95_percent_whatever_the_noise(model) -> None:
    # the BCa bootstrap used from 10 runs on covered 93% at 10-15 runs (t3, slow: 92-93%)
    rng = np.random.default_rng(8)
    truth = 100 * _true_median(model)
    trials, rates = 1500, {}
    for n in (ORDER_STAT_MIN_N, 15, 20):
        found = [figure_interval(100 * np.exp(_log_noise(rng, model, n))) for _ in range(trials)]
        rates[n] = sum(f.low <= truth <= f.high for f in found)
    assert all(_holds(hits, trials) for hits in rates.values()), rates
    assert {f.method for f in found} == {"order-stat"}


def test_the_order_statistic_interval_is_scipys_median_interval() -> None:
    rng = np.random.default_rng(9)
    for n in (10, 13, 30):
        values = rng.lognormal(3, 0.1, n)
        found = figure_interval(values)
        ci = scipy_stats.quantile_test(values, q=float(np.median(values))).confidence_interval()
        assert (found.low, found.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert order_rank(5) is None  # five runs' range holds the median 94%: no 95% interval
    assert order_rank(10) == 2 and order_rank(10, 0.9999) is None


@pytest.mark.parametrize("model", ["lognormal", "t3", "slow"])
def test_a_sut_against_itself_with_many_paired_runs_is_called_different_at_most_5_percent(
        model) -> None:
    # the paired bootstrap from 10 runs said faster/slower of A against A up to 7.4%
    rng = np.random.default_rng(10)
    for n in (ORDER_STAT_MIN_N, 12):
        drift = rng.normal(0, 0.1, (1500, n))  # the machine, shared by the pair
        wrong = sum(speedup(40 * np.exp(d + _log_noise(rng, model, n)),
                            40 * np.exp(d + _log_noise(rng, model, n)), higher_is_better=True,
                            paired=True).significant for d in drift)
        assert scipy_stats.binomtest(wrong, 1500).proportion_ci(0.95).low <= 0.05, (n, wrong)


def test_the_point_is_the_median_and_one_run_has_no_interval() -> None:
    interval = figure_interval([17.8, 17.8, 23.7])
    assert interval.point == 17.8 and interval.low < 17.8 < 23.7 < interval.high
    single = figure_interval([43.9])
    assert (single.low, single.high, single.method) == (None, None, "single")
    assert single.text() == "43.90 (n=1)"
    # a zero-width bracket would read as certainty: it says the runs did not differ
    assert figure_interval([5.0, 5.0, 5.0]).text() == "5.00 (all 3 runs equal)"


def test_a_real_twofold_speedup_is_found_and_its_interval_holds_two() -> None:
    rng = np.random.default_rng(1)
    base = 10 * np.exp(rng.normal(0, 0.03, 3))
    cand = 20 * np.exp(rng.normal(0, 0.03, 3))
    ratio = speedup(base, cand, higher_is_better=True)
    assert ratio.significant and ratio.verdict == "faster"
    assert ratio.low < 2.0 < ratio.high
    assert ratio.text().endswith("]") and "no measurable" not in ratio.text()


def test_latency_speedups_point_the_right_way() -> None:
    # the candidate's latency is half the baseline's: twice as fast
    ratio = speedup([4.0, 4.1, 3.9], [2.0, 2.05, 1.95], higher_is_better=False, paired=True)
    assert ratio.point == pytest.approx(2.0, rel=1e-6)
    assert ratio.verdict == "faster"
    slower = speedup([2.0, 2.05, 1.95], [4.0, 4.1, 3.9], higher_is_better=False)
    assert slower.verdict == "slower" and slower.point == pytest.approx(0.5, rel=0.02)


def test_a_sut_against_itself_is_no_measurable_difference_about_95_percent() -> None:
    rng = np.random.default_rng(3)
    same = 0
    for _ in range(300):
        a, b = 40 * np.exp(rng.normal(0, 0.05, (2, 3)))
        same += speedup(a, b, higher_is_better=True, paired=True).verdict == \
            "no measurable difference"
    assert 0.90 <= same / 300 <= 0.99


def test_the_seed_issue_noisy_draw_is_not_called_a_slowdown() -> None:
    # ort-int8 1.5x faster at heart; one disturbed repeat; three interleaved pairs
    fp32 = [4.10, 4.00, 4.05]
    int8 = [2.60, 6.89, 2.70]
    ratio = speedup(fp32, int8, higher_is_better=False, paired=True)
    assert ratio.verdict == "no measurable difference"
    assert ratio.text().startswith("no measurable difference (")


def test_pairing_cancels_drift_that_hits_both_sides() -> None:
    drift = np.array([1.0, 0.7, 1.3, 0.8, 1.2])  # the machine's speed, run by run
    base, cand = 10 * drift, 13 * drift
    paired = speedup(base, cand, higher_is_better=True, paired=True)
    unpaired = speedup(base, cand, higher_is_better=True)
    assert paired.low == pytest.approx(1.3) and paired.high == pytest.approx(1.3)
    assert not unpaired.significant  # the drift swamps the 1.3x without the pairing


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        figure_interval([])
    with pytest.raises(ValueError, match="paired"):
        speedup([1, 2], [1, 2, 3], higher_is_better=True, paired=True)
    with pytest.raises(ValueError, match="positive"):
        speedup([0.0, 1.0], [1.0, 1.0], higher_is_better=True)
    one = speedup([4.0], [2.0], higher_is_better=False)
    assert one.verdict == "no interval (n=1)" and one.text() == "2.00x (n=1, no interval)"


def _table(only_base: int, only_cand: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two SUTs' answers on n independent samples with these discordant counts."""
    base = np.zeros(n, dtype=bool)
    base[:only_base] = True
    cand = np.zeros(n, dtype=bool)
    cand[only_base:only_base + only_cand] = True
    return base, cand


def test_the_accuracy_lines_p_and_verdict_come_from_one_test() -> None:
    # before: the exact McNemar p beside the Bonett-Price verdict printed "p=0.052: worse"
    for n in (60, 1536):
        for only_base in range(0, 41):
            for only_cand in range(0, 41 - only_base):
                change = accuracy_change(*_table(only_base, only_cand, n))
                assert (change.p_value < 0.05) == change.significant, (n, only_base, only_cand)
                assert f"p={change.p_value:.2g}: {change.verdict}" in change.text()
    change = accuracy_change(*_table(3, 10, 100))
    assert (change.only_baseline_right, change.only_candidate_right) == (3, 10)
    assert change.delta_points == pytest.approx(7.0) and change.low < 7.0 < change.high


@pytest.mark.parametrize("n", [20, 200, 1536])
def test_independent_samples_false_verdicts_stay_under_5_percent(n: int) -> None:
    rng = np.random.default_rng(11 + n)
    for changed in (0.05, 0.4):  # the share of samples one SUT got right and the other not
        only_base = rng.binomial(n, changed / 2, 4000)
        only_cand = rng.binomial(n - only_base, (changed / 2) / (1 - changed / 2))
        wrong = sum(accuracy_change(*_table(int(b), int(c), n)).significant
                    for b, c in zip(only_base, only_cand, strict=True))
        assert scipy_stats.binomtest(wrong, 4000).proportion_ci(0.95).low <= 0.05, (n, wrong)


def test_crops_of_few_photos_widen_the_interval_of_an_accuracy_change() -> None:
    # 1536 crops of 7 photos; INT8 flips whole photos' worth of crops, as a quantization
    # that moves one photo's class does: per-sample resampling would call it significant
    photos = np.arange(1536) % 7
    base = np.ones(1536, dtype=bool)
    base[photos == 0] = False
    cand = base.copy()
    cand[(photos == 0) & (np.arange(1536) % 2 == 0)] = True  # photo 0 half right now
    cand[(photos == 1) & (np.arange(1536) % 3 == 0)] = False
    by_sample = accuracy_change(base, cand)
    by_photo = accuracy_change(base, cand, groups=photos)
    assert by_sample.significant
    assert (by_photo.high - by_photo.low) > 2 * (by_sample.high - by_sample.low)
    assert not by_photo.significant and by_photo.verdict == "cannot tell"
    assert "over 7 source images" in by_photo.text()


def test_identical_predictions_are_no_change() -> None:
    same = [True, False, True, True]
    change = accuracy_change(same, same)
    assert (change.delta_points, change.low, change.high, change.p_value) == (0, 0, 0, 1.0)
    assert change.verdict == "no measurable change"


def _photo_trial(rng: np.random.Generator, photos: int, change: float, crops: int = 1536
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One built-in-like set: ``crops`` crops of ``photos`` photos, each photo with its own
    base accuracy and its own true change (spread 5 points around ``change``), the population
    mean change being ``change``. A crop is right for a SUT when a shared draw falls under that
    SUT's accuracy on its photo, so the two SUTs' answers are paired as real ones are."""
    photo = np.arange(crops) % photos
    accuracy = rng.uniform(0.4, 0.8, photos)
    shift = np.clip(rng.normal(change, 0.05, photos), change - 0.15, change + 0.15)
    draw = rng.uniform(size=crops)
    return draw < accuracy[photo], draw < (accuracy + shift)[photo], photo


@pytest.mark.parametrize("photos", [6, 7, 30])
def test_the_interval_over_source_photos_covers_the_population_change(photos: int) -> None:
    # a percentile bootstrap over 6 clusters covered 86-87%: "better"/"worse" wrong 13% of
    # the time when nothing changed
    rng = np.random.default_rng(28 + photos)
    for change in (0.0, 0.03):
        hits = 0
        for _ in range(1000):
            base, cand, photo = _photo_trial(rng, photos, change)
            found = accuracy_change(base, cand, groups=photo)
            assert found.method == "cluster-t" and found.n_groups == photos
            hits += found.low <= 100 * change <= found.high
        assert 0.93 <= hits / 1000 <= 0.97, (photos, change, hits)


def test_with_photo_effects_the_clustered_p_value_holds_its_false_positive_rate() -> None:
    rng = np.random.default_rng(4)
    clustered = per_crop = 0
    for _ in range(1000):
        base, cand, photo = _photo_trial(rng, 6, 0.0)
        found = accuracy_change(base, cand, groups=photo)
        clustered += found.p_value < 0.05
        # one test: p and interval agree (the verdict itself: "cannot tell" from 6 photos)
        assert (found.p_value < 0.05) == (found.low > 0 or found.high < 0)
        assert found.verdict == "cannot tell" and not found.significant
        per_crop += accuracy_change(base, cand).p_value < 0.05
    assert clustered / 1000 <= 0.06
    assert per_crop / 1000 > 0.15  # McNemar on the crops: what the report printed before


def test_without_groups_the_interval_covers_with_few_discordant_pairs() -> None:
    # independent samples: 1536 of them, 2% change their answer, mostly for the better
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(1000):
        flips = rng.uniform(size=1536) < 0.02
        better = rng.uniform(size=1536) < 0.8
        base = rng.uniform(size=1536) < 0.7
        cand = np.where(flips, better, base)
        base = np.where(flips, ~better, base)
        found = accuracy_change(base, cand)
        assert found.method == "mcnemar" and found.n_groups == 1536
        hits += found.low <= 100 * 0.02 * 0.6 <= found.high
    assert 0.93 <= hits / 1000 <= 0.97


def test_a_clustered_change_prints_the_clustered_test_never_mcnemar() -> None:
    rng = np.random.default_rng(6)
    base, cand, photo = _photo_trial(rng, 7, 0.0)
    text = accuracy_change(base, cand, groups=photo).text()
    assert "over 7 source images, cluster t p=" in text and "Bonett-Price" not in text
    assert "Bonett-Price p=" in accuracy_change(base, cand).text()
    one = accuracy_change(base, ~base, groups=["photo"] * len(base))
    assert (one.low, one.high, one.verdict) == (-100.0, 100.0, "cannot tell")
    assert "one source image: no interval" in one.text()


def test_every_accuracy_line_says_what_change_the_set_resolves() -> None:
    rng = np.random.default_rng(6)
    base, cand, photo = _photo_trial(rng, 7, 0.0)
    for change in (accuracy_change(base, cand, groups=photo), accuracy_change(base, cand)):
        half = (change.high - change.low) / 2
        assert change.resolves == pytest.approx(half)
        assert change.text().endswith(f"; the set resolves ±{half:.2g} pt")
    # crops of 7 photos resolve far less than the same crops read as independent images
    assert accuracy_change(base, cand, groups=photo).resolves > accuracy_change(
        base, cand).resolves


def _skewed_trial(rng: np.random.Generator, photos: int, crops: int = 1536
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A set whose photos differ unevenly: most photos gain a little, a few lose much (each
    photo's change 5 * (1 - Exp(1)) points, mean 0: nothing changed on average)."""
    photo = np.arange(crops) % photos
    accuracy = rng.uniform(0.4, 0.8, photos)
    shift = 0.05 * (1 - rng.exponential(1, photos))
    draw = rng.uniform(size=crops)
    return draw < accuracy[photo], draw < np.clip(accuracy + shift, 0, 1)[photo], photo


def test_few_unevenly_differing_photos_give_no_verdict() -> None:
    # 6 photos (the built-in set) with skewed photo effects: the cluster t said better or
    # worse of no change 11% of the time; no method holds there, so it cannot tell
    rng = np.random.default_rng(12)
    wrong = 0
    for _ in range(1000):
        found = accuracy_change(*_skewed_trial(rng, 6))
        wrong += found.significant
        assert found.verdict == "cannot tell"
    assert wrong == 0
    assert "cannot tell (fewer than 50 source images" in found.text()


@pytest.mark.parametrize(("effect", "documented"), [("normal", 0.05), ("exp", 0.06)])
def test_from_50_photos_the_cluster_verdict_holds_its_documented_rate(effect: str,
                                                                      documented: float):
    # symmetric photo effects: 5%; skewed (most photos gain a little, a few lose much): the
    # t over 50 photos says better/worse of no change 5-6% of the time (documented)
    rng = np.random.default_rng(13)
    wrong = 0
    for _ in range(1500):
        if effect == "exp":
            base, cand, photo = _skewed_trial(rng, MIN_VERDICT_GROUPS)
        else:
            base, cand, photo = _photo_trial(rng, MIN_VERDICT_GROUPS, 0.0)
        wrong += accuracy_change(base, cand, groups=photo).significant
    assert scipy_stats.binomtest(wrong, 1500).proportion_ci(0.95).low <= documented, wrong
