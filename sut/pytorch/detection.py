"""The CPU torch SUTs on a detector (``spec.task == "detection"``): which model they run, and
torch-int8 with the box decode kept in float.

The model: the run hands every SUT the detector's ONNX file (``SutOptions.model_path``), which
the other frameworks read. A torch SUT runs a torch module instead, built from the spec's
architecture (``builder``) and its trainer's weights (``models.zoo.build_torch_model``): the
built-in detector, whose ONNX file is only its export, so the file given must be that export.
A detector that exists only as an ONNX file has no architecture to rebuild: refused in one line.

Static INT8 (FX): the head's post-processing concatenates boxes in pixels with 0..1 scores;
one int8 tensor cannot hold both (quantized at the boxes' scale, every score collapses). The
head is found by the structure every framework here uses (``models.detector_graph``: walk back
from the output to the last prediction convolutions), on the graph FX's own
``QuantizationTracer`` makes; the modules holding it get qconfig None
(``QConfigMapping.set_module_name``), torch's own way to leave a module float, so convert_fx
dequantizes the prediction convolutions' outputs into it. The head must be a module of its own
(the built-in's ``decode``): a decode in the top module's forward cannot be named, refused. The
converted graph is checked to run that head float (no quantize op or quantized module between
the output and the dequantize boundaries), and the box error against the FP32 module is
measured on calibration samples; both go in the artifact's meta (``float_head``). Measured on
the built-in (run.py, 356 evaluation canvases, 256 calibration canvases): mAP@[.5:.95] 76.5%
FP32, 75.3% INT8 with every convolution INT8 and the decode float; box error on the anchors
FP32 scores above 0.3, 0.46 px mean and 1.3 px max.

Dynamic INT8 quantizes nn.Linear (and LSTM) only: on a convolution-only detector it would
quantize nothing and run FP32, so torch-int8dyn refuses it in one line.
"""

from __future__ import annotations

import collections
import importlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError, UserError
from quantmark.models.detector_graph import (
    FLOAT_HEAD_RULE,
    GraphNode,
    float_head,
    is_detector,
    require_stops,
)
from quantmark.sut.interface import SutOptions

if TYPE_CHECKING:
    from torch.ao.quantization import QConfigMapping

COMPUTE_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
DYNAMIC_MODULES = (nn.Linear, nn.LSTM)
#: calibration samples the INT8 model's box error is measured on (against the FP32 module),
#: and the FP32 score above which an anchor's box counts as a detection
ERROR_SAMPLES, CONFIDENT = 8, 0.3
_QUANTIZE = {torch.quantize_per_tensor, torch.quantize_per_channel,
             torch.quantize_per_tensor_dynamic}


def torch_model(name: str, spec: Any, options: SutOptions) -> tuple[SutOptions, dict[str, Any]]:
    """(``options`` without the ONNX ``model_path``, a note for the artifact) for a torch SUT
    on the built-in detector; one line for a detector torch cannot rebuild."""
    given = options.model_path
    if not spec.trainer:
        raise UserError(f"{name}: {given or spec.name} is a detector from its ONNX file, with "
                        "no torch architecture quantmark can rebuild; the torch SUTs run a "
                        "built-in --model (digits-detect); run the file with ort-*, ov-* or "
                        "tflite-*")
    own = Path(importlib.import_module(spec.trainer).builtin_detector_onnx(spec.input_size))
    if given is not None and Path(given).resolve() != own.resolve():
        raise UserError(f"{name}: --model-path {given} is not {spec.name}'s own ONNX export; "
                        f"the torch SUTs build {spec.name} from its architecture and trained "
                        "weights: drop --model-path, or run the file with ort-*, ov-* or tflite-*")
    note = {"runs": f"the built-in model {spec.name}, built in torch from its architecture at "
                    f"{spec.input_size}x{spec.input_width} and its trained weights",
            "onnx_export": str(own), "onnx_read": False}
    return replace(options, model_path=None), note


def check_dynamic(name: str, spec: Any, model: nn.Module) -> None:
    """Refuse dynamic INT8 on a detector it would leave all FP32 (no Linear/LSTM layer)."""
    if is_detector(spec) and not any(isinstance(m, DYNAMIC_MODULES) for m in model.modules()):
        raise UserError(f"{name}: {spec.name} is a convolution-only detector; dynamic "
                        "quantization covers nn.Linear and nn.LSTM only, so it would run all "
                        "FP32: use torch-int8 (static, its convolutions in INT8)")


# --------------------------------------------------------------------------- static INT8


def _kind(node: torch.fx.Node, modules: dict[str, nn.Module]) -> str:
    """The ``GraphNode`` kind of an FX node."""
    if node.op == "placeholder":
        return "input"
    if node.op == "get_attr":
        return "const"
    if node.op == "call_module":
        return "compute" if isinstance(modules.get(str(node.target)), COMPUTE_MODULES) else \
            "softmax" if isinstance(modules.get(str(node.target)), nn.Softmax) else "other"
    name = getattr(node.target, "__name__", node.target)
    if name in ("size", "dim") or (node.target is getattr and node.args[1:2] == ("shape",)):
        return "shape"
    return "softmax" if name in ("softmax", "log_softmax") else "other"


def head_modules(spec: Any, model: nn.Module) -> tuple[list[str], dict[str, Any]]:
    """(the modules to keep float, what they hold) for a detector: the head found by structure
    on FX's quantization trace, which must be whole modules; ([], {}) for any other model."""
    if not is_detector(spec):
        return [], {}
    from torch.ao.quantization.fx.tracer import QuantizationTracer

    tracer = QuantizationTracer([], [])
    try:
        graph = tracer.trace(model)
    except Exception as exc:  # FX symbolic tracing fails in many ways on dynamic code
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SutError(f"torch FX cannot trace {spec.name} for INT8: {cause}") from exc
    modules = dict(model.named_modules())
    nodes = [GraphNode(n.name, _kind(n, modules), tuple(i.name for i in n.all_input_nodes))
             for n in graph.nodes if n.op != "output"]
    output = next(n for n in graph.nodes if n.op == "output")
    head, stops = float_head(nodes, [i.name for i in output.all_input_nodes])
    where = f"torch-int8: model {spec.name}"
    require_stops(stops, where)
    scope = {n.name: tracer.node_name_to_scope.get(n.name, ("", None))[0] for n in graph.nodes}
    kept = sorted({scope[name] for name in head})
    if not head or "" in kept:
        raise UserError(f"{where}: its box decode runs in the model's own forward, not in a "
                        "submodule; torch FX can keep only whole modules float: put the decode "
                        "in a module of its own")
    inside = [n for n in nodes if n.kind not in ("const", "shape", "input") and n.name not in head
              and any(scope[n.name] == k or scope[n.name].startswith(f"{k}.") for k in kept)]
    if inside:
        raise UserError(f"{where}: module {kept[0]} holds model layers besides the box decode "
                        f"({', '.join(n.name for n in inside[:3])}); keeping it float would "
                        "leave them FP32")
    return kept, {"modules": kept, "qconfig": "None (QConfigMapping.set_module_name)",
                  "prediction_layers": stops, "rule": FLOAT_HEAD_RULE}


def int8_mapping(spec: Any, model: nn.Module, mapping: QConfigMapping
                 ) -> tuple[QConfigMapping, dict[str, Any]]:
    """``mapping`` with a detector's head modules set to None, and what they hold
    (``head_modules``); ``mapping`` as given for any other model."""
    kept, head = head_modules(spec, model)
    for name in kept:
        mapping = mapping.set_module_name(name, None)
    return mapping, head


def float_in_converted(quantized: torch.fx.GraphModule) -> dict[str, Any]:
    """The converted model's head, walked back from its output to the dequantize boundaries:
    its float ops, and how many quantized tensors it dequantizes; SutError where a quantize op
    or a quantized module is met first (the decode would compute on integers)."""
    modules = dict(quantized.named_modules())
    output = next(n for n in quantized.graph.nodes if n.op == "output")
    todo, seen = list(output.all_input_nodes), set()
    ops: collections.Counter[str] = collections.Counter()
    boundaries = 0
    while todo:
        node = todo.pop()
        if node in seen or node.op == "get_attr":
            continue
        seen.add(node)
        if node.op == "call_method" and node.target == "dequantize":
            boundaries += 1
            continue
        module = modules.get(str(node.target)) if node.op == "call_module" else None
        if node.target in _QUANTIZE or node.op == "placeholder" or (
                module is not None and "quantized" in type(module).__module__):
            raise SutError(f"torch-int8: the detector's head is not float after convert_fx "
                           f"({node.op} {node.target} reached before any dequantize)")
        ops[str(getattr(node.target, "__name__", node.target))] += 1
        todo.extend(node.all_input_nodes)
    return {"float_ops": dict(sorted(ops.items())), "dequantized_inputs": boundaries}


def int8_error(reference: nn.Module, quantized: nn.Module, calibration: np.ndarray
               ) -> dict[str, Any]:
    """Box (pixels) and score error of the INT8 model against the FP32 module on the first
    calibration samples, over every anchor and over the confident ones (scored above
    ``CONFIDENT`` by FP32: the boxes NMS keeps; a background anchor's box means nothing)."""
    x = torch.from_numpy(np.ascontiguousarray(calibration[:ERROR_SAMPLES], dtype=np.float32))
    with torch.no_grad():
        want, got = reference(x), quantized(x)
    boxes, scores = (got[:, :4] - want[:, :4]).abs(), (got[:, 4:] - want[:, 4:]).abs()
    confident = boxes.amax(1)[want[:, 4:].amax(1) > CONFIDENT]
    return {"samples": len(x), "reference": "the FP32 module", **{
        f"box_{what}_abs_px": float(reduce(boxes)) for what, reduce in
        (("max", torch.max), ("mean", torch.mean), ("median", torch.median))},
        "score_max_abs": float(scores.max()), "confident_anchors": int(confident.numel()),
        "confident_box_max_abs_px": float(confident.max()) if confident.numel() else None,
        "confident_box_mean_abs_px": float(confident.mean()) if confident.numel() else None}


def int8_facts(spec: Any, kept: dict[str, Any], reference: nn.Module,
               quantized: torch.fx.GraphModule, calibration: np.ndarray) -> dict[str, Any]:
    """A detector's INT8 build facts (``float_head``: what stayed float, proven on the
    converted graph, and the error it leaves); nothing for any other model."""
    if not kept:
        return {}
    facts = {**kept, **float_in_converted(quantized)}
    if facts["dequantized_inputs"] < len(kept["prediction_layers"]):
        raise SutError(f"torch-int8: {spec.name}'s head dequantizes "
                       f"{facts['dequantized_inputs']} tensors, not its "
                       f"{len(kept['prediction_layers'])} prediction layers' outputs")
    if spec.head == "raw":
        facts["int8_vs_fp32"] = int8_error(reference, quantized, calibration)
    return {"float_head": facts}

