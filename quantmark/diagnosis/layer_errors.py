"""Pairing two captures' layers and measuring how far one drifts from the other.

Pure numpy, no framework: the reduced-precision model's layers are matched to the reference's
by name where the converter kept names, else by position in the graph, op kind and output
shape (so two frameworks' captures pair up); each pair accumulates its error over the captured
samples (chunk by chunk, so no chunk needs to be kept); then the error each layer causes is
told from the error it receives.

* SQNR (dB) = 10 log10(sum(ref^2) / sum((ref - test)^2)): signal to quantization noise.
* cosine = sum(ref * test) / sqrt(sum(ref^2) sum(test^2)).
* lost (dB): the SQNR a layer loses against what it received, ``min(SQNR of its input,
  LOSSLESS_DB) - SQNR`` (0 when it loses none); several inputs count as their sum (signal and
  noise powers added), which is also what a residual Add that was not captured hands on, or,
  into a product (a Mul, a Div, attention's MatMul of two activations), as their relative
  noises added (noise-to-signal ratios: what a product of noisy factors carries). It
  counts both the noise the layer adds and the noise it amplifies (a projection that cancels
  signal but not noise); either way, it is where precision goes. Above ``LOSSLESS_DB`` an
  activation is as good as FP32 for a classifier, so a drop up there (the stem's, from a nearly
  exact input) costs nothing. The worst layers are those losing most.
* a reference value at or beyond ``MASKED`` (a transformer's attention mask: the float
  minimum added to padded positions, or an infinity) is a stand-in, not a signal: it counts in
  neither power, so a mask does not drown the scores it is added to.
* first jump: the first layer, in graph order, losing at least ``JUMP_DB`` and within
  ``NEAR_WORST_DB`` of the most any layer loses.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from quantmark.sut.layers import LayerOutput

#: a jump loses at least this much SQNR (noise power x4) in one layer
JUMP_DB = 6.0
#: ... and within this of the layer losing most
NEAR_WORST_DB = 1.0
#: an SQNR above this (cosine > 0.9995) counts as lossless: the baseline of the first layer,
#: and the most a layer's inputs are credited with
LOSSLESS_DB = 30.0
#: a magnitude at or beyond this is a mask's stand-in (float32's minimum, an infinity), left out
#: of signal and noise
MASKED = 1e30
#: op kinds whose inputs are factors: their relative noises add
PRODUCTS = frozenset({"mul", "div", "matmul"})
#: SQNR above this is "no measurable error" (float32 round-off of an identical computation)
CLEAN_DB = 120.0


def _sqnr(signal: float, noise: float) -> float:
    """SQNR in dB of summed signal and noise powers (CLEAN_DB for no measurable noise)."""
    if noise <= signal * 10 ** (-CLEAN_DB / 10):
        return CLEAN_DB
    if signal == 0.0:
        return -CLEAN_DB
    return 10.0 * math.log10(signal / noise)


@dataclass
class Pair:
    """One reduced-precision layer, its reference layer and their accumulated error."""

    name: str
    op_type: str
    precision: str
    reference: str
    reference_op: str
    reference_precision: str
    matched_by: str  # "name" | "position+shape"
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    signal: float = 0.0  # sum(ref^2)
    noise: float = 0.0  # sum((ref - test)^2)
    test_power: float = 0.0  # sum(test^2)
    dot: float = 0.0  # sum(ref * test)
    count: int = 0
    lost_db: float = 0.0  # SQNR lost against what it received (``attribute``)
    excludable: bool = True  # ``--recover`` can keep it in FP32

    def add(self, reference: np.ndarray, test: np.ndarray) -> None:
        ref = reference.astype(np.float64, copy=False).ravel()
        got = test.astype(np.float64, copy=False).ravel()
        kept = np.abs(ref) < MASKED  # where the reference holds a mask, both do
        if not kept.all():
            ref, got = ref[kept], got[kept]
        self.signal += float(ref @ ref)
        self.noise += float((ref - got) @ (ref - got))
        self.test_power += float(got @ got)
        self.dot += float(ref @ got)
        self.count += len(reference)

    @property
    def sqnr_db(self) -> float:
        return _sqnr(self.signal, self.noise)

    @property
    def cosine(self) -> float:
        norm = math.sqrt(self.signal * self.test_power)
        return self.dot / norm if norm else (1.0 if self.signal == self.test_power else 0.0)


@dataclass
class Matching:
    pairs: list[Pair]
    unmatched_test: list[str] = field(default_factory=list)
    unmatched_reference: list[str] = field(default_factory=list)
    #: every test layer's producers, matched or not (to see through an unmatched one)
    inputs_of: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def by_method(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pair in self.pairs:
            counts[pair.matched_by] = counts.get(pair.matched_by, 0) + 1
        return counts


def _shape(layer: LayerOutput) -> tuple[int, ...]:
    return tuple(int(d) for d in layer.value.shape[1:])


#: what an op computes, by a word in its name, whatever the framework calls it (Conv, Conv2d,
#: ConvReLU2d, CONV_2D, GroupConvolution; Gemm, Linear, FULLY_CONNECTED ...): first word wins,
#: so conv comes first (ONNX Runtime's QLinearConv holds "linear")
_KINDS = (("conv", ("conv",)), ("matmul", ("matmul", "gemm", "linear", "fully_connected")),
          ("add", ("add",)), ("mul", ("mul",)), ("pool", ("pool",)),
          ("mean", ("mean", "reduce")))


def op_kind(op_type: str) -> str:
    """The kind of computation ``op_type`` names, comparable across frameworks."""
    lower = op_type.lower()
    return next((kind for kind, words in _KINDS if any(w in lower for w in words)), lower)


def _token(layer: LayerOutput) -> tuple[str, tuple[int, ...]]:
    return op_kind(layer.op_type), _shape(layer)


def in_order(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The most ``(i, j)`` pairs (in ``i`` order) whose ``j`` run forward too, the earliest
    such run where several are as long. Two exports of one model may order independent
    branches differently (a text model's mask arithmetic before or after its embeddings): a
    pair out of order is left out, not every pair after it."""
    import bisect

    starts = [0] * len(pairs)  # the longest forward run starting at each pair
    ends: list[int] = []  # -j ending the best run of each length, read backwards
    for index in range(len(pairs) - 1, -1, -1):
        key = -pairs[index][1]
        k = bisect.bisect_left(ends, key)
        if k == len(ends):
            ends.append(key)
        else:
            ends[k] = key
        starts[index] = k + 1
    need, last, run = len(ends), -1, []
    for index, (i, j) in enumerate(pairs):
        if need and starts[index] == need and j > last:
            run.append((i, j))
            need, last = need - 1, j
    return run


def _same_producers(test: LayerOutput, reference: LayerOutput, named: set[str]) -> bool:
    """Both layers are fed by the same named layers (the same node of one model, which the
    two files put in another order)."""
    return bool(test.inputs) and tuple(test.inputs) == tuple(reference.inputs) and all(
        name in named for name in test.inputs)


def match(test: Sequence[LayerOutput], reference: Sequence[LayerOutput]) -> Matching:
    """Pair each ``test`` layer with a ``reference`` layer: by name first (same output shape),
    where the names run in the same order in both graphs, or where a layer out of that order
    is fed by the same named layers in both (one node of a model whose two files order its
    independent branches differently); then, between consecutive name pairs, by graph
    position: the two runs of (op kind, output shape) aligned as a diff aligns lines
    (``difflib``), so a layer one graph has and the other lacks (a residual Add one framework
    captures, another does not) shifts nothing after it."""
    ref_index = {layer.name: i for i, layer in enumerate(reference)}
    found = [(i, j) for i, layer in enumerate(test)
             for j in [ref_index.get(layer.name)]
             if j is not None and _shape(reference[j]) == _shape(layer)]
    named = in_order(found)  # graph position agrees: these bound the positional runs
    names = {test[i].name for i, _ in found}
    paired = {i: (j, "name") for i, j in found
              if (i, j) in named or _same_producers(test[i], reference[j], names)}
    taken = {j for j, _ in paired.values()}
    bounds = [(-1, -1)] + named + [(len(test), len(reference))]
    for (i0, j0), (i1, j1) in zip(bounds, bounds[1:], strict=False):
        mine = [i for i in range(i0 + 1, i1) if i not in paired]
        theirs = [j for j in range(j0 + 1, j1) if j not in taken]
        aligner = difflib.SequenceMatcher(None, [_token(test[i]) for i in mine],
                                          [_token(reference[j]) for j in theirs],
                                          autojunk=False)
        for block in aligner.get_matching_blocks():
            for k in range(block.size):
                paired[mine[block.a + k]] = (theirs[block.b + k], "position+shape")
    taken = {j for j, _ in paired.values()}
    pairs = [Pair(layer.name, layer.op_type, layer.precision, reference[j].name,
                  reference[j].op_type, reference[j].precision, how, layer.inputs,
                  _shape(layer), excludable=layer.excludable)
             for i, layer in enumerate(test) if i in paired
             for j, how in [paired[i]]]
    return Matching(pairs, [layer.name for i, layer in enumerate(test) if i not in paired],
                    [layer.name for j, layer in enumerate(reference) if j not in taken],
                    {layer.name: tuple(layer.inputs) for layer in test})


def accumulate(matching: Matching, test: Sequence[LayerOutput],
               reference: Sequence[LayerOutput]) -> None:
    """Add one chunk's outputs to every pair (the chunk's captures, same samples)."""
    tests = {layer.name: layer for layer in test}
    refs = {layer.name: layer for layer in reference}
    for pair in matching.pairs:
        got, ref = tests[pair.name].value, refs[pair.reference].value
        if got.shape != ref.shape:
            raise ValueError(f"layer {pair.name}: shape {got.shape} against {pair.reference}'s "
                             f"{ref.shape}")
        pair.add(ref, got)


def matched_producers(name: str, inputs_of: dict[str, tuple[str, ...]],
                      matched: set[str]) -> list[str]:
    """The nearest matched layers feeding ``name``, looking through unmatched ones (a residual
    Add only one framework captures)."""
    found, seen = [], set()
    stack = list(inputs_of.get(name, ()))
    while stack:
        producer = stack.pop()
        if producer in seen:
            continue
        seen.add(producer)
        if producer in matched:
            found.append(producer)
        else:
            stack.extend(inputs_of.get(producer, ()))
    return found


def attribute(pairs: list[Pair], inputs_of: dict[str, tuple[str, ...]] | None = None) -> None:
    """Set each pair's ``lost_db`` against what it received: its matched producers' signal and
    noise powers added up (the previous layer when the graph named none; a lossless input for
    the first). Independent terms of a sum add in power, so several producers reached through
    a residual Add or a Concat that was not captured give that merged value's SQNR."""
    powers = {pair.name: (pair.signal, pair.noise) for pair in pairs}
    graph = inputs_of or {pair.name: pair.inputs for pair in pairs}
    for index, pair in enumerate(pairs):
        producers = matched_producers(pair.name, graph, set(powers))
        if not producers and index and not graph.get(pair.name):
            producers = [pairs[index - 1].name]
        received = (LOSSLESS_DB if not producers
                    else min(LOSSLESS_DB, _received([powers[name] for name in producers],
                                                    op_kind(pair.op_type) in PRODUCTS)))
        pair.lost_db = max(0.0, received - pair.sqnr_db)


def _received(powers: list[tuple[float, float]], product: bool) -> float:
    """The SQNR of what several inputs hand a layer: of their sum (powers added), or into a
    product (noise-to-signal ratios added)."""
    if not product or len(powers) == 1:
        return _sqnr(sum(s for s, _ in powers), sum(n for _, n in powers))
    ratios = [10 ** (-_sqnr(signal, noise) / 10) for signal, noise in powers]
    return -10.0 * math.log10(sum(ratios))


def first_jump(pairs: Sequence[Pair], jump_db: float = JUMP_DB,
               near_db: float = NEAR_WORST_DB) -> Pair | None:
    """The first layer in graph order losing at least ``jump_db`` and within ``near_db`` of
    the most any layer loses (None: no layer loses ``jump_db``)."""
    if not pairs:
        return None
    threshold = max(jump_db, max(pair.lost_db for pair in pairs) - near_db)
    return next((pair for pair in pairs if pair.lost_db >= threshold), None)


def worst(pairs: Sequence[Pair], k: int) -> list[Pair]:
    """The ``k`` layers losing most SQNR (ties: the lower SQNR first)."""
    return sorted(pairs, key=lambda pair: (-pair.lost_db, pair.sqnr_db))[:k]
