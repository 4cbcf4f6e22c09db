"""What the characterization compares, so its figures hold on a noisy machine.

``quantmark.report.stats`` does the statistics; this module decides what goes into them: a
metric's repeats (95% interval of the median), which repeats of two configurations pair up
for a speedup (the same repeat index: interleaved runs that shared the machine's state),
which samples of two accuracy runs pair up for a quality change (classification's top-1: the
same image, never the same QSL index, grouped by source photo where the data names one; a task
that pairs its own runs, such as detection's mAP, is asked), and which runs other processes
disturbed; and how those figures read in the tables, labelled by the run's metric
(``report.quality``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.ground.metric import Metric
from quantmark.report.accuracy import (
    RunSamples,
    run_samples,
    run_task,
    samples_agreement,
    samples_change,
)
from quantmark.report.quality import change_label, classifies, value_label
from quantmark.report.stats import (
    CONFIDENCE,
    AccuracyChange,
    Interval,
    Ratio,
    family_confidence,
    figure_interval,
    speedup,
)
from quantmark.report.stopping import look
from quantmark.report.table_formats import number

if TYPE_CHECKING:
    from quantmark.report.agreement_interval import AgreementFigure
    from quantmark.report.study import Config, Run
    from quantmark.tasks.contract import QualityChange


def repeat_index(run: Run) -> int | None:
    """Which repeat ``run`` was: its sweep cell's ``repeat``, else the runner's record of
    ``--repeats`` (results ``repeat.index``); None when neither says."""
    index = run.tracked.get("repeat")
    if index is None:
        return run.results.repeat_index
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def interval(values: list[float]) -> Interval | None:
    """The median of ``values`` with its 95% interval; None without a value."""
    return figure_interval(values) if values else None


def _by_repeat(config: Config) -> dict[int, float] | None:
    """The metric per repeat index; None when a run has no index, or two runs share one."""
    values: dict[int, float] = {}
    seen: set[int] = set()
    for run in config.valid_runs():
        index = repeat_index(run)
        if index is None or index in seen:
            return None
        seen.add(index)
        if run.summary.metric_value is not None:
            values[index] = run.summary.metric_value
    return values


def aligned(config: Config, reference: Config) -> tuple[list[float], list[float], bool]:
    """(reference's values, config's values, paired). Paired, in repeat order, when both
    configurations ran the same repeat indices (a sweep interleaves its cells, so repeat k of
    each saw the same state of the machine); otherwise every value of each, unpaired."""
    mine, theirs = _by_repeat(config), _by_repeat(reference)
    if mine and theirs and mine.keys() == theirs.keys():
        order = sorted(mine)
        return [theirs[i] for i in order], [mine[i] for i in order], True
    return reference.metric_values(), config.metric_values(), False


def ratio(config: Config, reference: Config | None, confidence: float = CONFIDENCE
          ) -> Ratio | None:
    """How much faster ``config`` is than ``reference`` (> 1: faster), with its interval at
    ``confidence`` and verdict; None without a reference, against itself, or without positive
    values."""
    if not comparable(config, reference):
        return None
    theirs, mine, paired = aligned(config, reference)
    return speedup(theirs, mine, higher_is_better=not config.latency_metric, paired=paired,
                   confidence=confidence)


def comparable(config: Config, reference: Config | None) -> bool:
    """``ratio`` gives a speedup (and so a verdict) for this pair."""
    if reference is None or reference is config:
        return False
    theirs, mine, _ = aligned(config, reference)
    return bool(mine and theirs) and min(mine + theirs) > 0


def family_size(pairs: list[tuple[Config, Config | None]]) -> int:
    """How many speedup verdicts a report makes: its distinct (configuration, reference)
    pairs that give a ratio. ``× fw FP32`` and ``× best FP32`` of one row are one verdict when
    both name the same FP32."""
    return len({(id(c), id(r)) for c, r in pairs if comparable(c, r)})


def verdicts_note(verdicts: int) -> str:
    """How the report's speedup verdicts are corrected for their number, in one sentence."""
    if verdicts <= 1:
        return "Speedup intervals are 95%: the report makes at most one speedup verdict."
    return (f"The report makes {verdicts} speedup verdicts, so each speedup interval is at "
            f"{family_confidence(verdicts):.2%} (Bonferroni: 5% / {verdicts}): the chance "
            "that any of them calls a difference that is not there 'faster' or 'slower' is at "
            "most 5%.")


def _until_stable(config: Config) -> tuple[float, int] | None:
    """(target %, planned runs) of a set ``--until-stable`` ran, as its results.json records;
    None for any other set."""
    targets = {r.results.config.get("until_stable") for r in config.runs}
    if len(targets) != 1 or None in targets:
        return None
    planned = (config.runs[0].results.repeat or {}).get("of")
    # no record of the planned runs: the rule's own minimum (quantmark.run.repeated)
    return float(targets.pop()), planned if isinstance(planned, int) else 3


def metric_interval(config: Config) -> Interval | None:
    """The official metric's median and 95% interval; for a set ``--until-stable`` stopped,
    its stopping rule's interval (``report.stopping``): the one the run printed."""
    values = config.metric_values()
    rule = _until_stable(config)
    if values and rule is not None:
        return look(values, *rule).interval
    return interval(values)


def point(config: Config, reference: Config | None, found: Ratio | None) -> float | None:
    """The speedup as one number (existing readers of ``speedup_vs_*``): the ratio's point;
    exactly 1 for a configuration that is its own reference."""
    if found is not None:
        return found.point
    return 1.0 if reference is config and config.metric else None


def disturbance(runs: list[Run]) -> tuple[int, int, list[str]]:
    """(runs other processes disturbed, runs with a verdict either way, why). Results written
    before the runner watched for interference have no verdict: unknown, not disturbed."""
    verdicts = [r.results.interference or {} for r in runs]
    disturbed = [v for v in verdicts if v.get("disturbed") is True]
    checked = sum(v.get("disturbed") in (True, False) for v in verdicts)
    why = list(dict.fromkeys(str(w) for v in disturbed for w in v.get("why") or []))
    return len(disturbed), checked, why


class AccuracyLogs:
    """Each accuracy run's samples (image, label, answer, source image), read once per report.
    Two runs are compared on the images both answered, matched by image, never by QSL index."""

    def __init__(self, accuracy: dict[tuple[str, str, str], dict[str, Any]]) -> None:
        self.accuracy = accuracy
        self._samples: dict[tuple[str, str, str], RunSamples | None] = {}

    def _pairs_itself(self, key: tuple[str, str, str]) -> bool:
        task = run_task(self.accuracy[key]["folder"])
        return task is not None and task.pairs_runs

    def samples(self, key: tuple[str, str, str]) -> RunSamples | None:
        """The run's samples; None for a run not in the study, or without its log or val_map."""
        if key not in self.accuracy:
            return None
        if key not in self._samples:
            self._samples[key] = run_samples(self.accuracy[key]["folder"])
        return self._samples[key]

    def agreement(self, key: tuple[str, str, str], reference: tuple[str, str, str]
                  ) -> AgreementFigure | None:
        """How often the image's top-1 class equals the FP32 SUT's, with its interval (grouped
        by source image as the change's is): what quantization changed, meaningful even for
        random weights, where top-1 is at chance level."""
        if key in self.accuracy and self._pairs_itself(key):
            return None  # top-1 agreement is classification's; a detector's change is its mAP
        mine, theirs = self.samples(key), self.samples(reference)
        if mine is None or theirs is None:
            return None
        builtin = any(self.accuracy[k].get("dataset_builtin") for k in (key, reference))
        return samples_agreement(theirs, mine, by_source_image=builtin)

    def change(self, key: tuple[str, str, str], reference: tuple[str, str, str]
               ) -> AccuracyChange | QualityChange | None:
        """The quality change of ``key`` over ``reference`` on the images both answered,
        with its interval and verdict; None against itself, or when they share no image. A
        task that pairs its own runs is asked (a detector's mAP); top-1's is grouped by source
        image where the runs recorded one (val_groups.txt)."""
        if key == reference:
            return None
        task = run_task(self.accuracy[key]["folder"]) if key in self.accuracy else None
        if task is not None and task.pairs_runs and reference in self.accuracy:
            return task.paired_change(Path(self.accuracy[reference]["folder"]),
                                      Path(self.accuracy[key]["folder"]))
        mine, theirs = self.samples(key), self.samples(reference)
        if mine is None or theirs is None:
            return None
        builtin = any(self.accuracy[k].get("dataset_builtin") for k in (key, reference))
        return samples_change(theirs, mine, by_source_image=builtin)


def derived(config: Config, fp32: Config | None, best: Config | None, logs: AccuracyLogs,
            accuracy_keys: tuple[tuple[str, str, str], tuple[str, str, str]],
            confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The intervals and verdicts of one configuration's ``derived`` figures; speedups at
    ``confidence`` (``family_confidence`` of the report's verdicts)."""
    key, fp32_key = accuracy_keys
    vs_fp32, vs_best = ratio(config, fp32, confidence), ratio(config, best, confidence)
    disturbed, checked, why = disturbance(config.runs)
    samples = [r.summary.samples_per_second for r in config.runs
               if r.summary.samples_per_second is not None]
    metric = metric_interval(config)
    agreement = logs.agreement(key, fp32_key)
    return {
        "metric_interval": metric,
        # a throughput metric is samples/s itself: the same interval (until-stable's too)
        "samples_per_s_interval": (interval(samples) if config.latency_metric or metric is None
                                   else metric),
        "speedup_vs_fp32": point(config, fp32, vs_fp32),
        "speedup_vs_fp32_ratio": vs_fp32,
        "speedup_vs_best_fp32": point(config, best, vs_best),
        "speedup_vs_best_fp32_ratio": vs_best,
        "quality_change": logs.change(key, fp32_key),
        "agreement_with_fp32": None if agreement is None else agreement.percent,
        "agreement_interval": agreement,
        "disturbed": disturbed,
        "disturbance_checked": checked,
        "disturbed_why": why,
    }


# How the figures read in the tables (Markdown, HTML, the console)

def metric_text(config: Config) -> str:
    """The official metric: the median over repeats and its 95% interval,
    ``12.345 ms [12.101, 12.602]``, or ``(n=1)`` where one run gives no interval."""
    found: Interval | None = config.derived["metric_interval"]
    if found is None:
        return "-"
    scale, unit, fmt = ((1e6, " ms", "{:.3f}") if config.derived["metric_unit"] == "ns" else
                        (1.0, "/s", "{:.1f}"))
    text = fmt.format(found.point / scale) + unit
    if found.low is None or found.high is None:
        return f"{text} (n={found.n})"
    if found.zero_width:
        return f"{text} (all {found.n} runs equal)"
    return f"{text} [{fmt.format(found.low / scale)}, {fmt.format(found.high / scale)}]"


def _is_reference(config: Config, which: str) -> bool:
    """``config`` is the FP32 configuration that ``which`` (a speedup) compares with."""
    reference = config.derived["fp32_baseline" if which == "speedup_vs_fp32" else "best_fp32"]
    return reference == config.sut


def speedup_text(config: Config, which: str) -> str:
    """``speedup_vs_fp32`` or ``speedup_vs_best_fp32`` with its interval and verdict (no
    measurable difference where the interval holds 1x); ``baseline`` for the reference, ``n/a``
    for an ensemble (several models: no FP32 of its own)."""
    found: Ratio | None = config.derived[f"{which}_ratio"]
    if found is not None:
        return found.text()
    if not config.derived["fp32_baseline"]:
        return "n/a"
    return "baseline" if _is_reference(config, which) and config.derived[which] else "-"


def verdict(config: Config, which: str) -> str | None:
    """The speedup's verdict, ``baseline`` for the reference, None without a speedup."""
    found: Ratio | None = config.derived[f"{which}_ratio"]
    if found is not None:
        return found.verdict
    return "baseline" if _is_reference(config, which) and config.derived[which] else None


def quality_change_text(config: Config) -> str:
    """The paired change in the run's metric (interval, the test or resampling that fits
    the data, verdict); the bare difference of the two figures when the runs cannot be
    paired per image."""
    d = config.derived
    change: AccuracyChange | QualityChange | None = d["quality_change"]
    if change is not None:
        return change.text()
    if d["quality_change_vs_fp32"] is None:
        return "-"
    if d["fp32_baseline"] == config.sut:
        return "baseline"
    return f"{d['quality_change_vs_fp32']:+.2f} pt (not paired)"


AGREEMENT_LABEL = "agree FP32 %"


def _own(metric: Metric, text: Callable[[Config], str], config: Config) -> str:
    """``text`` of a row scored by ``metric``; "-" in another metric's column."""
    return text(config) if config.derived["quality_metric"] == metric else "-"


def quality_columns(metrics: list[Metric], figure: bool = True, change: bool = True,
                    agreement: bool = True) -> list[tuple[str, Callable[[Config], str]]]:
    """(header, cell) of each metric's ``figure`` and its paired ``change`` against the
    framework's FP32, then the ``agreement`` with FP32 where a metric classifies (top-1's)."""
    columns: list[tuple[str, Callable[[Config], str]]] = []
    for metric in metrics:
        if figure:
            columns.append((value_label(metric), partial(
                _own, metric, lambda c: number(c.derived["quality"], 2))))
        if change:
            columns.append((change_label(metric), partial(_own, metric, quality_change_text)))
    if agreement and any(classifies(metric) for metric in metrics):
        columns.append((AGREEMENT_LABEL, agreement_text))
    return columns


def agreement_text(config: Config) -> str:
    """``99.2 [98.1, 99.7]``: the top-1 agreement with FP32 and its interval; "-" without."""
    found: AgreementFigure | None = config.derived.get("agreement_interval")
    return found.cell() if found is not None else number(config.derived["agreement_with_fp32"], 1)


def disturbed_text(config: Config) -> str:
    """``yes (k of n)`` when other processes disturbed runs, ``no`` when every run was seen
    quiet, ``-`` when unknown (results from before the runner watched)."""
    d, n = config.derived, len(config.runs)
    if d["disturbed"]:
        return f"yes ({d['disturbed']} of {n})"
    checked = d["disturbance_checked"]
    if checked:
        return "no" if checked == n else f"no ({checked} of {n} checked)"
    return "-"


DISTURBED_WARNING = ("Warning: other processes used this machine during some runs, so their "
                     "numbers may be slower than the machine's own by an unknown amount. Run "
                     "them again on a quiet machine (or with more repeats):")


def disturbed_lines(configs: list[Config]) -> list[str]:
    """One line per configuration with a disturbed run: which, how many, and why."""
    return [f"{c.sut}, {c.scenario}, batch {c.batch_size} ({c.model} on {c.system}): "
            f"{c.derived['disturbed']} of {len(c.runs)} runs disturbed ("
            f"{'; '.join(c.derived['disturbed_why']) or 'see results.json interference'})."
            for c in configs if c.derived["disturbed"]]
