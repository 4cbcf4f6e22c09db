"""The characterization report's notes and the warnings it opens with: how to read its figures,
in the words of the metrics its runs were scored by (``report.quality``), so a detector's rows
are never said to score top-1 or to sit at chance level."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quantmark.ground.metric import Metric
from quantmark.report import quality, stopping
from quantmark.report.intervals import DISTURBED_WARNING, disturbed_lines, verdicts_note
from quantmark.report.percentiles import NOTE as PERCENTILES_NOTE

if TYPE_CHECKING:
    from quantmark.report.study import Study

THROTTLE_WARNING = ("Warning: the board throttled (too hot, or short of voltage) during some "
                    "runs. Cool it (heatsink, fan, a pause between runs) and run these again:")


def metrics(study: Study) -> list[Metric]:
    """The metrics the study's configurations are scored by, first seen first."""
    return quality.in_order(c.derived["quality_metric"] for c in study.configs)


def _random_weights(study: Study) -> list[str]:
    """A classifier with random weights scores at chance: its agreement with FP32 is what
    shows a precision's cost. Another task's metric is no chance figure: nothing said."""
    weights = {c.model: (c.derived["weights"], c.derived["quality_metric"])
               for c in study.configs}
    return [f"{model} has random weights ({text}): its {metric.name} is at chance level. "
            "`agree FP32 %` (share of samples whose class equals the same "
            "framework's FP32 SUT) is what shows a precision's accuracy cost."
            for model, (text, metric) in sorted(weights.items())
            if "random" in text.lower() and quality.classifies(metric)]


def _pairing(metric: Metric) -> str:
    """How the ``Δ`` column of ``metric`` pairs two accuracy runs."""
    if quality.classifies(metric):
        return (f" `Δ {metric.name}` pairs the two accuracy runs image by image (the images "
                "both saw): its 95% interval and p-value come from a t test over source "
                "photos where crops share one (the built-in dataset; fewer than 50 photos "
                "give no verdict), else from one Bonett-Price test.")
    return (f" `Δ {metric.name}` pairs the two accuracy runs sample by sample (the images or "
            "sentences both scored): its 95% interval is the task's own, resampled over those "
            "samples as each cell names.")


def notes(study: Study) -> list[str]:
    """The notes under the machines table, in the report's order."""
    found = []
    kinds = {c.derived["run_kind"] for c in study.configs}
    if "quick" in kinds:
        found.append("Quick runs: shortened duration and query counts, NOT VALID FOR "
                     "SUBMISSION; expected QPS/latency came from a measurement, not a guess.")
    found += _random_weights(study)
    found.append("`× fw FP32`: vs the same framework's FP32 SUT; `× best FP32`: vs the fastest "
                 "FP32 SUT of any framework (same machine, model, scenario, batch). Latency "
                 "scenarios compare the official latency, throughput ones samples/s.")
    found.append("Figures are medians over a configuration's repeats with their 95% interval in "
                 "brackets (n=1: one run, no interval). A speedup whose interval holds 1× is "
                 "'no measurable difference'; repeats with the same index are paired."
                 + "".join(_pairing(metric) for metric in metrics(study)))
    found.append(verdicts_note(study.verdicts) + " `(all n runs equal)`: the runs did not "
                 "differ, so there is no spread to give an interval of.")
    if any(getattr(c.derived["metric_interval"], "method", "") in (stopping.METHOD,
                                                                  stopping.NOT_MET)
           for c in study.configs):
        found.append(f"Sets run with {stopping.RULE_TEXT}.")
    found.append(PERCENTILES_NOTE)
    if any(c.derived["disturbed"] for c in study.configs):
        found.append("⚠ after a SUT: other processes disturbed some of its runs (the "
                     "`disturbed` column counts them; see the warning above).")
    found.append("*Energy is informative only: whole-package counters (RAPL, NVML) over "
                 "LoadGen's run, which include every other process; `-` where the machine "
                 "exposes no counter.")
    found.append("Peak RSS: the test process's peak resident memory, kernel-accounted (it "
                 "includes the dataset the QSL holds).")
    return found


def _throttled(study: Study) -> list[str]:
    """One line per configuration that throttled in any of its runs."""
    return [f"{c.sut}, {c.scenario}, batch {c.batch_size} ({c.model} on {c.system}) throttled "
            f"during the run ({'; '.join(c.derived['throttling_reasons']) or 'see results.json'}"
            "): its numbers are not the board's steady speed."
            for c in study.configs if c.derived["throttled"] == "yes"]


def opening_warnings(study: Study) -> list[tuple[str, list[str]]]:
    """(heading, one line per configuration) of each warning the report opens with: runs the
    board throttled, runs other processes disturbed."""
    found = [(THROTTLE_WARNING, _throttled(study)),
             (DISTURBED_WARNING, disturbed_lines(study.configs))]
    return [(heading, lines) for heading, lines in found if lines]
