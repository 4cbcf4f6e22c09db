"""What keeping a layer in float costs in milliseconds, from the frameworks' own profilers, for
``run.py diagnose --recover``.

The diagnosed INT8 SUT and its reference are profiled as ``run.py profile`` profiles them
(``hooks.profiler``, ``layer_times``): each compute node with the overhead attributed to
it, the two profiles' layers paired (through the canonical ONNX model's nodes where the
diagnosed layers bear their names, as ONNX Runtime's do; else by the frameworks' own names and
op positions). A candidate layer of the diagnosis is found among the INT8 profile's layers as
its ONNX node, else by name (the profiler's decorations stripped: ONNX Runtime's ``_token_N``,
``_nchwc`` and ``fused `` prefix; OpenVINO's fused nodes whose names extend the source op's
``/`` path), else by graph position (the run of op kinds aligned between the name anchors).
Its cost is its time in the reference minus its time in the INT8 model. A candidate with no
row, whose row has no reference counterpart, or whose rows compute another kind of op (a
pairing gone wrong) costs "unknown" and says why. Nothing is invented.

A recovery curve can then be ordered by SQNR recovered per millisecond (``order``), and each
point's latency predicted as K=0's measured latency plus the summed costs (``predict``).
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from quantmark.diagnosis import hooks, layer_times
from quantmark.diagnosis.layer_errors import op_kind
from quantmark.ground.errors import SutError, UserError
from quantmark.sut.profiling import Profile

log = logging.getLogger(__name__)

ORDERINGS = ("accuracy", "ms")
#: below this a cost is indistinguishable from free (OpenVINO's counters resolve 1 us): the
#: SQNR-per-ms ratio divides by at least this
COST_FLOOR_MS = 0.001
_DECORATION = re.compile(r"(_token_\d+)?(_nchwc)?(#\d+)?$")


@dataclass
class Cost:
    """One candidate layer and what keeping it in float costs (None: unknown, ``why`` says)."""

    name: str
    op_type: str
    lost_db: float
    cost_ms: float | None = None
    int8_ms: float | None = None  # its time in the INT8 profile, overhead included
    float_ms: float | None = None  # its counterpart's time in the reference profile
    int8_row: str = ""  # the profilers' own names of the rows
    float_row: str = ""
    matched_by: str = ""  # "onnx layer" | "name" | "position" (to the INT8 profile's layer)
    why: str = ""

    @property
    def db_per_ms(self) -> float | None:
        """SQNR recovered per millisecond of latency added; None where the cost is unknown."""
        if self.cost_ms is None:
            return None
        return self.lost_db / max(self.cost_ms, COST_FLOOR_MS)

    def record(self) -> dict[str, Any]:
        per_ms = self.db_per_ms
        return {**asdict(self), "cost_ms": _round(self.cost_ms), "int8_ms": _round(self.int8_ms),
                "float_ms": _round(self.float_ms), "lost_db": round(self.lost_db, 3),
                "db_per_ms": None if per_ms is None else round(per_ms, 3)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


def normal(name: str) -> str:
    """A profiler row's name without the decorations its framework adds to the node's."""
    return _DECORATION.sub("", name.removeprefix("fused "))


def _named(layer: str, found: Sequence[layer_times.Layer], after: int) -> int | None:
    """The first profile layer after ``after`` named as ``layer``: exactly (decorations off),
    else the first whose name extends ``layer``'s ``/`` path (OpenVINO's fused nodes)."""
    rows = list(enumerate(found))[after + 1:]
    exact = next((j for j, row in rows if normal(row.name) == layer), None)
    if exact is not None:
        return exact
    return next((j for j, row in rows if normal(row.name).startswith(layer + "/")), None)


def locate(layers: Sequence[tuple[str, str]],
           found: Sequence[layer_times.Layer]) -> dict[int, tuple[int, str]]:
    """Diagnosis layer (name, op type), in graph order -> (index of its profile layer, how):
    by name, in order; between name anchors, by position in the run of op kinds."""
    named: list[tuple[int, int]] = []
    for i, (name, _) in enumerate(layers):
        j = _named(name, found, named[-1][1] if named else -1)
        if j is not None:
            named.append((i, j))
    where = {i: (j, "name") for i, j in named}
    bounds = [(-1, -1), *named, (len(layers), len(found))]
    for (i0, j0), (i1, j1) in zip(bounds, bounds[1:], strict=False):
        aligner = difflib.SequenceMatcher(
            None, [op_kind(op) for _, op in layers[i0 + 1:i1]],
            [op_kind(row.op_type) for row in found[j0 + 1:j1]], autojunk=False)
        for block in aligner.get_matching_blocks():
            for k in range(block.size):
                where[i0 + 1 + block.a + k] = (j0 + 1 + block.b + k, "position")
    return where


def costs(candidates: Sequence[Any], layers: Sequence[tuple[str, str]], test: Profile | None,
          reference: Profile | None, why: str = "",
          graph: Sequence[layer_times.GraphNode] | None = None) -> list[Cost]:
    """Each candidate (a ``layer_errors.Pair``: name, op_type, lost_db) with its cost of being
    kept in float; ``layers``: every diagnosed layer (name, op type) in graph order; ``graph``:
    the canonical ONNX model's nodes, which pair the two profiles (and name a candidate that
    is an ONNX node) where given."""
    found = [Cost(c.name, c.op_type, float(c.lost_db)) for c in candidates]
    if test is None or reference is None:
        for cost in found:
            cost.why = why or "not profiled"
        return found
    rows = layer_times.compare(test, reference, graph)
    mine = [row for row in rows if row.test is not None]  # in the INT8 profile's order
    where = locate(layers, [row.test for row in mine if row.test is not None])
    index = {name: i for i, (name, _) in enumerate(layers)}
    onnx: dict[str, int] = {}
    for j, row in enumerate(mine):
        if row.test is not None and row.test.onnx_layer:
            onnx.setdefault(row.test.onnx_layer, j)
    for cost in found:
        spot = ((onnx[cost.name], "onnx layer") if cost.name in onnx
                else where.get(index.get(cost.name, -1)))
        if spot is None:
            cost.why = f"no row of {test.sut}'s profile is this layer"
            continue
        row = mine[spot[0]]
        assert row.test is not None
        cost.int8_row, cost.int8_ms, cost.matched_by = row.test.name, row.test.total_ms, spot[1]
        if row.reference is None:
            cost.why = f"{row.test.name} has no counterpart in {reference.sut}'s profile"
            continue
        cost.float_row, cost.float_ms = row.reference.name, row.reference.total_ms
        if not (same_kind(cost.op_type, row.test.op_type)
                and same_kind(cost.op_type, row.reference.op_type)):
            cost.why = (f"the rows paired with it ({row.test.op_type}, "
                        f"{row.reference.op_type}) do not compute a {cost.op_type}")
            continue
        cost.cost_ms = row.reference.total_ms - row.test.total_ms
    return found


def named_as_graph(layers: Sequence[tuple[str, str]],
                   graph: Sequence[layer_times.GraphNode] | None) -> bool:
    """Are the diagnosed layers named as the canonical ONNX model's nodes (ONNX Runtime,
    TensorRT)? Only then does the graph pair the profiles: a framework with names of its own
    pairs its INT8 and float rows by those names exactly, where mapping both onto the graph
    by op positions could merge or shift rows."""
    if not graph or not layers:
        return False
    names = {node.name for node in graph}
    return sum(name in names for name, _ in layers) * 2 >= len(layers)


def same_kind(a: str, b: str) -> bool:
    """Do two op types (of any framework) name one computation (``op_kind``, OpenVINO's
    FullyConnected spelled as LiteRT's)? A guard against a pairing that went wrong: a price is
    never read off another layer's row (a fused conv's off its float ReLU)."""
    def kind(op: str) -> str:
        return op_kind(op.lower().replace("fullyconnected", "fully_connected"))

    return kind(a) == kind(b)


def order(found: Sequence[Cost], by: str) -> list[Cost]:
    """``accuracy``: as given (most SQNR lost first); ``ms``: most SQNR recovered per ms of
    cost first (a layer faster in float is free), the unknown costs last in the given order."""
    if by not in ORDERINGS:
        raise UserError(f"--recover-by {by}: choose one of {', '.join(ORDERINGS)}")
    if by == "accuracy":
        return list(found)
    known = [cost for cost in found if cost.cost_ms is not None]
    if not known:
        why = found[0].why if found else "no candidate layer"
        raise UserError(f"--recover-by ms: no candidate layer has a measured cost ({why}); "
                        "use --recover-by accuracy")
    ranked = sorted(known, key=lambda c: (-(c.db_per_ms or 0.0), -c.lost_db))
    return ranked + [cost for cost in found if cost.cost_ms is None]


def predict(base_ms: float, excluded: Sequence[str],
            by_name: dict[str, Cost]) -> tuple[float | None, str]:
    """K=0's measured ms plus the excluded layers' costs; None (and why) where one is unknown."""
    unknown = [name for name in excluded if by_name.get(name) is None
               or by_name[name].cost_ms is None]
    if unknown:
        return None, f"cost unknown for {', '.join(unknown)}"
    return base_ms + sum(by_name[name].cost_ms or 0.0 for name in excluded), ""


def profile_pair(backends: Sequence[tuple[str, Any]], batch: Any, iterations: int,
                 warmup: int) -> tuple[list[Profile | None], str]:
    """Profile each (SUT name, loaded backend) on ``batch(layout)``; a side that cannot be
    profiled is None, and the first reason is returned in a line."""
    from quantmark.sut.registry import require_available

    found: list[Profile | None] = []
    why = ""
    for name, backend in backends:
        info = require_available(name)
        module = hooks.profiler(info)
        if module is None:
            found.append(None)
            why = why or f"{info.framework} ({name}) has no per-layer profiler in quantmark yet"
            continue
        try:
            found.append(module.profile(backend, batch(backend.layout), iterations, warmup))
        except SutError as exc:  # the framework's profiler or tool is missing here
            found.append(None)
            why = why or f"{name} could not be profiled: {exc}"
    if why:
        log.warning("recovery costs unknown: %s", why)
    return found, why


def add_predictions(rows: list[dict[str, Any]], by_name: dict[str, Cost]) -> None:
    """Beside each curve row's measured latency of a batch, the predicted one (K=0's measured
    ms plus its excluded layers' costs) and the prediction's error in % of the measured."""
    base = next(row for row in rows if row["k"] == 0)["ms_per_batch"]["median"]
    for row in rows:
        predicted, why = (None, "") if row["k"] is None else predict(base, row["excluded"],
                                                                     by_name)
        measured = row["ms_per_batch"]["median"]
        row["predicted_ms"] = _round(predicted)
        row["prediction_error_pct"] = (None if predicted is None or not measured
                                       else round(100.0 * (predicted - measured) / measured, 2))
        row["prediction_unknown"] = why
