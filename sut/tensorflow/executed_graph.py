"""What a TensorFlow SUT's first call executed (``sut.tensorflow.backend``): the compute nodes
(convolutions, matmuls, oneDNN's fused kernels) of the instantiated partition graphs counted by
dtype and device, or for ``tf-xla`` the convolutions and dots of the HLO XLA compiled, and the
precision those counts prove. A SUT whose count does not prove its precision is refused here: a
``tf-amp`` without a half-precision compute node, a ``tf-fp32`` with one, or no compute node.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from quantmark.ground.errors import SutError
from quantmark.sut.registry import get_sut

HALF_DTYPES = {"bfloat16": "bf16", "float16": "fp16"}
HLO_HALF = {"bf16": "bf16", "f16": "fp16"}
_COMPUTE = re.compile(r"Conv|MatMul|Einsum")
# the ops through which the graph executor hands a compiled cluster to XLA
XLA_LAUNCH_OPS = frozenset({"XlaLaunch", "_XlaCompile", "_XlaRun", "XlaLaunchV2"})
_HLO_COMPUTE = re.compile(r"= (\w+)\[[^\]]*\]\S* (convolution|dot)\(")
_HLO_CUSTOM = re.compile(r'custom_call_target="([^"]+)"')


def _node_dtype(node: Any) -> str | None:
    """The dtype a node computes in: its ``T`` attr (``Ta`` for BatchMatMulV3)."""
    from tensorflow.python.framework import dtypes

    for attr in ("T", "Ta"):
        if attr in node.attr and node.attr[attr].type:
            return dtypes.as_dtype(node.attr[attr].type).name
    return None


def count_executed_nodes(graphs: list[Any]) -> dict[str, Any]:
    """Dtype counts over executed partition graphs (GraphDefs).

    ``compute``: {dtype: {op: n}} for convolutions/matmuls (the work that sets precision);
    ``node_dtypes``: {dtype: n} over every node with a type attr; ``onednn_nodes``: _Mkl* ops.
    """
    compute: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    dtypes: collections.Counter[str] = collections.Counter()
    devices: set[str] = set()
    compute_devices: collections.Counter[str] = collections.Counter()
    onednn = 0
    for graph in graphs:
        for node in graph.node:
            dtype = _node_dtype(node)
            device = node.device.rsplit("/", 1)[-1] if node.device else ""
            if device:
                devices.add(device)
            onednn += node.op.startswith("_Mkl")
            if dtype is None:
                continue
            dtypes[dtype] += 1
            if _COMPUTE.search(node.op):
                compute[dtype][node.op] += 1
                compute_devices[device or "unplaced"] += 1
    return {"compute": {dtype: dict(sorted(ops.items())) for dtype, ops in sorted(compute.items())},
            "node_dtypes": dict(sorted(dtypes.items())), "onednn_nodes": onednn,
            "devices": sorted(devices), "compute_devices": dict(sorted(compute_devices.items()))}


def cpu_fallback(compute_devices: dict[str, int]) -> int:
    """Compute nodes placed on a CPU device (``device:CPU:0``), from ``compute_devices``."""
    return sum(n for device, n in compute_devices.items() if ":CPU:" in device.upper())


def count_hlo(hlo: str) -> dict[str, Any]:
    """Convolution/dot counts by element type in XLA's HLO text, plus custom-call targets."""
    compute: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for element, op in _HLO_COMPUTE.findall(hlo):
        compute[element][op] += 1
    return {"compute": {e: dict(sorted(ops.items())) for e, ops in sorted(compute.items())},
            "custom_calls": sorted(set(_HLO_CUSTOM.findall(hlo)))}


def executed_precision(name: str, compute: dict[str, dict[str, int]], half_names: dict[str, str],
                       device: str = "CPU") -> str:
    """The precision the counted compute nodes ran in; refuses a SUT that ran something else."""
    half = sorted(half_names[d] for d, ops in compute.items() if d in half_names and ops)
    if not any(compute.values()):
        raise SutError(f"{name}: the executed graph has no convolution or matmul node; cannot "
                       "tell what precision ran")
    sut = get_sut(name)
    if sut.precision_key == "mixed":  # proven by a half-precision node (bf16 CPU, fp16 GPU)
        if not sut.proven(half):
            raise SutError(f"{name}: the mixed precision rewrite changed nothing on this "
                           f"{device}; refusing to report FP32 as mixed (compute nodes: "
                           f"{compute})")
        return "+".join([*half, "fp32"])
    if half:
        raise SutError(f"{name}: the executed graph runs {'+'.join(half)} compute nodes "
                       f"({compute}); a global mixed precision option leaked in; refusing "
                       "to report it as FP32")
    return "fp32"
