"""Why isn't INT8 faster: one SUT's per-layer times against another's, in one vocabulary.

Each framework's ``profile`` module (``quantmark.sut.profiling``) hands a ``Profile`` in its own
names. Here the rows become layers: each compute node with the overhead the framework put
beside it (reorders, quantize/dequantize, converts, layout transposes are attributed to the
compute node they precede, or the last one for trailing ones); two profiles' layers are paired
by graph position (the run of op kinds aligned as a diff aligns lines, names first where both
have them, as the accuracy diagnosis pairs layers); and the answers follow: time per layer in
each SUT and the ratio, the shares of INT8 compute, float compute and overhead, the layers where
the test is slower ranked by milliseconds lost, and whether the per-layer sum adds up to the
end-to-end time measured in the same loop.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from quantmark.diagnosis.layer_errors import op_kind
from quantmark.sut.profiling import LayerTime, Profile

SUM_TOLERANCE = 0.10  # the per-layer sum within 10% of the end-to-end time
INT8 = ("int8", "uint8")


@dataclass
class Layer:
    """A compute node of the executed model, with the overhead attributed to it."""

    name: str
    op_type: str
    kernel: str
    precision: str
    compute_ms: float
    overhead: list[LayerTime] = field(default_factory=list)

    @property
    def overhead_ms(self) -> float:
        return sum(row.median_ms for row in self.overhead)

    @property
    def total_ms(self) -> float:
        return self.compute_ms + self.overhead_ms


def layers(profile: Profile) -> list[Layer]:
    """The profile's compute rows in order, each carrying the overhead rows before it (trailing
    overhead goes to the last compute row); "other" rows are left out."""
    found: list[Layer] = []
    pending: list[LayerTime] = []
    for row in profile.layers:
        if row.category == "overhead":
            pending.append(row)
        elif row.category == "compute":
            found.append(Layer(row.name, row.op_type, row.kernel, row.precision,
                               row.median_ms, pending))
            pending = []
    if pending and found:
        found[-1].overhead.extend(pending)
    return found


def shares(profile: Profile) -> dict[str, float]:
    """Where the time goes: INT8 compute, float compute, overhead and other, as fractions of
    the per-layer sum; and how much of the model is INT8 (compute nodes, and their time)."""
    total = profile.layer_sum_ms or 1.0
    compute = [row for row in profile.layers if row.category == "compute"]
    int8 = [row for row in compute if row.precision in INT8]
    spent = {"int8_compute": sum(r.median_ms for r in int8),
             "float_compute": sum(r.median_ms for r in compute if r.precision not in INT8),
             "overhead": sum(r.median_ms for r in profile.layers if r.category == "overhead"),
             "other": sum(r.median_ms for r in profile.layers if r.category == "other")}
    result = {f"{key}_share": value / total for key, value in spent.items()}
    result["int8_nodes"] = len(int8) / len(compute) if compute else 0.0
    compute_ms = spent["int8_compute"] + spent["float_compute"]
    result["int8_compute_time"] = spent["int8_compute"] / compute_ms if compute_ms else 0.0
    return result


def sum_check(profile: Profile, tolerance: float = SUM_TOLERANCE) -> dict[str, object]:
    """Does the per-layer sum add up to the end-to-end time of the same loop? What is left is
    named: the framework's own work between nodes (scheduling, input and output copies)."""
    total, whole = profile.layer_sum_ms, profile.end_to_end_ms
    gap = whole - total
    ratio = total / whole if whole else 0.0
    return {"layer_sum_ms": total, "end_to_end_ms": whole, "ratio": ratio,
            "within": abs(1.0 - ratio) <= tolerance,
            "unattributed_ms": gap,
            "unattributed": ("framework work between nodes (scheduling, input/output copies)"
                             if gap >= 0 else "nodes timed in parallel overlap (threads)")}


@dataclass
class Row:
    """One layer in both SUTs (either side None where only one has it)."""

    test: Layer | None
    reference: Layer | None
    matched_by: str

    @property
    def ms_lost(self) -> float:
        """Milliseconds the test spends on this layer beyond the reference."""
        return (self.test.total_ms if self.test else 0.0) - (
            self.reference.total_ms if self.reference else 0.0)

    @property
    def ratio(self) -> float | None:
        if not self.test or not self.reference or not self.reference.total_ms:
            return None
        return self.test.total_ms / self.reference.total_ms


def compare(test: Profile, reference: Profile) -> list[Row]:
    """Pair the two profiles' layers: by name where both have it (in order), then, between
    named pairs, by position in the run of op kinds (``difflib``), so a layer one model has and
    the other lacks (fused away, added) shifts nothing after it."""
    mine, theirs = layers(test), layers(reference)
    index = {layer.name: j for j, layer in enumerate(theirs)}
    named: list[tuple[int, int]] = []
    for i, layer in enumerate(mine):
        j = index.get(layer.name)
        if j is not None and op_kind(theirs[j].op_type) == op_kind(layer.op_type) and (
                not named or j > named[-1][1]):
            named.append((i, j))
    paired = {i: (j, "name") for i, j in named}
    bounds = [(-1, -1), *named, (len(mine), len(theirs))]
    for (i0, j0), (i1, j1) in zip(bounds, bounds[1:], strict=False):
        aligner = difflib.SequenceMatcher(
            None, [op_kind(x.op_type) for x in mine[i0 + 1:i1]],
            [op_kind(x.op_type) for x in theirs[j0 + 1:j1]], autojunk=False)
        for block in aligner.get_matching_blocks():
            for k in range(block.size):
                paired[i0 + 1 + block.a + k] = (j0 + 1 + block.b + k, "position")
    taken = {j for j, _ in paired.values()}
    rows = [Row(layer, theirs[paired[i][0]] if i in paired else None,
                paired[i][1] if i in paired else "test only") for i, layer in enumerate(mine)]
    rows += [Row(None, layer, "reference only") for j, layer in enumerate(theirs)
             if j not in taken]
    return rows


def slower(rows: Sequence[Row], k: int = 10) -> list[Row]:
    """The layers where the test is slower than the reference, most milliseconds lost first."""
    return sorted((row for row in rows if row.ms_lost > 0), key=lambda r: -r.ms_lost)[:k]
