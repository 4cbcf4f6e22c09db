"""A profile's tables and figure: per layer (named by the canonical ONNX model's node) in both
SUTs with the ratio, every SUT side by side where several were compared, the time shares, the
layers where the test is slower ranked by milliseconds lost, and the sum check. A task's
postprocessing (a detector's NMS) is rows after the layers and a line per side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LAYER_HEADER = ("ONNX layer", "layer (test)", "kernel", "precision", "ms", "+overhead ms",
                "layer (ref)", "ref precision", "ref ms", "ratio", "ms lost", "matched by")
SHARE_KEYS = ("int8_compute_share", "float_compute_share", "overhead_share", "other_share")
SHARE_NAMES = ("INT8 compute", "float compute", "overhead", "other")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def layer_rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The paired layers as table rows (``profile_run.row_record``'s)."""
    out = []
    for row in rows:
        test, ref = row.get("test") or {}, row.get("reference") or {}
        ratio = row.get("ratio")
        out.append((row.get("onnx_layer") or "-", test.get("name", "-"),
                    test.get("kernel", "-") or "-", test.get("precision", "-") or "-",
                    _ms(test.get("compute_ms")), _ms(test.get("overhead_ms")), ref.get("name", "-"),
                    ref.get("precision", "-") or "-", _ms(ref.get("total_ms")),
                    "-" if ratio is None else f"{ratio:.2f}x", f"{row['ms_lost']:+.3f}",
                    row.get("matched_by", "")))
    return out


def _side_suts(record: dict[str, Any]) -> list[str]:
    """The SUTs profiled side by side: the test, then the references in ``--against``'s order
    (one that could not profile has no column)."""
    rows = record.get("side_by_side") or []
    return [sut for sut in (record["sut"], *record.get("references", []))
            if rows and sut in rows[0]["suts"]]


def side_header(record: dict[str, Any]) -> tuple[str, ...]:
    """The side-by-side table's columns: the layer, then each SUT's ms and precision, then the
    test's ratio to the first reference profiled."""
    suts = _side_suts(record)
    return ("ONNX layer", *(f"{sut} ms" for sut in suts), f"x {suts[1]}" if len(suts) > 1
            else "ratio")


def side_rows(record: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every SUT's time of each layer, one row per ONNX layer (``side_by_side``)."""
    suts = _side_suts(record)
    out = []
    for row in record.get("side_by_side") or []:
        cells = [row["suts"].get(sut) for sut in suts]
        ms = [f"{c['total_ms']:.3f} {c['precision'] or '?'}" if c else "-" for c in cells]
        test, ref = cells[0], cells[1] if len(cells) > 1 else None
        ratio = (f"{test['total_ms'] / ref['total_ms']:.2f}x"
                 if test and ref and ref["total_ms"] else "-")
        out.append((row["layer"], *ms, ratio))
    return out


def _role_sides(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [side for side in sides(record) if side.get("roles") is not None]


def role_header(record: dict[str, Any]) -> tuple[str, ...]:
    """The by-role table's columns: the role, then each SUT's ms, share and kernels, then
    the test's ratio to the first reference profiled."""
    profiled = _role_sides(record)
    columns = [(f"{side['sut']} ms", "share", f"{side['sut']} kernels") for side in profiled]
    return ("role", *(c for group in columns for c in group),
            f"x {profiled[1]['sut']}" if len(profiled) > 1 else "ratio")


def role_rows(record: dict[str, Any]) -> list[tuple[str, ...]]:
    """A text model's time by role (attention, MatMul/Linear, softmax, layernorm,
    quantize/dequantize ...), one row per role any SUT spent time on, in each SUT."""
    profiled = _role_sides(record)
    out = []
    for role in dict.fromkeys(role for side in profiled for role in side["roles"]):
        found = [side["roles"].get(role) for side in profiled]
        label = next(entry["label"] for entry in found if entry)
        cells = [c for entry in found for c in (
            (_ms(entry["ms"]), f"{entry['share']:.0%}", kernels_text(entry["kernels"]))
            if entry else ("-", "-", "-"))]
        test, ref = found[0], found[1] if len(found) > 1 else None
        ratio = (f"{test['ms'] / ref['ms']:.2f}x" if test and ref and ref["ms"] else "-")
        out.append((label, *cells, ratio))
    return out


def kernels_text(kernels: dict[str, int], most: int = 3) -> str:
    """``MatMulIntegerToFloat int8 x6, DynamicQuantizeMatMul int8 x6``: the most used
    first."""
    shown = [f"{name} x{count}" if count > 1 else name
             for name, count in list(kernels.items())[:most]]
    more = len(kernels) - most
    return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def role_lines(record: dict[str, Any]) -> list[str]:
    """What each SUT's roles were read from."""
    return [f"{side['sut']}: roles from {side['roles_from']}" for side in _role_sides(record)]


def sides(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every profiled SUT's profile: the test, the reference, the further references."""
    return [record[k] for k in ("test", "reference") if record.get(k)] + list(
        (record.get("others") or {}).values())


def share_lines(record: dict[str, Any]) -> list[str]:
    """Where each side's time goes, how much of it is INT8, and whether its layers add up."""
    lines = []
    for side in sides(record):
        shares, check = side["shares"], side["sum_check"]
        parts = ", ".join(f"{name} {shares[k]:.0%}" for name, k in zip(SHARE_NAMES, SHARE_KEYS,
                                                                       strict=True))
        verdict = ("within 10%" if check["within"] else "NOT within 10%")
        lines.append(
            f"{side['sut']}: {parts}; {shares['int8_nodes']:.0%} of compute nodes INT8 "
            f"({shares['int8_compute_time']:.0%} of compute time); layers sum to "
            f"{check['layer_sum_ms']:.3f} ms of {check['end_to_end_ms']:.3f} ms end to end "
            f"({check['ratio']:.0%}, {verdict}; {check['unattributed_ms']:+.3f} ms: "
            f"{check['unattributed']})")
    lines += postprocess_lines(record)
    for name, why in (record.get("unsupported") or {}).items():
        lines.append(f"{name}: not profiled: {why}")
    return lines


def postprocess_lines(record: dict[str, Any]) -> list[str]:
    """Each side's postprocessing (a detector's NMS): outside every profiler, yet part of the
    SUT's timed work, so its share of predict plus postprocessing is said beside the layers."""
    lines = []
    for side in sides(record):
        post = side.get("postprocess")
        if not post:
            continue
        parts = ", ".join(f"{step['name'].removeprefix('postprocess: ')} "
                          f"{step['median_ms']:.3f} ms" for step in post["steps"])
        lines.append(f"{side['sut']}: postprocess after predict (in the SUT's timed work): "
                     f"{parts}; {post['total_ms']:.3f} ms, {post['share_of_sut_ms']:.0%} of "
                     "predict plus postprocess")
    return lines


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Every paired layer, one line each."""
    import csv
    import io

    from quantmark.ground.hashing import atomic_write_text

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([h.replace(" ", "_") for h in LAYER_HEADER])
    writer.writerows(layer_rows(rows))
    atomic_write_text(path, buffer.getvalue())


def _segments(profiled: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The figure's stacked parts: (name, ms of a side) per role where every side has its
    time by role (a text model), else INT8 compute, float compute, overhead and other."""
    if all(side.get("roles") is not None for side in profiled):
        labels = {role: entry["label"] for side in profiled
                  for role, entry in side["roles"].items()}
        return [(label, lambda side, role=role: (side["roles"].get(role) or {}).get("ms", 0.0))
                for role, label in labels.items()]
    return [(name, lambda side, key=key: side["shares"][key]
             * side["sum_check"]["layer_sum_ms"])
            for name, key in zip(SHARE_NAMES, SHARE_KEYS, strict=True)]


def write_figure(path: Path, record: dict[str, Any]) -> bool:
    """One stacked bar per SUT: INT8 compute, float compute, overhead, other (a text model:
    its roles, attention, MatMul/Linear ...), in ms per inference, and the end-to-end time as
    a tick. False where neither side was profiled."""
    profiled = sides(record)
    if not profiled:
        return False
    import matplotlib

    from quantmark.report import canvas

    segments = _segments(profiled)
    fig, ax = canvas.subplots(figsize=(7, 1.2 + 0.8 * len(profiled) + 0.1 * len(segments)))
    colors = matplotlib.colormaps["tab20"].colors
    for y, side in enumerate(profiled):
        left = 0.0
        for k, (name, ms) in enumerate(segments):
            width = ms(side)
            ax.barh(y, width, left=left, label=name if y == 0 else None,
                    color=colors[k % len(colors)])
            left += width
        ax.plot([side["end_to_end_ms"]] * 2, [y - 0.4, y + 0.4], color="black")
    ax.set_yticks(range(len(profiled)), [side["sut"] for side in profiled])
    ax.set_xlabel("ms per inference (black tick: end to end, same loop)")
    ax.legend(ncols=3 if len(segments) > 4 else 4, fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def print_profile(console: Any, found: dict[str, Any], every_layer: bool = True) -> None:
    """The slower layers, every layer (unless not ``every_layer``), every SUT side by side,
    and where each side's time goes (``run.py profile``'s console, and ``run.py report``'s)."""
    from rich.markup import escape

    from quantmark.report import console_tables as tables

    title = f"{found['sut']} against {found['against']}, {found['model']}"
    by_role = bool(_role_sides(found))  # a text model: its hundreds of nodes by role
    if found.get("slower"):
        console.print(tables.table(f"where {found['sut']} is slower: {title}", LAYER_HEADER,
                                   layer_rows(found["slower"])))
    if found.get("layers") and every_layer and not by_role:
        console.print(tables.table(f"every layer: {title}", LAYER_HEADER,
                                   layer_rows(found["layers"])))
    if found.get("side_by_side") and not by_role:
        console.print(tables.table(f"every SUT by ONNX layer, {found['model']}",
                                   side_header(found), side_rows(found)))
    if by_role:
        console.print(tables.table(f"where the time goes, by role: {title}",
                                   role_header(found), role_rows(found)))
    for line in share_lines(found) + role_lines(found):
        console.print(escape(line), soft_wrap=True)
    if by_role and every_layer:
        console.print("every layer, paired by ONNX layer: layers.csv", soft_wrap=True)
