"""A profile's tables and figure: per layer in both SUTs with the ratio, the time shares, the
layers where the test is slower ranked by milliseconds lost, and the sum check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LAYER_HEADER = ("layer (test)", "kernel", "precision", "ms", "+overhead ms", "layer (ref)",
                "ref precision", "ref ms", "ratio", "ms lost", "matched by")
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
        out.append((test.get("name", "-"), test.get("kernel", "-") or "-",
                    test.get("precision", "-") or "-", _ms(test.get("compute_ms")),
                    _ms(test.get("overhead_ms")), ref.get("name", "-"),
                    ref.get("precision", "-") or "-", _ms(ref.get("total_ms")),
                    "-" if ratio is None else f"{ratio:.2f}x", f"{row['ms_lost']:+.3f}",
                    row.get("matched_by", "")))
    return out


def share_lines(record: dict[str, Any]) -> list[str]:
    """Where each side's time goes, how much of it is INT8, and whether its layers add up."""
    lines = []
    for key in ("test", "reference"):
        side = record.get(key)
        if not side:
            continue
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
    for name, why in (record.get("unsupported") or {}).items():
        lines.append(f"{name}: not profiled: {why}")
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


def write_figure(path: Path, record: dict[str, Any]) -> bool:
    """One stacked bar per SUT: INT8 compute, float compute, overhead, other, in ms per
    inference, and the end-to-end time as a tick. False where neither side was profiled."""
    sides = [record[k] for k in ("test", "reference") if record.get(k)]
    if not sides:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.8 * len(sides)))
    for y, side in enumerate(sides):
        left = 0.0
        total = side["sum_check"]["layer_sum_ms"]
        for name, key in zip(SHARE_NAMES, SHARE_KEYS, strict=True):
            width = side["shares"][key] * total
            ax.barh(y, width, left=left, label=name if y == 0 else None)
            left += width
        ax.plot([side["end_to_end_ms"]] * 2, [y - 0.4, y + 0.4], color="black")
    ax.set_yticks(range(len(sides)), [side["sut"] for side in sides])
    ax.set_xlabel("ms per inference (black tick: end to end, same loop)")
    ax.legend(ncols=4, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
