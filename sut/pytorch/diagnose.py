"""Layer-by-layer diagnosis of ``torch-int8`` against ``torch-fp32`` (``sut.layers`` contract).

INT8: the SUT runs a TorchScript trace, on which module hooks do not fire. ``capture`` rebuilds
the converted FX GraphModule exactly as ``quantize.build_static_fx`` built the cached script
(same FP32 weights, recipe, calibration array; deterministic), checks that it gives the
script's logits on the samples, and puts ``register_forward_hook`` on the modules its graph
calls (quantized ConvReLU2d / Conv2d / Linear, ReLU6, pooling ...). Quantized outputs are
dequantized; a module's precision is its output dtype (quint8/qint8 -> int8, float -> fp32).

FP32: hooks on the eager module the torch-fp32 backend runs. FX fuses conv+BN(+ReLU) into one
module named after the conv, so each layer is reported under the fused module's name with the
output of the last module of its fusion (the ReLU's, the BN's): read from ``fuse_fx`` on a copy
against a plain symbolic trace of it (node names survive fusion). Names thus match the INT8
capture wherever a module survives in both graphs. A ReLU6 that is a layer's only consumer is
read as part of that layer in both (see ``graph_layers``).

Functional ops (residual ``x + y``, SE ``sigmoid * x``) are not modules: not captured; a
layer's ``inputs`` skip through them to the captured modules that feed them.
"""

from __future__ import annotations

import collections
import copy
import logging
import operator
import weakref
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.ao.nn.quantized import DeQuantize, Quantize

from quantmark.ground.errors import SutError, UserError
from quantmark.sut.interface import SutOptions
from quantmark.sut.layers import LayerCapture, LayerOutput, Recipe
from quantmark.sut.pytorch import backend as tb
from quantmark.sut.pytorch import quantize as tq
from quantmark.sut.pytorch import recipe as lr
from quantmark.sut.registry import SUTS, factory_module

__all__ = ["DAMAGE", "EXCLUSION", "capture", "graph_layers", "int8_graph", "rebuild"]

log = logging.getLogger(__name__)

EXCLUSION = lr.EXCLUSION
DAMAGE = lr.DAMAGE
# modules that only move, pad or reshape values (or convert them): not layers
_BOOKKEEPING = (nn.Flatten, nn.Unflatten, nn.Dropout, nn.Dropout2d, nn.Identity, nn.ZeroPad2d,
                nn.ConstantPad2d, Quantize, DeQuantize)
_INT8_DTYPES = (torch.quint8, torch.qint8)
# graph nodes that only convert a value between float and quantized (no arithmetic)
_CONVERSIONS = (torch.quantize_per_tensor, "dequantize", "contiguous")
#: functional residual adds (FP32 ``x + y``; INT8 ``quantized.add``): captured as layers
#: ``add#K`` (the K-th add run), their outputs read by an FX Interpreter, as no hook sees them
_ADDS = (operator.add, torch.add, torch.ops.quantized.add, torch.ops.quantized.add_relu)
ADD = "add#"
_GRAPHS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_TRACES: weakref.WeakKeyDictionary[Any, torch.fx.GraphModule] = weakref.WeakKeyDictionary()
_FP32_PLANS: weakref.WeakKeyDictionary[Any, tuple[list[_Layer], dict[str, str]]] = \
    weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class _Layer:
    """A captured module call of an FX graph, and where its value is read."""

    name: str  # module name, ``name:K`` for its K-th later call
    head: str  # the FX node of that module call
    node: str  # the FX node whose output is the layer's value (a merged ReLU6, or ``head``)
    op_type: str
    inputs: tuple[str, ...]
    target: str = ""  # the module hooked for the value (FP32: in the eager model)
    call: int = 0  # which call of ``target``
    head_call: int = 0  # which call of the module ``head`` calls (its precision is the layer's)


# --------------------------------------------------------------------------- graphs


def _producers(node: torch.fx.Node, names: dict[torch.fx.Node, str]) -> tuple[str, ...]:
    """Captured layers feeding ``node``, through any uncaptured node (dequantize, add ...)."""
    found: list[str] = []
    seen: set[torch.fx.Node] = set()
    stack = list(reversed(node.all_input_nodes))
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        if item not in names:
            stack.extend(reversed(item.all_input_nodes))
        elif names[item] not in found:
            found.append(names[item])
    return tuple(found)


def _sole_feeder(node: torch.fx.Node, names: dict[torch.fx.Node, str]) -> torch.fx.Node | None:
    """The captured node whose value goes only to ``node`` (through quantize/dequantize-like
    single-use nodes), if there is one."""
    item = node.args[0] if node.args else None
    while isinstance(item, torch.fx.Node) and len(item.users) == 1:
        if item in names:
            return item
        if item.op == "call_module" or item.target not in _CONVERSIONS or not item.args:
            return None
        item = item.args[0]  # quantize_per_tensor(x, scale, zero_point, dtype), x.dequantize()
    return None


def _is_add(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _ADDS


def graph_layers(graph_module: torch.fx.GraphModule) -> list[_Layer]:
    """Every non-bookkeeping ``call_module`` and every residual add (``add#K``) of the graph,
    in graph (execution) order.

    A ReLU6 that is the only consumer of a layer is merged into it (value read after the
    ReLU6): the INT8 build quantizes such a layer's output over the clamped range
    (``quantize.fold_relu6_ranges``), so its pre-activation value is clipped by design.
    """
    modules = dict(graph_module.named_modules())
    calls: collections.Counter[str] = collections.Counter()
    names: dict[torch.fx.Node, str] = {}
    index: dict[torch.fx.Node, int] = {}
    layers: list[_Layer] = []
    adds = 0
    for node in graph_module.graph.nodes:
        if _is_add(node):
            name = f"{ADD}{adds}"
            adds += 1
            index[node] = len(layers)
            layers.append(_Layer(name, node.name, node.name, "add", _producers(node, names),
                                 name))
            names[node] = name
            continue
        if node.op != "call_module":
            continue
        target = str(node.target)
        call = calls[target]
        calls[target] += 1
        module = modules[target]
        if isinstance(module, _BOOKKEEPING):
            continue
        feeder = _sole_feeder(node, names) if tq._is_relu6(node, modules) else None
        if feeder is not None:
            i = index[feeder]
            layers[i] = replace(layers[i], node=node.name, target=target, call=call,
                                op_type=f"{layers[i].op_type}+{type(module).__name__}")
            names[node], index[node] = layers[i].name, i
            continue
        name = target if call == 0 else f"{target}{lr.OCCURRENCE}{call}"
        index[node] = len(layers)
        layers.append(_Layer(name, node.name, node.name, type(module).__name__,
                             _producers(node, names), target, call, call))
        names[node] = name
    return layers


def _precision(value: torch.Tensor) -> str:
    if value.dtype in _INT8_DTYPES:
        return "int8"
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(
        value.dtype, str(value.dtype).removeprefix("torch."))


class _Recorder(torch.fx.Interpreter):
    """Runs a GraphModule node by node, keeping each residual add's output as ``add#K``
    (module forward hooks fire as in a plain call)."""

    def __init__(self, module: torch.fx.GraphModule, seen: dict[str, list[torch.Tensor]]):
        super().__init__(module)
        self.seen, self.adds = seen, 0

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if _is_add(n):
            self.seen[f"{ADD}{self.adds}"].append(result.detach().clone())
            self.adds += 1
        return result


def _run_hooked(model: nn.Module, graph: torch.fx.GraphModule, wanted: set[str],
                x: torch.Tensor) -> tuple[torch.Tensor, dict[str, list[torch.Tensor]]]:
    """(output, {module or add#K: [output of each call]}) for one run of ``graph``, the FX
    graph of ``model`` (its modules are ``model``'s, so hooks on them fire)."""
    seen: dict[str, list[torch.Tensor]] = collections.defaultdict(list)

    def hook(name: str) -> Any:
        def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                seen[name].append(output.detach().clone())
        return record

    handles = [model.get_submodule(name).register_forward_hook(hook(name))
               for name in wanted if not name.startswith(ADD)]
    try:
        with torch.inference_mode(), tq.quiet():
            out = _Recorder(graph, seen).run(x)
    finally:
        for handle in handles:
            handle.remove()
    return out, seen


def _recorded(seen: dict[str, list[torch.Tensor]], target: str, call: int,
              layer: str) -> torch.Tensor:
    calls = seen.get(target, [])
    if call >= len(calls):
        raise SutError(f"module {target} ran {len(calls)} time(s); expected call {call + 1} "
                       f"for layer {layer}")
    return calls[call]


def _outputs(layers: list[_Layer], seen: dict[str, list[torch.Tensor]],
             op_types: dict[str, str] | None = None) -> list[LayerOutput]:
    """LayerOutputs from the hooks; without ``op_types`` (INT8) a merged layer's precision is
    its head module's (an excluded conv stays fp32 though the ReLU6 after it runs int8)."""
    result = []
    for layer in layers:
        value = _recorded(seen, layer.target, layer.call, layer.name)
        head = value if op_types is not None else _recorded(
            seen, lr.module_name(layer.name), layer.head_call, layer.name)
        data = value.dequantize() if value.is_quantized else value
        result.append(LayerOutput(layer.name, (op_types or {}).get(layer.name, layer.op_type),
                                  _precision(head), data.float().numpy(), layer.inputs,
                                  excludable=not layer.name.startswith(ADD)))
    return result


# --------------------------------------------------------------------------- INT8


def int8_graph(backend: Any) -> torch.fx.GraphModule:
    """The converted GraphModule behind ``backend``'s cached script (built once per backend)."""
    graph = _GRAPHS.get(backend)
    if graph is None:
        source = tq.static_source(backend.artifact.key)
        if source is None:
            raise SutError(f"{backend.name}: no calibration data for artifact "
                           f"{backend.artifact.key} in this process; build the SUT with "
                           "create()/rebuild() here before capturing it")
        spec, fp32, recipe, calibration = source
        graph, _, _ = tq.build_static_fx(spec, fp32, calibration, recipe)
        graph.eval()
        _GRAPHS[backend] = graph
    return graph


def _check_against_script(backend: Any, out: torch.Tensor, x: torch.Tensor) -> float:
    """Max |logit diff| of the rebuilt graph vs the SUT's script; SutError unless close."""
    script = tq.load_script(backend.artifact.path)
    with torch.inference_mode(), tq.quiet():
        expected = script(x)
    diff = float((out - expected).abs().max())
    if not torch.allclose(out, expected, rtol=1e-5, atol=1e-5):
        raise SutError(f"{backend.name}: the rebuilt FX graph differs from the SUT's "
                       f"TorchScript (max logit diff {diff:.3g}); cannot diagnose it")
    return diff


def _capture_int8(backend: Any, x: torch.Tensor) -> LayerCapture:
    graph = int8_graph(backend)
    layers = graph_layers(graph)
    wanted = {layer.target for layer in layers} | {lr.module_name(n.name) for n in layers}
    out, seen = _run_hooked(graph, graph, wanted, x)
    diff = _check_against_script(backend, out, x)
    return LayerCapture(
        layers=_outputs(layers, seen),
        method="torch: forward hooks on the modules of the converted FX GraphModule, rebuilt "
               "as the cached TorchScript was built and checked against it",
        precision_source="output dtype seen by the hook on the layer's module (quint8/qint8 "
                         "-> int8, float32 -> fp32; for conv+ReLU6, the conv's)",
        notes={"model_file": str(backend.artifact.path), "script_max_logit_diff": diff,
               "not_captured": "functional ops other than residual adds (mul, sigmoid ...) "
                               "and bookkeeping modules (Flatten, Dropout, padding)",
               "layer_recipe": backend.artifact.meta.get("layer_recipe", {})},
    )


# --------------------------------------------------------------------------- FP32


def _call_index(graph: torch.fx.Graph) -> dict[str, int]:
    """{call_module node: which call of its module it is}."""
    calls: dict[str, int] = {}
    counter: collections.Counter[str] = collections.Counter()
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.name] = counter[str(node.target)]
            counter[str(node.target)] += 1
    return calls


def _chain(head: torch.fx.Node, end: torch.fx.Node) -> list[torch.fx.Node]:
    """The call_module nodes from ``head`` to ``end`` along single uses (conv, BN, ReLU6)."""
    chain, item = [head], head
    while item is not end and len(item.users) == 1:
        item = next(iter(item.users))
        chain.append(item)
    return [n for n in chain if n.op == "call_module"] if item is end else [head, end]


def _fusion_plan(model: nn.Module) -> tuple[list[_Layer], dict[str, str]]:
    """Layers of ``model`` under FX's fused names, each read at its fusion's last module."""
    from torch.ao.quantization.quantize_fx import fuse_fx

    rewritten = copy.deepcopy(model)
    tq.rewrite_same_padding(rewritten)  # as the INT8 build does (it checks outputs are kept)
    traced = torch.fx.symbolic_trace(copy.deepcopy(rewritten))
    with tq.quiet():
        fused = fuse_fx(rewritten)
    kept = {node.name for node in fused.graph.nodes}
    by_name = {node.name: node for node in traced.graph.nodes}
    calls = _call_index(traced.graph)
    originals = dict(model.named_modules())
    plan, op_types = [], {}
    for layer in graph_layers(fused):
        if layer.name.startswith(ADD):  # read by the interpreter, in run order
            plan.append(layer)
            op_types[layer.name] = "add"
            continue
        end = by_name[layer.node]
        while len(end.users) == 1:  # modules fused away (BN, ReLU) come after their head
            user = next(iter(end.users))
            if user.op != "call_module" or user.name in kept:
                break
            end = user
        target = str(end.target)
        while target not in originals:  # a rewritten TF-SAME conv: Sequential(pad, conv)
            target = target.rpartition(".")[0]
        plan.append(replace(layer, target=target, call=calls[end.name]))
        op_types[layer.name] = "+".join(type(traced.get_submodule(str(n.target))).__name__
                                        for n in _chain(by_name[layer.head], end))
    return plan, op_types


def _capture_fp32(backend: Any, x: torch.Tensor) -> LayerCapture:
    model = getattr(backend, "_model", None)
    if model is None:
        raise SutError(f"{backend.name}: the backend holds no eager model (closed?)")
    if backend not in _FP32_PLANS:
        _FP32_PLANS[backend] = _fusion_plan(model)
    plan, op_types = _FP32_PLANS[backend]
    if backend not in _TRACES:  # the eager model's own graph: its modules, hooks and all
        _TRACES[backend] = torch.fx.symbolic_trace(model)
    _, seen = _run_hooked(model, _TRACES[backend], {layer.target for layer in plan}, x)
    return LayerCapture(
        layers=_outputs(plan, seen, op_types),
        method="torch: forward hooks on the eager FP32 module the SUT runs (run through its "
               "FX trace, which also reads the residual adds); conv+BN(+ReLU) read at the "
               "fusion's last module, named as FX names the fused module",
        precision_source="output tensor dtype seen by each hook",
        notes={"model_file": str(backend.artifact.path),
               "not_captured": "functional ops other than residual adds, bookkeeping modules, "
                               "and BN/ReLU modules inside a fusion (read as the fused layer)"},
    )


# --------------------------------------------------------------------------- contract


def capture(backend: Any, samples: np.ndarray) -> LayerCapture:
    """Every layer's output for ``samples`` [N,3,H,W] in the model ``backend`` runs."""
    mode = getattr(backend, "mode", None)
    x = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32))
    if mode == "int8":
        tq.use_x86_engine()
        return _capture_int8(backend, x)
    if mode == "fp32":
        return _capture_fp32(backend, x)
    raise UserError(f"layer capture supports torch-int8 and torch-fp32, not {backend.name}")


def rebuild(name: str, options: SutOptions, spec: Any, calibration: Any,
            recipe: Recipe) -> tb.TorchBackend:
    """``name`` as ``create`` makes it, quantized with ``recipe`` (cached with it in the key)."""
    if not recipe.key():
        return tb.create(name, options, spec, calibration)
    info = SUTS.get(name)
    if info is None or factory_module(info) != tb.__name__ or info.precision_key != "int8":
        raise UserError(f"a layer recipe applies to torch-int8 only, not {name}")
    tb._check_model_path(options.model_path)
    fp32 = tq.fp32_weights(spec, options.model_path)
    data = calibration.arrays("NCHW")
    artifact = tq.quantize_static_int8(spec, fp32, data, calibration.hash(), recipe)
    log.info("torch-int8 rebuilt with %s", recipe.key())
    return tb.TorchBackend(name, spec, artifact, options, data[:1])
