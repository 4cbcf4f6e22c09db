"""The "Recommendation" section: ``run.py recommend``'s answer, in its own screen and in
``run.py report``.

Reads the record ``run.py recommend`` writes (``"kind": "recommendation"``, in a
``recommend-<scenario>/`` folder) and says what it found in plain lines: the recommended SUT and
settings with its figure and accuracy change (each with its interval), the executed precision
its run proved and whether its runs were disturbed; or, honestly, that the best candidates are
tied, that the budget could not tell the top two apart, or that no candidate meets the limits
(which limit binds, which candidate came closest). Then what each limit cost (the best
candidate it excluded), the commands that reproduce the answer, and every candidate's evidence.
Every figure is the text the record holds (formatted when the search ended, by
``report.stats``): this module needs neither scipy nor matplotlib, like the lean install.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

from quantmark.ground.metric import Metric
from quantmark.ground.records import RecommendationRecord
from quantmark.report import quality
from quantmark.report.record_folders import records_under
from quantmark.report.table_formats import html_table, markdown_table, number

log = logging.getLogger(__name__)

FOLDER_PREFIX = "recommend-"  # <output>/<host>/<model>/recommend-<scenario>/
RECOMMENDATION = "recommendation.json"
UNITS = {"latency_ms": "ms", "samples_per_s": "samples/s"}
#: each limit's flag and unit, as the user gave it
LIMITS = {"max_accuracy_drop": ("--max-accuracy-drop", "pts"), "latency_ms": ("--latency", "ms"),
          "min_throughput": ("--min-throughput", "samples/s"),
          "max_memory_mb": ("--max-memory", "MB"), "max_model_size_mb": ("--max-model-size", "MB")}
CHANGE = "change"  # HEADER's place of the accuracy change, named by the record's metric
HEADER = ["candidate", "objective", CHANGE, "executed", "runs", "disturbed", "peak MB",
          "size MB", "status"]


def caption(metric: Metric) -> str:
    """The Pareto figure's caption (``recommend_figure`` draws it when the search runs)."""
    return ("Each point: one candidate's objective figure (median over the VALID runs the "
            f"search judged it by, error bars its 95% interval) against its {metric.name} "
            "change versus the best FP32 (paired, error bars its 95% interval). Star: the "
            "recommendation; blue diamonds: the tied candidates (or, with no answer, the "
            "closest one); grey: dropped by the search; hollow: no accuracy result. Red lines: "
            "the limits.")


def objective_label(objective: str) -> str:
    """``latency_ms`` -> ``latency (ms)``: the axis and the tables name it so."""
    name = "latency" if objective == "latency_ms" else "throughput"
    return f"{name} ({UNITS.get(objective, objective)})"


def load(folders: list[str | Path]) -> list[RecommendationRecord]:
    """Every recommendation under ``folders`` (an unreadable one is left out and said)."""
    return records_under(folders, FOLDER_PREFIX, RECOMMENDATION, RecommendationRecord)


def title(record: RecommendationRecord) -> str:
    where = record.machine.get("node") or record.machine.get("hostname") or "this machine"
    return f"{record.model}, {record.scenario}, on {where}"


def _by_key(record: RecommendationRecord) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in record.candidates}


def candidate_lines(record: RecommendationRecord, c: dict[str, Any]) -> list[str]:
    """One candidate's evidence: its figure, accuracy change, executed precision, disturbance."""
    unit = UNITS.get(record.objective, "")
    figure = c.get("objective") or {}
    judged, runs = figure.get("n", 0), c.get("runs", 0)
    lines = [f"{objective_label(record.objective).split(' (')[0]}: "
             f"{figure.get('text', 'no valid run')} {unit if figure else ''}".rstrip()
             + f" over {judged} of its {runs} runs"]
    accuracy, metric = c.get("accuracy"), quality.metric_of(record)
    if not accuracy:
        lines.append("accuracy change: not measured")
    elif accuracy.get("why"):
        lines.append(f"accuracy change: unknown ({accuracy['why']})")
    else:
        lines.append(f"accuracy change vs {accuracy.get('reference', 'the best FP32')}: "
                     f"{accuracy.get('text', '')} pts ({metric.name} "
                     f"{number(quality.figure(accuracy, metric))}{metric.unit})"
                     + _resolving(accuracy, c["key"]))
        if accuracy.get("agreement"):  # label-free: what quantization changed, per sample
            lines.append(accuracy["agreement"])
    lines.append(f"executed precision: {c.get('executed_precision') or 'not recorded'}")
    disturbed = c.get("disturbed_runs", 0)
    kept = ("left out of its figures" if judged < c.get("valid_runs", 0) else
            "kept in its figures (too few quiet runs): rerun on a quiet machine")
    lines.append(f"DISTURBED: {disturbed} of its {runs} runs (other processes took the "
                 f"machine), {kept}" if disturbed else "no run of it was disturbed")
    return lines


def cannot_tell_lines(record: RecommendationRecord) -> list[str]:
    """The candidates the evidence could not judge against a limit: with no answer, why there
    is none; beside one, those that might beat it, each with what would tell it."""
    if not record.cannot_tell:
        return []
    keys = ", ".join(record.cannot_tell)
    head = (f"Nothing recommended: no candidate is known to meet the limits, and {keys} cannot "
            "be told against them on this evidence (a limit is judged by its interval, never "
            "by the point)" if record.verdict == "cannot tell" else
            f"Not ruled out: {keys} might beat it, but the evidence cannot tell whether they "
            "meet the limits (so they are not recommended)")
    return [head, *[f"  {line}" for lines in record.cannot_tell.values() for line in lines]]


def _resolving(accuracy: dict[str, Any], key: str) -> str:
    """``; the set resolves about ±4.5 points (60 independent units)`` where recorded: the
    smallest change its paired interval tells from none; where its units are too few for the
    interval to hold, that; nothing for the reference itself (no change by definition)."""
    low, high, units = accuracy.get("low"), accuracy.get("high"), accuracy.get("units")
    if not units or low is None or high is None:
        return ""
    if key.split()[0] == accuracy.get("reference") and low == high == 0:
        return "; the FP32 reference itself"
    if accuracy.get("decides") is False:
        from quantmark.report.stats import MIN_VERDICT_GROUPS  # scipy: only when it is said

        return (f"; its {units} independent units are too few for the interval to hold "
                f"(a verdict needs {MIN_VERDICT_GROUPS})")
    return f"; the set resolves about ±{(high - low) / 2:.2g} points ({units} independent units)"


def verdict_lines(record: RecommendationRecord) -> list[str]:
    """The answer in plain words, honest when there is none."""
    return _verdict_lines(record) + cannot_tell_lines(record)


def _verdict_lines(record: RecommendationRecord) -> list[str]:
    found = _by_key(record)
    tied = [key for key in record.tied if key in found]
    if record.verdict == "cannot tell":
        return []
    if record.verdict == "winner" and record.recommended:
        key = record.recommended["key"]
        return [f"Recommended: {key}", *[f"  {line}" for line in
                                          candidate_lines(record, record.recommended)],
                "Tied with it: none (no other candidate that meets the limits overlaps its "
                "interval)"]
    if record.verdict == "infeasible":
        flag = LIMITS.get(record.binding, (record.binding or "a limit", ""))[0]
        return [f"No candidate meets the limits: {flag} binds; closest: "
                f"{record.closest or 'none measured'}"]
    if record.verdict == "undecided":
        spent, budget = record.search.get("spent_s", 0) / 60, record.search.get("budget_s", 0) / 60
        needs = any((record.limits or {}).get(limit) is not None
                    for limit in ("max_accuracy_drop", "max_model_size_mb"))
        unmeasured = [key for key in tied if needs and not found[key].get("accuracy")]
        head = [f"Cannot tell {' and '.join(tied) or 'the leaders'} apart within the budget "
                f"({spent:.1f} of {budget:.1f} min): no pick by point estimate; a larger "
                "--budget may decide"] if not unmeasured else [
                f"The budget ({spent:.1f} of {budget:.1f} min) ended before the accuracy of "
                f"{' and '.join(unmeasured)} was measured: whether they meet the limits is "
                "unknown, so none is recommended; a larger --budget continues"]
    else:
        head = [f"Tied: {', '.join(tied)} cannot be told apart (their intervals overlap): "
                "pick among them by other reasons"]
    return head + one_sut_line(record, tied) + [
        line for key in tied for line in
        [f"{key}:", *[f"  {text}" for text in candidate_lines(record, found[key])]]]


def one_sut_line(record: RecommendationRecord, tied: list[str]) -> list[str]:
    """When every candidate left is one SUT, the decision made: that SUT, its settings
    (batch, threads, options) making no difference the runs could measure."""
    suts = {candidate["sut"] for candidate in record.candidates if candidate["key"] in tied}
    if len(tied) < 2 or len(suts) != 1:
        return []
    return [f"All of them are {suts.pop()}: the SUT is decided; its settings tried here made no "
            "difference these runs could measure"]


def excluded_lines(record: RecommendationRecord) -> list[str]:
    """What each limit cost: the best candidate it excluded, by how much it misses the limit
    and how much better than the recommendation it would have been."""
    lines, metric = [], quality.metric_of(record)
    for item in record.excluded:
        flag, unit = LIMITS.get(item["limit"], (item["limit"], ""))
        if item["limit"] == "max_accuracy_drop" and not quality.classifies(metric):
            unit = f"{metric.name} pts"  # top-1's read as before tasks: "pts"
        gain = item.get("objective_ratio")
        cost = (f"; {gain:.2f}x better on {objective_label(record.objective)} than the "
                "recommendation" if gain is not None else "")
        lines.append(f"{flag} {item['bound']:g} {unit} excluded {item['candidate']} "
                     f"({item['value']:.2f} {unit}, beyond the limit by {item['margin']:.2f})"
                     f"{cost}")
    return lines


def command_lines(record: RecommendationRecord) -> list[str]:
    """The exact commands to reproduce the answer's candidates."""
    lines = []
    for key, found in record.commands.items():
        lines.append(f"reproduce {key}: {found.get('run')}")
        if found.get("vendor"):
            lines.append(f"  the vendor tool: {found['vendor']}")
    return lines


def search_line(record: RecommendationRecord) -> str:
    runs = sum(c.get("runs", 0) for c in record.candidates)
    s = record.search
    return (f"search: {s.get('rounds', 0)} round(s), {runs} runs of {len(record.candidates)} "
            f"candidates, {s.get('spent_s', 0) / 60:.1f} of {s.get('budget_s', 0) / 60:.1f} "
            "min of runs")


def answer_lines(record: RecommendationRecord) -> list[str]:
    """Everything the answer says, in order: the verdict, the limits' costs, the commands,
    the search's size and its notes."""
    return [*verdict_lines(record), *excluded_lines(record), *command_lines(record),
            search_line(record), *record.search.get("notes", [])]


def _status(record: RecommendationRecord, c: dict[str, Any]) -> str:
    if record.recommended and c["key"] == record.recommended.get("key"):
        return "recommended"
    if c["key"] in record.tied:
        return "tied"
    if c["key"] in record.cannot_tell:
        return "cannot tell"
    return f"dropped: {c['dropped']}" if c.get("dropped") else "raced"


def _size(mb: float | None) -> str:
    """Megabytes to 3 significant digits: a 30 kB model is 0.0300, not 0.0."""
    return "-" if mb is None else f"{mb:.3g}"


def rows(record: RecommendationRecord) -> list[list[str]]:
    """Every candidate's evidence, one row each (``HEADER``)."""
    out = []
    for c in record.candidates:
        accuracy = c.get("accuracy") or {}
        out.append([c["key"], (c.get("objective") or {}).get("text", "-"),
                    accuracy.get("text") or "-", c.get("executed_precision") or "-",
                    f"{c.get('valid_runs', 0)}/{c.get('runs', 0)}",
                    str(c.get("disturbed_runs", 0)), number(c.get("memory_mb"), 0),
                    _size(accuracy.get("model_size_mb")), _status(record, c)])
    return out


def _header(record: RecommendationRecord) -> list[str]:
    named = {"objective": objective_label(record.objective),
             CHANGE: f"Δ {quality.metric_of(record).name} pts"}
    return [named.get(h, h) for h in HEADER]


def markdown(record: RecommendationRecord, level: str = "##") -> list[str]:
    lines = [f"{level} Recommendation: {title(record)}", ""]
    lines += [f"- {line.strip()}" for line in answer_lines(record)]
    lines += ["", f"{level}# Every candidate measured", ""]
    return lines + markdown_table(_header(record), rows(record))


def to_html(record: RecommendationRecord) -> str:
    return (f"<h2>Recommendation: {html.escape(title(record))}</h2><ul>"
            + "".join(f"<li>{html.escape(line.strip())}</li>" for line in answer_lines(record))
            + "</ul><h3>Every candidate measured</h3>"
            + html_table(_header(record), rows(record)))


def markdown_all(records: list[RecommendationRecord]) -> list[str]:
    return [line for record in records for line in ["", *markdown(record)]]


def figures(records: list[RecommendationRecord]) -> list[Any]:
    """Each recommendation's Pareto figure (drawn when it ran) for the report's Figures."""
    from quantmark.report.figures import Figure

    found = []
    for record in records:
        path = Path(record.source).parent / (record.figure or "") if record.source else None
        if record.figure and path is not None and path.is_file():
            name = f"recommend-{record.model}-{record.scenario}.png"
            found.append(Figure("recommend", f"Recommendation: {title(record)}", name,
                                path.read_bytes(), "accuracy change against the objective",
                                caption(quality.metric_of(record))))
    return found


def print_recommendations(console: Any, records: list[RecommendationRecord]) -> None:
    """Each answer and its candidates' table (the command's screen, and ``run.py report``'s)."""
    from rich.markup import escape

    from quantmark.report.console_tables import table

    for record in records:
        console.print(f"[bold]Recommendation: {escape(title(record))}[/]", soft_wrap=True)
        for line in answer_lines(record):
            console.print(escape(line), soft_wrap=True)
        console.print(table("every candidate measured", _header(record), rows(record)))
