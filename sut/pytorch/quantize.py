"""Torch-native model artifacts: the FP32 state_dict, static INT8 (FX graph mode) and dynamic INT8.

Static INT8 recipe: FX graph mode for the x86 quantized engine
(``get_default_qconfig_mapping("x86")``: histogram-observed uint8 activations, per-channel int8
weights), calibrated on the shared calibration set in batches, then ``convert_fx``. One fix on
top: FX gives ReLU6 its input's quantization range, so a conv feeding ReLU6 is quantized over
its whole pre-activation range and [0, 6] gets a few dozen levels. Observers that feed only a
ReLU6 therefore record the clamped values (what ORT and TFLite do by fusing the clip). On the
1536 built-in photos, EfficientNet-Lite0 INT8 went from 48.0% top-1 to 68.5% (FP32 67.6%).

Caching: the converted model is traced to TorchScript and saved with ``cached_build``, keyed by
weights identity + calibration hash + torch version + recipe. The round trip was checked on the
digits CNN, MobileNetV2 and EfficientNet-Lite0: the reloaded script gives bit-identical outputs
at batch 1, 3 and 8, and every build re-checks that before the file is accepted. Histogram
calibration takes tens of seconds for a 224x224 model on 2 cores, so it is worth keeping.
``torch.jit.trace``/``save``/``load`` are deprecated in torch 2.13 (warnings silenced here);
the FX graph module itself can only be pickled (code in the cache), and nothing else saves an
eager-mode quantized model. Note that torch 2.13 also deprecates ``torch.ao.quantization`` and
the quantized tensor dtypes themselves (successor: torchao's PT2E flow); they still run here.

A layer recipe (``sut.layers.Recipe``, see ``recipe``) keeps modules in FP32 (qconfig None) or
damages weights; it joins the cache key only when it changes something. A detector's decode
stays float the same way (``detection``).

Dynamic INT8 (``quantize_dynamic`` on ``nn.Linear``) takes milliseconds, applied at load, not
cached: on a CNN it quantizes only the classifier, and the SUT says so.
"""

from __future__ import annotations

import collections
import contextlib
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from quantmark.ground.errors import SutError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.models.detector_graph import task_key, task_meta
from quantmark.models.zoo import ModelSpec, build_torch_model, weights_description, weights_identity
from quantmark.sut.layers import Recipe
from quantmark.sut.pytorch import detection as td
from quantmark.sut.pytorch import recipe as lr

ENGINE = "x86"
STATIC_RECIPE: dict[str, Any] = {
    "api": "fx", "qconfig_mapping": "default x86", "engine": ENGINE, "calibration_batch": 32,
    "same_padding_rewrite": True, "relu6_range_folding": True, "format": "torchscript-trace",
    "version": 2,
}
DYNAMIC_RECIPE: dict[str, Any] = {"api": "quantize_dynamic", "modules": ["Linear"],
                                  "dtype": "qint8", "engine": ENGINE}

# op kinds in a TorchScript graph that do the heavy (MAC) work, by precision
_QUANTIZED_COMPUTE = ("quantized::conv", "quantized::linear")
_FLOAT_COMPUTE = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution",
                            "aten::convolution", "aten::linear", "aten::addmm", "aten::mm",
                            "aten::matmul", "aten::bmm"})


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence torch.ao's and torch.jit's deprecation chatter: known, and not the user's to fix."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def use_x86_engine() -> None:
    """Quantized kernels (and weight packing on jit.load) follow this global engine setting."""
    if ENGINE not in torch.backends.quantized.supported_engines:
        raise SutError(f"this torch build has no '{ENGINE}' quantized engine "
                       f"(has {torch.backends.quantized.supported_engines})")
    torch.backends.quantized.engine = ENGINE


# --------------------------------------------------------------------------- FP32 weights


def geometry(spec: ModelSpec) -> dict[str, Any]:
    """The input geometry a spec changes from the square 3-channel default (seeded random
    weights are calibrated on images of it): only these join the cache keys, so every
    built-in model keeps its keys."""
    changes = {"input_width": spec.input_width, "channels": spec.channels}
    defaults = {"input_width": spec.input_size, "channels": 3}
    return {k: v for k, v in changes.items() if v != defaults[k]}


def fp32_weights(spec: ModelSpec, weights_path: str | Path | None = None) -> Artifact:
    """The FP32 state_dict every torch SUT starts from. A user's file is used in place.
    Built-in weights are built once (seeded random init with BN statistics, trained, or the
    shipped Lite0 file) and saved in the cache, so later runs load a file whose hash is on
    record."""
    identity = weights_identity(spec, weights_path)  # UserError for a missing file
    base_meta = {"model": spec.name, "layout": "NCHW", "label_offset": spec.label_offset,
                 "num_classes": spec.num_classes, "torch": torch.__version__, **task_meta(spec)}
    if weights_path is not None:
        path = Path(weights_path)
        return Artifact(path=path, format="torch-state-dict", precision="fp32",
                        key=identity["sha256"], weights=weights_description(spec, path),
                        source_hash=identity["sha256"],
                        meta={**base_meta, "user_file": str(path.resolve()), "cached": False,
                              "sha256": identity["sha256"]})
    key = hash_json({"what": "torch-state-dict", "model": spec.name,
                     "num_classes": spec.num_classes, "input_size": spec.input_size,
                     **geometry(spec), "weights": identity, "torch": torch.__version__})

    def build(folder: Path) -> Artifact:
        t0 = time.perf_counter()
        model, weights = build_torch_model(spec)
        out = folder / f"{spec.name}-fp32.pt"
        torch.save(model.state_dict(), out)
        return Artifact(path=out, format="torch-state-dict", precision="fp32", key=key,
                        weights=weights, source_hash=hash_json(identity),
                        times={"build_torch_s": round(time.perf_counter() - t0, 3)},
                        meta={**base_meta, "sha256": hash_file(out)})

    return cached_build(spec.name, key, build)


def load_fp32_model(spec: ModelSpec, artifact: Artifact) -> nn.Module:
    """The eval-mode network with the artifact's weights (strict load, one-line UserErrors)."""
    model, _ = build_torch_model(spec, artifact.path)
    return model


# --------------------------------------------------------------------------- static INT8


def _plain_conv(conv: nn.Conv2d) -> nn.Module | None:
    """A plain ``nn.Conv2d`` (plus ZeroPad2d if asymmetric) for a TF-"SAME" conv subclass.

    EfficientNet-Lite's ``Conv2dStaticSamePadding`` pads, then calls ``F.conv2d``: FX traces
    into it, so the conv is not a module and BatchNorm cannot be fused into it (49 separately
    quantized BNs for Lite0). As a plain Conv2d, conv+BN(+ReLU) fuse like in any other net.
    """
    pad = getattr(conv, "static_padding", None)
    if pad is None or type(conv).forward is nn.Conv2d.forward:
        return None
    plain = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                      conv.padding, conv.dilation, conv.groups, conv.bias is not None)
    plain.weight, plain.bias = conv.weight, conv.bias
    plain.train(conv.training)
    if isinstance(pad, nn.ZeroPad2d):
        left, right, top, bottom = pad.padding
        if left == right and top == bottom and tuple(conv.padding) == (0, 0):
            plain.padding = (top, left)
            return plain
        return nn.Sequential(pad, plain)
    if type(pad).__name__ == "Identity" and not list(pad.parameters()):
        return plain
    return None


def rewrite_same_padding(model: nn.Module) -> int:
    """Replace TF-SAME conv subclasses by plain convs in place; returns how many."""
    count = 0
    for name, child in list(model.named_children()):
        plain = _plain_conv(child) if isinstance(child, nn.Conv2d) else None
        if plain is not None:
            setattr(model, name, plain)
            count += 1
        else:
            count += rewrite_same_padding(child)
    return count


_BOUND_KEEPING_MODULES = (nn.ReLU, nn.ReLU6, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
                          nn.Flatten, nn.Dropout, nn.Identity)
_BOUND_KEEPING_CALLS = {"relu", "relu6", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                        "flatten", "reshape", "view", "dropout"}


def _is_relu6(node: torch.fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        module = modules.get(str(node.target))
        return isinstance(module, nn.ReLU6) or (
            isinstance(module, nn.Hardtanh) and (module.min_val, module.max_val) == (0.0, 6.0))
    return node.op == "call_function" and node.target is nn.functional.relu6


def _in_relu6_range(node: Any, modules: dict[str, nn.Module]) -> bool:
    """The node's value is provably in [0, 6]: a ReLU6, or range-keeping ops/observers on one."""
    if not isinstance(node, torch.fx.Node) or not node.args:
        return False
    if _is_relu6(node, modules):
        return True
    from torch.ao.quantization.observer import ObserverBase

    module = modules.get(str(node.target)) if node.op == "call_module" else None
    keeps = (isinstance(module, (*_BOUND_KEEPING_MODULES, ObserverBase))
             or (node.op in ("call_function", "call_method")
                 and getattr(node.target, "__name__", node.target) in _BOUND_KEEPING_CALLS))
    return keeps and _in_relu6_range(node.args[0], modules)


def _clamp_to_relu6(_observer: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].clamp(0.0, 6.0), *args[1:])


def fold_relu6_ranges(prepared: torch.fx.GraphModule) -> int:
    """Make observers whose only consumer is a ReLU6 record clamped values; returns how many.

    Exact by construction: all that reads the quantized value is the ReLU6, which clamps it
    anyway. FX shares the observer instance with the ReLU6 output (and with range-sharing ops
    after it), so the fold is skipped unless every other use observes values already in [0, 6].
    """
    from torch.ao.quantization.observer import ObserverBase

    modules = dict(prepared.named_modules(remove_duplicate=False))
    calls: dict[int, list[torch.fx.Node]] = collections.defaultdict(list)
    for node in prepared.graph.nodes:
        if node.op == "call_module" and isinstance(modules.get(str(node.target)), ObserverBase):
            calls[id(modules[str(node.target)])].append(node)
    folded = 0
    for node in prepared.graph.nodes:
        source = node.args[0] if _is_relu6(node, modules) and node.args else None
        observer = modules.get(str(source.target)) if isinstance(source, torch.fx.Node) else None
        if not isinstance(observer, ObserverBase) or len(source.users) != 1:
            continue
        others = [use for use in calls[id(observer)] if use is not source]
        if all(_in_relu6_range(use.args[0], modules) for use in others):
            observer.register_forward_pre_hook(_clamp_to_relu6)
            folded += 1
    return folded


def _batches(data: np.ndarray, size: int) -> Iterator[torch.Tensor]:
    for i in range(0, len(data), size):
        yield torch.from_numpy(np.ascontiguousarray(data[i:i + size], dtype=np.float32))


def _prepare_for_fx(model: nn.Module, probe: torch.Tensor) -> tuple[nn.Module, int]:
    """Model with the same-padding rewrite, if it keeps outputs; (model, convs rewritten)."""
    with torch.no_grad():
        before = model(probe)
        rewritten = rewrite_same_padding(model)
        after = model(probe)
    if not torch.allclose(before, after, rtol=1e-4, atol=1e-5):
        raise SutError(f"same-padding rewrite changed the model's outputs "
                       f"(max diff {float((before - after).abs().max()):.3g})")
    return model, rewritten


def static_key(spec: ModelSpec, fp32: Artifact, calibration_hash: str,
               recipe: Recipe | None = None) -> str:
    """The INT8 artifact's cache key; a layer recipe is part of it only when it changes
    something, so ``Recipe()`` keeps the key (and the cached file) of the normal SUT."""
    layers = recipe.key() if recipe is not None else {}
    return hash_json({"what": "torch-fx-int8", "model": spec.name, "fp32": fp32.source_hash,
                      "calibration": calibration_hash, "recipe": STATIC_RECIPE,
                      "torch": torch.__version__, **({"layers": layers} if layers else {}),
                      **task_key(task_meta(spec)),  # a detector's: its decode kept float
                      # the FP32 artifact's key holds the class count and the input geometry,
                      # which seeded random weights (one source hash) depend on
                      "fp32_key": fp32.key})


def build_static_fx(spec: ModelSpec, fp32: Artifact, calibration: np.ndarray,
                    recipe: Recipe | None = None) -> tuple[nn.Module, torch.Tensor, dict]:
    """The converted FX GraphModule of the static recipe (+ ``recipe``), its probe batch and
    build facts. Deterministic: diagnose rebuilds it to hook the modules of the cached script."""
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    recipe = recipe or Recipe()
    use_x86_engine()
    model = load_fp32_model(spec, fp32)
    probe = torch.from_numpy(np.ascontiguousarray(calibration[:2], dtype=np.float32))
    t0 = time.perf_counter()
    model, rewritten = _prepare_for_fx(model, probe)
    lr.check_names(model, recipe)
    mapping, head = td.int8_mapping(spec, model, lr.qconfig_mapping(ENGINE, recipe))
    try:
        with quiet():
            prepared = prepare_fx(model, mapping, example_inputs=(probe,))
    except Exception as exc:  # FX symbolic tracing fails in many ways on dynamic code
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise SutError(f"torch FX cannot trace {spec.name} for INT8: {cause}") from exc
    relu6_folded = fold_relu6_ranges(prepared)
    t1 = time.perf_counter()
    with torch.no_grad():
        for batch in _batches(calibration, STATIC_RECIPE["calibration_batch"]):
            prepared(batch)
    t2 = time.perf_counter()
    with quiet():
        quantized = convert_fx(prepared)
    damaged = lr.damage_weights(quantized, recipe)
    facts = {"same_padding_convs_rewritten": rewritten, "relu6_ranges_folded": relu6_folded,
             "calibration_s": t2 - t1, "quantize_s": time.perf_counter() - t0,
             **td.int8_facts(spec, head, model, quantized, calibration),
             **({"layer_recipe": recipe.key(), "damaged": damaged} if recipe.key() else {})}
    return quantized, probe, facts


_SOURCES: dict[str, tuple[ModelSpec, Artifact, Recipe, weakref.ref]] = {}


def static_source(key: str) -> tuple[ModelSpec, Artifact, Recipe, np.ndarray] | None:
    """What built the INT8 artifact ``key`` in this process (spec, FP32 weights, recipe,
    calibration), while its calibration array is alive (a backend keeps a view of it)."""
    entry = _SOURCES.get(key)
    data = entry[3]() if entry else None
    return None if entry is None or data is None else (entry[0], entry[1], entry[2], data)


def quantize_static_int8(spec: ModelSpec, fp32: Artifact, calibration: np.ndarray,
                         calibration_hash: str, recipe: Recipe | None = None) -> Artifact:
    """INT8 TorchScript of ``fp32``'s model, calibrated on ``calibration`` [N,C,H,W] (the
    spec's channels and size; cached); ``recipe`` keeps modules in FP32 or damages weights
    (``recipe`` module)."""
    want = (spec.channels, spec.input_size, spec.input_width)
    if calibration.ndim != 4 or calibration.shape[1:] != want or len(calibration) == 0:
        raise ValueError(f"calibration must be a non-empty [N,{want[0]},{want[1]},{want[2]}] "
                         f"array, got {calibration.shape}")
    recipe = recipe or Recipe()
    key = static_key(spec, fp32, calibration_hash, recipe)
    _SOURCES[key] = (spec, fp32, recipe, weakref.ref(calibration))

    def build(folder: Path) -> Artifact:
        progress(f"quantizing {spec.name} to INT8 (torch FX, x86) on {len(calibration)} "
                  "calibration samples ...")
        quantized, probe, facts = build_static_fx(spec, fp32, calibration, recipe)
        calibration_s, quantize_s = facts.pop("calibration_s"), facts.pop("quantize_s")
        out = folder / f"{spec.name}-int8.torchscript"
        trace_s = _save_verified_script(quantized, probe, calibration, out)
        progress(f"quantized {spec.name} in {quantize_s:.1f} s")
        meta = {k: v for k, v in fp32.meta.items() if k not in ("cached", "sha256", "user_file")}
        meta.update({
            "quant_recipe": STATIC_RECIPE, "calibration_hash": calibration_hash,
            "calibration_samples": int(len(calibration)), "fp32_key": fp32.key, **facts,
            "fx_modules": module_classes(quantized),
            "sha256": hash_file(out),
        })
        return Artifact(
            path=out, format="torchscript", precision="int8", key=key, weights=fp32.weights,
            source_hash=fp32.source_hash,
            times={"calibration_s": round(calibration_s, 3), "quantize_s": round(quantize_s, 3),
                   "trace_s": round(trace_s, 3)},
            meta=meta,
        )

    return cached_build(spec.name, key, build)


def _save_verified_script(model: nn.Module, probe: torch.Tensor, calibration: np.ndarray,
                          out: Path) -> float:
    """Trace, save and reload ``model``; refuse a file whose outputs differ at any batch size."""
    t0 = time.perf_counter()
    with quiet(), torch.no_grad():
        traced = torch.jit.trace(model, probe)  # batch 2: a batch of 1 could be specialised
        torch.jit.save(traced, str(out))
        reloaded = load_script(out)
        checks = [probe[:1], torch.from_numpy(np.ascontiguousarray(calibration[:7]))]
        for x in checks:
            expected = model(x)
            for _ in range(3):  # the profiling executor optimises after the first calls
                if not torch.equal(expected, reloaded(x)):
                    raise SutError(f"TorchScript round trip of {out.name} changed outputs at "
                                   f"batch {len(x)}; not caching it")
    return time.perf_counter() - t0


def load_script(path: str | Path) -> torch.jit.ScriptModule:
    """Load a saved INT8 script; packed weights are re-packed for the x86 engine."""
    use_x86_engine()
    with quiet():
        script = torch.jit.load(str(path), map_location="cpu")
    return script.eval()


def script_op_counts(script: torch.jit.ScriptModule) -> dict[str, int]:
    """Op kinds in the script's inlined graph: what the interpreter actually runs."""
    counts = collections.Counter(node.kind() for node in script.inlined_graph.nodes()
                                 if not node.kind().startswith("prim::"))
    return dict(sorted(counts.items()))


def compute_op_split(ops: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(integer conv/linear kernels, float conv/linear kernels) among ``ops``."""
    integer = {k: n for k, n in ops.items() if k.startswith(_QUANTIZED_COMPUTE)}
    floating = {k: n for k, n in ops.items() if k in _FLOAT_COMPUTE}
    return integer, floating


def module_classes(model: nn.Module) -> dict[str, int]:
    """Module class counts (``package.Class``) below the root, for the record; FX's bare
    ``nn.Module`` placeholders for the original hierarchy are left out."""
    counts = collections.Counter(f"{type(m).__module__.split('.modules')[0]}.{type(m).__name__}"
                                 for name, m in model.named_modules()
                                 if name and type(m) is not nn.Module)
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------- dynamic INT8


def quantize_dynamic_int8(model: nn.Module) -> tuple[nn.Module, float]:
    """Dynamic INT8 of every ``nn.Linear`` (weights int8, activations quantized per call)."""
    from torch.ao.quantization import quantize_dynamic

    use_x86_engine()
    t0 = time.perf_counter()
    with quiet():
        quantized = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return quantized, time.perf_counter() - t0


def with_meta(artifact: Artifact, **meta: Any) -> Artifact:
    """A copy of ``artifact`` with extra meta (and its own times dict) for one SUT."""
    return replace(artifact, meta={**artifact.meta, **meta}, times=dict(artifact.times))
