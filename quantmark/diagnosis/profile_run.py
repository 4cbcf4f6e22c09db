"""``run.py profile``: where one SUT's inference time goes, layer by layer, against others.

Every SUT is built exactly as a run builds it, on real samples of the run's dataset; each
framework's ``profile`` module reads its own profiler (``quantmark.sut.profiling``); the layers
are mapped onto the canonical FP32 ONNX model (the one the run's SUTs are made from), paired and
the answers computed in ``layer_times``. The first ``--against`` SUT is the reference of the
ratio, the milliseconds lost and the ranking; further ones sit beside it per ONNX layer. With
``--against-model-path F`` the references run model F (a modified model against the original).
A framework that cannot profile is one line in the record, and the others still report.

A text model is fed its run's token samples (``diagnosis.samples``), and each SUT's time is
also summed by role (attention, MatMul/Linear, softmax, layernorm, quantize/dequantize ...:
``layer_roles``), each node's role read from the graph its framework ran where the framework's
profile module hands it (``executed_graph``); a framework not yet feeding text models
(``hooks.text_refusal``) is refused in one line before anything is built.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from quantmark.diagnosis import hooks, layer_roles, layer_times, postprocess_times
from quantmark.diagnosis.layer_times import canonical_graph
from quantmark.diagnosis.postprocess_times import Step
from quantmark.diagnosis.steps import build, open_data, resolve
from quantmark.ground.config import WorkloadFields
from quantmark.ground.errors import SutError, UserError
from quantmark.models.text_graph import is_text
from quantmark.sut.interface import SutOptions
from quantmark.sut.layers import Recipe
from quantmark.sut.profiling import Profile
from quantmark.sut.registry import fp32_baseline, load_factory, require_available

log = logging.getLogger(__name__)

@dataclass
class ProfileConfig(WorkloadFields):
    """What ``run.py profile`` was asked (plain data, from the CLI); the model's file, shape,
    preprocessing and data are a run's (``WorkloadFields``)."""

    model: str
    sut: str
    against: str | None = None  # None: the SUT's framework's FP32; several: comma-separated
    batch_size: int = 1
    iterations: int = 50
    warmup: int = 10
    worst: int = 10
    threads: int = 0
    output: str = "results"
    against_model_path: str | None = None  # the references run this model instead


def references(config: ProfileConfig) -> list[str]:
    """The reference SUTs (``--against``, comma-separated; default: the framework's FP32);
    one line for a request that cannot be profiled."""
    if config.iterations < 3 or config.warmup < 0 or config.batch_size < 1 or config.worst < 1:
        raise UserError("--iterations must be at least 3 (a median), --warmup at least 0, "
                        "--batch-size and --worst at least 1")
    names = [n.strip() for n in (config.against or "").split(",") if n.strip()]
    if not names:
        baseline = fp32_baseline(config.sut)
        if baseline is None:
            raise UserError(f"{config.sut} has no FP32 SUT of its own framework to compare "
                            "with: pass --against SUT")
        names = [baseline]
    if len(set(names)) < len(names):
        raise UserError(f"--against {config.against} names a SUT twice; name each once")
    if config.sut in names and not config.against_model_path:
        raise UserError(f"profile {config.sut} against itself: pass --against another SUT, or "
                        "--against-model-path for the same SUT on another model")
    return names


def check(config: ProfileConfig) -> str:
    """The reference SUT (the first ``--against``); one line for a request that cannot be
    profiled."""
    return references(config)[0]


def labels(config: ProfileConfig, names: list[str]) -> list[str]:
    """What the references are called in the record: their SUT name, marked with the model
    they run where ``--against-model-path`` gives one (it may be the tested SUT itself)."""
    if not config.against_model_path:
        return names
    stem = Path(config.against_model_path).stem
    return [f"{name}@{stem}" if f"{name}@{stem}" != config.sut else f"{name}@reference"
            for name in names]


@dataclass
class Profiled:
    """One SUT's profile (None, and why, where its framework cannot profile here), its
    postprocessing steps, and its nodes' roles from the graph it ran (None: none given)."""

    profile: Profile | None
    why: str | None = None
    steps: list[Step] = field(default_factory=list)
    roles: dict[str, str] | None = None


def profile_one(config: ProfileConfig, name: str, spec: Any, data: Any, calibration: Any,
                label: str | None = None, recipe: Recipe | None = None,
                ) -> tuple[Profile | None, str | None]:
    """One SUT's profile (called ``label``), or why there is none (its framework has no
    profiler here). The SUT is built as a run builds it (no diagnose module needed); with a
    ``recipe`` (layers kept in float), by its framework's diagnose module as diagnose does."""
    found = profile_with_postprocess(config, name, spec, data, calibration, label, recipe)
    return found.profile, found.why


def _executed_roles(module: Any, backend: Any, spec: Any) -> dict[str, str] | None:
    """A text model's nodes' roles, from the graph the framework ran (its profile module's
    ``executed_graph``); None where it hands none, or for another task's model."""
    hook = getattr(module, "executed_graph", None)
    if not is_text(spec) or hook is None:
        return None
    try:
        return layer_roles.graph_roles(hook(backend))
    except SutError as exc:  # the profile stands; its roles come from op types alone
        log.warning("no executed graph of %s: %s", backend.artifact.path, exc)
        return None


def profile_with_postprocess(config: ProfileConfig, name: str, spec: Any, data: Any,
                             calibration: Any, label: str | None = None,
                             recipe: Recipe | None = None) -> Profiled:
    """``profile_one``'s answer, the task's postprocessing (a detector's NMS: part of the
    SUT's timed work, which no profiler sees) timed on the same SUT's outputs for the same
    batch (no steps for a classifier), and a text model's node roles."""
    info = require_available(name)
    module = hooks.profiler(info)
    if module is None:
        return Profiled(None, f"{info.framework} ({name}) has no per-layer profiler in "
                              "quantmark yet")
    if recipe is not None and recipe.key():
        backend, _ = build(config, name, spec, calibration, recipe)
    else:
        backend = load_factory(info)(name, SutOptions(
            model=config.model, scenario="Offline", batch_size=config.batch_size,
            threads=config.threads, model_path=config.model_path), spec, calibration)
        backend.load()
    try:
        samples = data.batch(backend.layout, 0, config.batch_size)
        found = module.profile(backend, samples, config.iterations, config.warmup)
        respond = data.task.for_sut(info).respond(spec) if data.task is not None else None
        steps = postprocess_times.time_respond(respond, backend, samples, config.iterations,
                                               config.warmup)
        roles = _executed_roles(module, backend, spec)
    except SutError as exc:  # the framework's profiler or tool is missing here
        return Profiled(None, str(exc))
    finally:
        backend.close()
    found.sut = label or name
    return Profiled(found, None, steps, roles)


def check_text(spec: Any, names: list[str]) -> None:
    """One line where a SUT's framework cannot profile a text model yet."""
    if not is_text(spec):
        return
    for name in names:
        info = require_available(name)
        why = hooks.text_refusal(info, hooks.profiler(info), "profile")
        if why:
            raise UserError(why)


def _reference_spec(config: ProfileConfig, spec: Any) -> tuple[ProfileConfig, Any]:
    """The references' config and spec: the test's, or ``--against-model-path``'s model,
    which must take the same inputs (images, or a text model's tokens) and answer alike."""
    if not config.against_model_path:
        return config, spec
    if not Path(config.against_model_path).exists():
        raise UserError(f"--against-model-path {config.against_model_path} not found; pass "
                        "an existing model file")
    ref_spec, ref_config, _ = resolve(replace(config, model_path=config.against_model_path))
    shape = ("channels", "input_size", "input_width", "num_classes", "input_dtype")
    if any(getattr(ref_spec, k) != getattr(spec, k) for k in shape):
        raise UserError(f"--against-model-path {config.against_model_path} takes other "
                        "inputs or answers with other outputs than the profiled model (image "
                        "size, classes, sequence length, width); pass a model of the same "
                        "inputs and outputs")
    return ref_config, ref_spec


def run(config: ProfileConfig) -> dict[str, Any]:
    """Profile the SUT and its references; return the record (written by the caller)."""
    names = references(config)
    spec, config, task = resolve(config)
    check_text(spec, [config.sut, *names])
    ref_config, ref_spec = _reference_spec(config, spec)
    data, calibration = open_data(config, spec)
    if len(data.labels) < config.batch_size:
        raise UserError(f"--batch-size {config.batch_size} is more than the dataset's "
                        f"{len(data.labels)} samples; pass a smaller batch")
    graph, onnx_model = canonical_graph(config, spec)
    sides = {config.sut: profile_with_postprocess(config, config.sut, spec, data, calibration)}
    for name, label in zip(names, labels(config, names), strict=True):
        sides[label] = profile_with_postprocess(ref_config, name, ref_spec, data, calibration,
                                                label)
    result = record(config, spec.name, {k: (v.profile, v.why) for k, v in sides.items()},
                    graph, onnx_model, {k: v.steps for k, v in sides.items()},
                    {k: v.roles for k, v in sides.items()} if is_text(spec) else None)
    result["task"] = task.for_sut(require_available(config.sut)).describe(spec)
    return result


def _side(profile: Profile, steps: list[Step] | None = None,
          roles: dict[str, dict[str, str] | None] | None = None) -> dict[str, Any]:
    """One SUT's profile as the record holds it; with ``roles`` (a text model's: by SUT
    label, its nodes' roles or None), its time by role too."""
    side = {**asdict(profile), "shares": layer_times.shares(profile),
            "sum_check": layer_times.sum_check(profile)}
    if steps:
        side["postprocess"] = postprocess_times.record(steps, profile.end_to_end_ms)
    if roles is not None:
        executed = roles.get(profile.sut)
        side["roles"] = layer_roles.breakdown(profile, executed)
        side["roles_from"] = ("the graph it ran" if executed is not None
                              else layer_roles.NO_GRAPH)
    return side


def record(config: ProfileConfig, model: str, found: dict[str, tuple[Profile | None, str | None]],
           graph: list[layer_times.GraphNode] | None, onnx_model: str,
           post: dict[str, list[Step]] | None = None,
           roles: dict[str, dict[str, str] | None] | None = None) -> dict[str, Any]:
    """The profile record of the test (``found``'s first) and its references (the rest);
    ``post``: each SUT's postprocessing steps, rows after the layers; ``roles`` (a text
    model's): each SUT's nodes' roles, its time by role beside its shares."""
    post = post or {}
    (sut, (test, _)), *refs = found.items()
    reference = refs[0][1][0]
    result: dict[str, Any] = {
        "model": model, "sut": sut, "against": refs[0][0],
        "references": [label for label, _ in refs], "batch_size": config.batch_size,
        "iterations": config.iterations, "warmup": config.warmup,
        "against_model_path": config.against_model_path,
        "onnx_model": onnx_model if graph is not None else "",
        "vocabulary": ("canonical ONNX layers" if graph is not None else onnx_model),
        "unsupported": {label: why for label, (_, why) in found.items() if why},
        "others": {label: _side(p, post.get(label), roles) for label, (p, _) in refs[1:]
                   if p is not None}}
    for key, label, side in (("test", sut, test), ("reference", refs[0][0], reference)):
        if side is not None:
            result[key] = _side(side, post.get(label), roles)
    if test is not None and reference is not None:
        rows = layer_times.compare(test, reference, graph) + postprocess_times.rows(
            post.get(sut, []), post.get(refs[0][0], []))
        result["layers"] = [row_record(row) for row in rows]
        result["slower"] = [row_record(row) for row in layer_times.slower(rows, config.worst)]
    profiled = [p for _, (p, _) in refs if p is not None]
    if test is not None and len(profiled) > 1:
        result["side_by_side"] = side_by_side_record(test, profiled, graph)
    return result


def _layer(layer: layer_times.Layer | None) -> dict[str, Any] | None:
    if layer is None:
        return None
    return {"name": layer.name, "op_type": layer.op_type, "kernel": layer.kernel,
            "precision": layer.precision, "compute_ms": layer.compute_ms,
            "overhead_ms": layer.overhead_ms, "total_ms": layer.total_ms,
            "overhead": [o.name for o in layer.overhead], "onnx_layer": layer.onnx_layer}


def row_record(row: layer_times.Row) -> dict[str, Any]:
    """One paired layer, as the record and the tables hold it."""
    return {"onnx_layer": row.onnx_layer, "test": _layer(row.test),
            "reference": _layer(row.reference), "matched_by": row.matched_by,
            "ratio": row.ratio, "ms_lost": row.ms_lost}


def side_by_side_record(test: Profile, refs: list[Profile],
                        graph: list[layer_times.GraphNode] | None) -> list[dict[str, Any]]:
    """Each layer in every SUT (the test, then each reference), by ONNX layer."""
    return [{"layer": key, "suts": {column.label: _layer(column.layer) for column in columns}}
            for key, columns in layer_times.side_by_side(test, refs, graph)]
