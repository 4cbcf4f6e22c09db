"""torch-compile on a text encoder: the graphs compiled at load and the proof that they compute
the eager FP32 function and will not recompile during a measurement (see ``text``).

Fixed padding compiles static shapes (``dynamic=False``) at batch 1 and the run's batch size:
every batch has the full sequence length. Dynamic padding feeds each batch at its own length,
so it compiles one graph with symbolic batch and sequence (``dynamic=True``); torch specialises
a size of 1, so batch 1 gets a graph of its own and sequences are fed at least 2 tokens long.
Measured on the tiny test BERT (2 layers, hidden 32, 2 shared cores): about 20 s per static
shape, 28 s per dynamic graph, and no recompile for batches 2 to 128 tokens long afterwards.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError
from quantmark.models.text_graph import probe_tokens
from quantmark.sut.pytorch.shared import COMPILE_TOLERANCE, unique_graphs

Feeds = Callable[[np.ndarray], dict[str, torch.Tensor]]


def probe_batch(seq_len: int, size: int, length: int | None = None) -> np.ndarray:
    """``size`` valid samples ``[size, 3, length or seq_len]``: even rows full, odd rows half
    padding, so the masked path runs too."""
    tokens = probe_tokens(length or seq_len, size)
    half = max(1, tokens.shape[2] // 2)
    tokens[1::2, :2, half:] = 0
    return tokens


def compiled_sizes(batch_size: int, dynamic: bool) -> tuple[int, ...]:
    """The batch sizes compiled at load: 1 and the run's (dynamic: at least 2, the symbolic
    graph that serves every batch of 2 or more)."""
    if dynamic:
        return (1,) if batch_size == 1 else (1, max(2, batch_size))
    return tuple(sorted({1, batch_size}))


def _compare(name: str, compiled: Any, eager: nn.Module, feeds: dict[str, torch.Tensor]
             ) -> float:
    """The compiled output's max abs difference from eager FP32 on ``feeds``; SutError
    beyond ``COMPILE_TOLERANCE``."""
    with torch.inference_mode():
        got, want = compiled(**feeds), eager(**feeds)
    diff = float((got - want).abs().max())
    if got.dtype != torch.float32 or not torch.allclose(got, want, **COMPILE_TOLERANCE):
        raise SutError(f"{name}: compiled output differs from eager FP32 (max abs diff "
                       f"{diff:.3g}, dtype {got.dtype})")
    return diff


def compile_encoder(name: str, eager: nn.Module, feeds: Feeds, seq_len: int, batch_size: int,
                    dynamic: bool) -> tuple[Any, dict[str, Any]]:
    """(the compiled module, its record): compiled at every size ``compiled_sizes`` names,
    each checked against eager FP32; with dynamic padding also run at a shorter sequence,
    where a new graph fails the load."""
    from torch._dynamo.utils import counters

    # dynamo's caches are process-wide: start from a clean slate (see backend._load_compile)
    torch._dynamo.reset()
    breaks_before = sum(counters["graph_break"].values())
    cache_before = dict(counters["inductor"])
    sizes = compiled_sizes(batch_size, dynamic)
    compile_s: dict[str, float] = {}
    diffs = []
    with warnings.catch_warnings():
        # inductor's imports trip torch.jit's own deprecation warnings: not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        compiled = torch.compile(eager, backend="inductor", dynamic=dynamic)
        for size in sizes:
            t0 = time.perf_counter()
            diffs.append(_compare(name, compiled, eager, feeds(probe_batch(seq_len, size))))
            compile_s[str(size)] = round(time.perf_counter() - t0, 3)
        checked = _check_other_lengths(name, compiled, eager, feeds, seq_len, sizes, diffs) \
            if dynamic else []
    return compiled, {
        "backend": "inductor", "dynamic": dynamic, "compiled_batch_sizes": list(sizes),
        "compile_s": compile_s, "sequence_lengths_checked": [seq_len, *checked],
        "graph_breaks": sum(counters["graph_break"].values()) - breaks_before,
        "max_abs_diff_vs_eager": max(diffs), "tolerance": COMPILE_TOLERANCE,
        # compile_s is far shorter when inductor's on-disk cache already holds these graphs
        "inductor_fxgraph_cache": {
            kind: counters["inductor"][f"fxgraph_cache_{kind}"]
            - cache_before.get(f"fxgraph_cache_{kind}", 0) for kind in ("hit", "miss")}}


def _check_other_lengths(name: str, compiled: Any, eager: nn.Module, feeds: Feeds,
                         seq_len: int, sizes: tuple[int, ...], diffs: list[float]) -> list[int]:
    """Run the dynamic graphs at a shorter sequence; one that compiles again fails the load
    (it would compile during the measurement). Returns the lengths checked."""
    shorter = max(2, seq_len // 2)
    if shorter >= seq_len:
        return []
    graphs = unique_graphs()
    for size in sizes:
        diffs.append(_compare(name, compiled, eager, feeds(probe_batch(seq_len, size,
                                                                       shorter))))
    if unique_graphs() != graphs:
        raise SutError(f"{name}: the compiled encoder compiled again for a {shorter}-token "
                       "sequence: its graph is specialised to the sequence length; run "
                       "torch-compile with fixed padding")
    return [shorter]
