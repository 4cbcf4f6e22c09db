"""The "Diagnosis" section: where a reduced-precision SUT loses accuracy, layer by layer.

Reads the record a ``run.py diagnose`` writes (``"kind": "diagnosis"``) and renders it: the
worst layers with their op type and precision, the first jump, the recovery curve, CSV tables
and one figure (SQNR along the network with the worst layers marked; with a recovery curve, its
quality metric and throughput against K beside it). The curve's labels, its rows' quality keys
and CSV columns are the record's metric's (``report.quality``: its ``task``; top-1 for one
written before tasks). A detector's adds the final output's error and both SUTs' mAP."""

from __future__ import annotations

import csv
import html
import io
import logging
from pathlib import Path
from typing import Any

from quantmark.ground.metric import TOP1, Metric
from quantmark.ground.records import RESULTS, DiagnosisRecord
from quantmark.report.quality import metric_of, value_label
from quantmark.report.record_folders import records_under

log = logging.getLogger(__name__)

FOLDER_PREFIX = "diagnose-"  # <output>/<host-sut>/<model>/diagnose-<against>/

LAYER_COLUMNS = ("index", "name", "op_type", "precision", "reference", "reference_precision",
                 "matched_by", "shape", "sqnr_db", "cosine", "lost_db", "worst_rank")


def recovery_columns(key: str) -> tuple[str, ...]:
    """The recovery CSV's header, its quality columns named by the metric's ``key``."""
    return ("label", "k", key, f"{key}_change", "samples_per_s", "speed_vs_k0", "speed_lost_pct",
            f"{key}_per_speed_point", "ms_per_batch", "predicted_ms", "prediction_error_pct",
            f"{key}_per_ms", "disturbed_rounds", "excluded", "recover_by", "excluded_cost_ms")


def load(folders: list[str | Path]) -> list[DiagnosisRecord]:
    """Every diagnosis under ``folders``: the record in each ``diagnose-<against>/`` folder
    (no run's record is opened). One this version cannot read is left out, and said."""
    found = []
    for record in records_under(folders, FOLDER_PREFIX, RESULTS, DiagnosisRecord):
        if _readable(record):
            found.append(record)
        else:
            log.warning("skipping %s: a diagnosis this quantmark version cannot read "
                        "(run python run.py diagnose again)", record.source)
    return found


LAYER_KEYS = ("name", "op_type", "precision", "reference", "reference_precision", "matched_by",
              "shape", "sqnr_db", "cosine", "lost_db")


def _readable(record: DiagnosisRecord) -> bool:
    """Every layer has the keys the section reads (an older or hand-edited file is skipped;
    the record's own fields the loader checked)."""
    return all(isinstance(layer, dict) and all(key in layer for key in LAYER_KEYS)
               for layer in record.layers)


def _csv(header: tuple[str, ...], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def _ranks(record: DiagnosisRecord) -> dict[str, int]:
    return {name: rank for rank, name in enumerate(record.worst, start=1)}


def layers_csv(record: DiagnosisRecord) -> str:
    ranks = _ranks(record)
    return _csv(LAYER_COLUMNS, [
        [i, layer["name"], layer["op_type"], layer["precision"], layer["reference"],
         layer["reference_precision"], layer["matched_by"], "x".join(map(str, layer["shape"])),
         layer["sqnr_db"], layer["cosine"], layer["lost_db"], ranks.get(layer["name"], "")]
        for i, layer in enumerate(record.layers)])


def _interval(value: dict[str, Any] | None, key: str, fmt: str) -> str:
    if not value:
        return ""
    low, high = value.get("low"), value.get("high")
    point = fmt.format(value[key])
    return point if low is None or high is None else f"{point} [{fmt.format(low)}, " \
                                                     f"{fmt.format(high)}]"


def _number(value: float | None, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def recovery_cells(row: dict[str, Any], metric: Metric = TOP1) -> list[str]:
    """A curve point as the tables show it, its quality under the metric's key (a record
    written before the latency columns leaves them empty)."""
    key = metric.key
    flag = f" ({row['disturbed_rounds']} disturbed)" if row.get("disturbed_rounds") else ""
    return [row["label"], "" if row["k"] is None else str(row["k"]), f"{row[key]:.2f}",
            _interval(row.get(f"{key}_change_vs_k0"), "points", "{:+.2f}"),
            _interval(row["samples_per_s"], "median", "{:.1f}") + flag,
            _interval(row["speed_vs_k0"], "ratio", "{:.3f}"),
            f"{row['speed_lost_pct']:.1f}", _number(row.get(f"{key}_per_speed_point"), "{:.2f}"),
            _interval(row.get("ms_per_batch"), "median", "{:.3f}"),
            _number(row.get("predicted_ms"), "{:.3f}") or (
                "unknown" if row.get("prediction_unknown") else ""),
            _number(row.get("prediction_error_pct"), "{:+.1f}"),
            _number(row.get(f"{key}_per_ms"), "{:.2f}"),
            str(row.get("disturbed_rounds", 0)), " ".join(row.get("excluded", []))]


def recovery_csv(record: DiagnosisRecord) -> str:
    recovery, metric = record.recovery or {}, metric_of(record)
    cost = {c["name"]: c["cost_ms"] for c in recovery.get("candidates", [])}
    return _csv(recovery_columns(metric.key), [
        recovery_cells(row, metric) + [recovery.get("recover_by", "accuracy"), " ".join(
            f"{name}={_number(cost.get(name), '{:.4f}') or 'unknown'}"
            for name in row.get("excluded", []))] for row in recovery["rows"]])


COST_HEADER = ["order", "layer", "op", "lost dB", "INT8 ms", "float ms", "cost ms",
               "dB per ms", "matched by", "unknown because"]


def cost_rows(record: DiagnosisRecord) -> list[list[str]]:
    """Each candidate layer of the recovery in the order used, with its cost in ms of being
    kept in float (time in the reference minus time in the INT8 model, per batch)."""
    return [[str(rank), c["name"], c["op_type"], f"{c['lost_db']:.1f}",
             _number(c.get("int8_ms"), "{:.4f}"), _number(c.get("float_ms"), "{:.4f}"),
             _number(c.get("cost_ms"), "{:+.4f}") or "unknown",
             _number(c.get("db_per_ms"), "{:.1f}"), c.get("matched_by", ""), c.get("why", "")]
            for rank, c in enumerate((record.recovery or {}).get("candidates", []), start=1)]


def cost_title(record: DiagnosisRecord) -> str:
    recovery = record.recovery or {}
    by = recovery.get("recover_by", "accuracy")
    return (f"Recovery candidates priced in ms (batch {recovery.get('batch_size')}), ordered "
            + ("by SQNR recovered per ms of cost" if by == "ms" else "by SQNR lost"))


def worst_rows(record: DiagnosisRecord) -> list[list[str]]:
    """rank, layer, op, precision, SQNR, SQNR lost, cosine, matched: the worst layers."""
    by_name = {layer["name"]: layer for layer in record.layers}
    jump = record.first_jump
    rows = []
    for rank, name in enumerate(record.worst, start=1):
        layer = by_name[name]
        rows.append([str(rank), name + (" (first jump)" if name == jump else ""),
                     layer["op_type"], layer["precision"], f"{layer['sqnr_db']:.1f}",
                     f"{layer['lost_db']:.1f}", f"{layer['cosine']:.4f}", layer["matched_by"]])
    return rows


WORST_HEADER = ["rank", "layer", "op", "precision", "SQNR dB", "lost dB", "cosine",
                "matched by"]
def recovery_header(metric: Metric) -> list[str]:
    """The recovery curve's columns, the quality ones named by the diagnosis' metric."""
    return ["model", "K", value_label(metric), "change vs K=0 [95%]", "samples/s [95%]",
            "x K=0 [95%]", "speed lost %", f"{metric.name} pt per speed pt",
            "ms/batch [95%]", "predicted ms", "prediction error %", f"{metric.name} pt per ms",
            "disturbed", "kept in FP32"]


RECOVERY_HEADER = recovery_header(TOP1)  # a classifier's, as every diagnosis so far


def recovery_table(record: DiagnosisRecord) -> tuple[list[str], list[list[str]]]:
    """The recovery curve's header and cells, named and read by the record's metric."""
    metric = metric_of(record)
    return recovery_header(metric), [recovery_cells(row, metric)
                                     for row in (record.recovery or {}).get("rows", [])]


def agreement(records: list[DiagnosisRecord], top: int = 6) -> list[tuple[str, list[str],
                                                                       list[list[str]]]]:
    """Do frameworks agree on where precision is lost? For each model and reference that
    several diagnoses share (``--against`` one SUT), every reference layer in any of their
    worst ``top``: its rank in each (a dash where it is not among them). Returns (title,
    header, rows) per group, layers ordered by their best rank."""
    groups: dict[tuple[str, str], list[DiagnosisRecord]] = {}
    for record in records:
        groups.setdefault((record.model, record.against), []).append(record)
    tables = []
    for (model, against), group in groups.items():
        suts = sorted({record.sut for record in group})
        if len(suts) < 2:
            continue
        ranks: dict[str, dict[str, int]] = {}
        for record in group:
            reference = {layer["name"]: layer["reference"] for layer in record.layers}
            for rank, name in enumerate(record.worst[:top], start=1):
                ranks.setdefault(reference[name], {})[record.sut] = rank
        order = sorted(ranks, key=lambda layer: (min(ranks[layer].values()),
                                                 -len(ranks[layer])))
        rows = [[layer, *[str(ranks[layer].get(sut, "-")) for sut in suts],
                 f"{len(ranks[layer])} of {len(suts)}"] for layer in order]
        tables.append((f"{model}: worst {top} layers of each SUT, named as {against} names "
                       "them", [f"{against} layer", *suts, "among the worst of"], rows))
    return tables


def title(record: DiagnosisRecord) -> str:
    damage = "".join(f", damaged {name} x{factor:g}" for name, factor in record.damage)
    return (f"{record.model}: {record.sut} against {record.against} "
            f"({record.samples} samples{damage})")


def summary_lines(record: DiagnosisRecord) -> list[str]:
    matched = ", ".join(f"{n} by {how}" for how, n in record.matched.items())
    unmatched = record.unmatched
    rule = record.jump_rule
    lines = [f"layers matched: {matched or 'none'}; unmatched: "
             f"{len(unmatched.get('test', []))} of {record.sut}, "
             f"{len(unmatched.get('reference', []))} of {record.against}",
             f"first jump (the first layer losing >= {rule.get('jump_db', 6):g} dB of SQNR and "
             f"within {rule.get('near_worst_db', 1):g} dB of the most any layer loses): "
             f"{record.first_jump or 'none'}",
             f"capture: {record.capture['test']['method']}",
             f"precision: {record.capture['test']['precision_source']}"]
    if record.exclusion:
        lines.append(f"recovery keeps layers in FP32 with {record.exclusion}")
    if record.recovery_failed:
        lines.append(f"RECOVERY FAILED: {record.recovery_failed}")
    return lines + quality_lines(record) + cost_lines(record.recovery or {})


def quality_lines(record: DiagnosisRecord) -> list[str]:
    """What the layers' errors come to at the end, where the task's answer is not one class
    (a detector): the final output's error, and both SUTs' metric on the diagnosed images
    (``diagnosis.output_quality``'s ``quality``); none for a classifier's record."""
    quality = record.quality
    if not isinstance(quality, dict):
        return []
    metric = metric_of(record)
    out = quality.get("output") or {}
    if out.get("sqnr_db") is not None:
        error = f"SQNR {out['sqnr_db']:.1f} dB, cosine {out['cosine']:.4f}"
    elif out.get("identical"):
        error = "identical to the reference's"
    else:
        error = (f"not comparable (shape {out.get('shape')} against "
                 f"{out.get('reference_shape')})")
    change = quality.get("change_points") or {}
    return [f"final output {out.get('shape')}: {error}",
            f"{metric.name} on the {quality.get('images')} diagnosed images: {record.sut} "
            f"{quality.get('test', float('nan')):.2f}, {record.against} "
            f"{quality.get('reference', float('nan')):.2f} ({change.get('delta', 0.0):+.2f} pt "
            f"[{change.get('low', 0.0):+.2f}, {change.get('high', 0.0):+.2f}], "
            f"{change.get('method', '')})"]


def cost_lines(recovery: dict[str, Any]) -> list[str]:
    """The curve's order, and the candidates whose cost is unknown, in a line each."""
    if "candidates" not in recovery:
        return []
    by = recovery.get("recover_by", "accuracy")
    lines = [f"recovery order: --recover-by {by} ("
             + ("SQNR recovered per ms of predicted cost, most first" if by == "ms"
                else "SQNR lost, most first") + "): " + ", ".join(recovery.get("order", []))]
    unknown = [c for c in recovery["candidates"] if c.get("cost_ms") is None]
    if unknown:
        why = recovery.get("costs", {}).get("why_unknown") or unknown[0].get("why", "")
        lines.append(f"recovery cost unknown for {len(unknown)} of "
                     f"{len(recovery['candidates'])} candidate layers"
                     + (f" (first: {unknown[0]['name']}: {why})" if why else ""))
    return lines


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    return ([f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
            + [f"| {' | '.join(esc(c) for c in row)} |" for row in rows])


def markdown(record: DiagnosisRecord, level: str = "##", figure_link: bool = True) -> list[str]:
    lines = [f"{level} Diagnosis: {title(record)}", ""]
    lines += [f"- {line}" for line in summary_lines(record)] + [""]
    lines += _md_table(WORST_HEADER, worst_rows(record))
    if record.recovery:
        lines += ["", f"{level}# Recovery curve ({record.recovery['eval_samples']} samples, "
                      f"{record.recovery['rounds']} interleaved speed rounds)", ""]
        lines += _md_table(*recovery_table(record))
        if cost_rows(record):
            lines += ["", f"{level}# {cost_title(record)}", ""] + _md_table(COST_HEADER,
                                                                        cost_rows(record))
    if record.figure and figure_link:
        lines += ["", f"![diagnosis]({record.figure})"]
    return lines


def agreement_markdown(records: list[DiagnosisRecord]) -> list[str]:
    lines: list[str] = []
    for heading, header, rows in agreement(records):
        lines += ["", f"## Diagnosis agreement: {heading}", ""] + _md_table(header, rows)
    return lines


def agreement_html(records: list[DiagnosisRecord]) -> str:
    return "\n".join(f"<h2>Diagnosis agreement: {html.escape(heading)}</h2>"
                     + _html_table(header, rows)
                     for heading, header, rows in agreement(records))


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def to_html(record: DiagnosisRecord) -> str:
    table = _html_table
    parts = [f"<h2>Diagnosis: {html.escape(title(record))}</h2><ul>"
             + "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(record))
             + "</ul>", table(WORST_HEADER, worst_rows(record))]
    if record.recovery:
        parts.append(table(*recovery_table(record)))
        if cost_rows(record):
            parts.append(f"<h3>{html.escape(cost_title(record))}</h3>"
                         + table(COST_HEADER, cost_rows(record)))
    return "\n".join(parts)


def figures(records: list[DiagnosisRecord]) -> list[Any]:
    """Each diagnosis' figure (drawn when it ran) for the report's Figures section."""
    from quantmark.report.figures import Figure

    found = []
    for record in records:
        path = Path(record.folder or ".") / (record.figure or "")
        if record.figure and record.folder and path.is_file():
            name = f"diagnosis-{record.model}-{record.sut}-{record.against}.png"
            found.append(Figure("diagnosis", f"Diagnosis: {title(record)}", name,
                                path.read_bytes(), f"layer errors of {record.sut}",
                                "Blue: each layer's SQNR against the reference; bars: the "
                                "SQNR lost at the layer; red marks: the worst layers."))
    return found


def draw(record: DiagnosisRecord, path: Path) -> Path | None:
    """The diagnosis figure: SQNR and added error along the network, worst layers marked
    (and, with a recovery curve, its metric and throughput against K). None without
    matplotlib."""
    try:
        import matplotlib  # noqa: F401 - whether it is installed

        from quantmark.report import canvas
    except ImportError:
        log.warning("matplotlib is not installed: no diagnosis figure")
        return None
    from quantmark.ground.hashing import atomic_write_bytes

    rows = (record.recovery or {}).get("rows", [])
    fig, axes = canvas.subplots(1, 2 if rows else 1, figsize=(13 if rows else 9, 4.2),
                             gridspec_kw={"width_ratios": [2.2, 1]} if rows else None,
                             squeeze=False)
    _draw_layers(axes[0][0], record)
    if rows:
        _draw_recovery(axes[0][1], rows, metric_of(record))
    fig.suptitle(title(record), fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    atomic_write_bytes(path, out.getvalue())
    return path


def _draw_layers(ax: Any, record: DiagnosisRecord) -> None:
    layers = record.layers
    x = list(range(len(layers)))
    ax.plot(x, [min(layer["sqnr_db"], 80) for layer in layers], color="tab:blue", marker=".",
            label="SQNR against the reference")
    ax.bar(x, [layer["lost_db"] for layer in layers], color="tab:orange", alpha=0.6,
           label="SQNR lost at the layer")
    ranks = _ranks(record)
    for i, layer in enumerate(layers):
        if layer["name"] in ranks and ranks[layer["name"]] <= 5:
            ax.annotate(f"#{ranks[layer['name']]} {layer['name']}", (i, layer["lost_db"]),
                        fontsize=6, rotation=60, xytext=(0, 4), textcoords="offset points")
            ax.plot([i], [layer["lost_db"]], "rv")
        if layer["name"] == record.first_jump:
            ax.axvline(i, color="tab:red", linestyle=":", label="first jump")
    floor = min([0.0] + [layer["sqnr_db"] for layer in layers])
    fp32 = [i for i, layer in enumerate(layers) if not layer["precision"].startswith("int")]
    if fp32:
        ax.plot(fp32, [floor - 2] * len(fp32), "k|", markersize=10, label="layer not in int8")
    ax.set_ylim(floor - 4, None)
    ax.set_xlabel("layer (graph order)")
    ax.set_ylabel("dB (higher is closer to the reference)")
    ax.legend(fontsize=7, loc="upper right")


def _draw_recovery(ax: Any, rows: list[dict[str, Any]], metric: Metric) -> None:
    curve = [row for row in rows if row["k"] is not None]
    ks = [row["k"] for row in curve]
    ax.plot(ks, [row[metric.key] for row in curve], "o-", color="tab:green",
            label=value_label(metric))
    ref = next((row for row in rows if row["k"] is None), None)
    if ref:
        ax.axhline(ref[metric.key], color="tab:green", linestyle="--", label=ref["label"])
    ax.set_xticks(ks)
    ax.set_xlabel("K layers kept in FP32")
    ax.set_ylabel(value_label(metric))
    speed = ax.twinx()
    medians = [row["samples_per_s"]["median"] for row in curve]
    low = [m - (row["samples_per_s"]["low"] or m) for m, row in zip(medians, curve, strict=True)]
    high = [(row["samples_per_s"]["high"] or m) - m for m, row in zip(medians, curve, strict=True)]
    speed.errorbar(ks, medians, yerr=[low, high], fmt="s-", color="tab:purple", capsize=3,
                   label="samples/s")
    speed.set_ylabel("samples/s (95% interval)")
    ax.legend(fontsize=7, loc="lower left")
    speed.legend(fontsize=7, loc="lower right")
