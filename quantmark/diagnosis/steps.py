"""``run.py diagnose``: where a reduced-precision SUT loses accuracy, layer by layer, and what
winning it back costs.

The steps, each a function: build the two SUTs (the diagnosed one, and its framework's FP32 or
``--against``), capture both on the same evaluation samples chunk by chunk with each framework's
own mechanism (``sut/<framework>/diagnose.py``), match and measure the layers
(``layer_errors``), then optionally re-quantize with the worst K layers in FP32 and measure the
trade-off (``recovery``), and write it all like a run (``output``).

A text model is captured on its run's token samples (``diagnosis.samples``) and ranked the
same way; its recovery curve is refused in one line (no judge of its metric yet), as is a SUT
whose framework does not capture text models yet (``hooks.text_refusal``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from quantmark.diagnosis import (
    hooks,
    judges,
    layer_errors,
    layer_times,
    output_quality,
    recovery,
    recovery_cost,
)
from quantmark.diagnosis.samples import Data, open_data
from quantmark.ground.config import WorkloadFields
from quantmark.ground.errors import SutError, UserError
from quantmark.models.text_graph import is_text
from quantmark.sut.interface import Backend, SutOptions
from quantmark.sut.layers import Recipe
from quantmark.sut.registry import fp32_baseline, load_factory, require_available
from quantmark.tasks.catalog import task_for
from quantmark.tasks.contract import Task

log = logging.getLogger(__name__)

#: how the recovery curve times its points
TIMING = "one caller, predict on a batch in a loop; rounds interleaved"
#: a task whose SUT postprocesses after predict (a detector's NMS): the curve times the model
UNTIMED_POSTPROCESS = ("; the task's postprocessing after predict is not timed here (the "
                       "same for every point; run.py profile times it)")


@dataclass
class DiagnoseConfig(WorkloadFields):
    """What ``run.py diagnose`` was asked (plain data, from the CLI); the model's file, shape,
    preprocessing and data are a run's (``WorkloadFields``)."""

    model: str
    sut: str
    against: str | None = None  # None: the SUT's framework's FP32 on the same device
    samples: int = 32  # evaluation samples captured layer by layer
    worst: int = 10  # layers listed
    recover: int = 0  # K: measure K = 0, 1, 2, 4 ... K layers kept in FP32
    recover_by: str = "accuracy"  # the curve's order: SQNR lost, or SQNR recovered per ms
    profile_iterations: int = 20  # profiled inferences pricing each candidate layer in ms
    profile_warmup: int = 5
    damage: tuple[tuple[str, float], ...] = ()  # injected weight faults (testing diagnosis)
    eval_samples: int | None = None  # the recovery curve is judged on these (None: all)
    rounds: int = 5  # interleaved speed rounds of the recovery curve
    round_seconds: float = 1.0
    batch_size: int = 8
    threads: int = 0
    chunk: int = 4  # samples captured at a time (activations of a chunk are held in memory)
    output: str = "results"


def resolve(config: Any) -> tuple[Any, Any, Task]:
    """The run's spec as its task resolves it, and the config with the model file the SUTs
    load (a built-in detector's exported ONNX; a classifier's ``--model-path`` as given)."""
    task = task_for(config)
    spec = task.resolve_spec(config)
    return spec, replace(config, model_path=task.model_file(config)), task


def build(config: DiagnoseConfig, name: str, spec: Any, calibration: Any,
          recipe: Recipe | None = None) -> tuple[Backend, ModuleType]:
    """The SUT ``name`` (with ``recipe``), loaded, and its framework's diagnose module."""
    recipe = recipe or Recipe()
    info = require_available(name)
    module = hooks.diagnoser(info)
    if recipe.damage and not getattr(module, "DAMAGE", ""):
        raise UserError(f"--damage: {info.framework} injects no fault; damage an ort-int8, "
                        "tflite-int8 or torch-int8 model")
    options = SutOptions(model=config.model, scenario="Offline", batch_size=config.batch_size,
                         threads=config.threads, model_path=config.model_path)
    if recipe.key():  # the framework's own exclusion or fault: its diagnose module builds it
        backend = module.rebuild(name, options, spec, calibration, recipe)
    else:  # the SUT exactly as a run builds it (CPU or GPU factory alike)
        backend = load_factory(info)(name, options, spec, calibration)
    backend.load()
    return backend, module


def reference_name(config: DiagnoseConfig) -> str:
    if config.against:
        return config.against
    baseline = fp32_baseline(config.sut)
    if baseline is None:
        raise UserError(f"{config.sut} has no FP32 SUT of its own framework to compare with: "
                        "pass --against SUT")
    return baseline


def check(config: DiagnoseConfig, reference: str, count: int, task: Task | None = None
          ) -> None:
    why = judges.refusal(task) if task is not None and config.recover else None
    if why:
        raise UserError(why)
    if reference == config.sut and not config.damage:
        raise UserError(f"diagnose {config.sut} against itself: pass --against another SUT")
    if config.samples < 1 or config.chunk < 1 or config.worst < 1 or config.recover < 0:
        raise UserError("--samples and --worst must be at least 1, --recover at least 0")
    if config.recover_by not in recovery_cost.ORDERINGS:
        raise UserError(f"--recover-by {config.recover_by}: choose one of "
                        f"{', '.join(recovery_cost.ORDERINGS)}")
    if config.recover and (config.profile_iterations < 3 or config.profile_warmup < 0):
        raise UserError("--profile-iterations must be at least 3 (a median)")
    if config.recover and config.recover_by == "ms":
        info = require_available(config.sut)
        if hooks.profiler(info) is None:
            raise UserError(f"--recover-by ms: {info.framework} ({config.sut}) has no "
                            "per-layer profiler in quantmark yet; use --recover-by accuracy")
    if count < 1:
        raise UserError("the dataset has no evaluation samples")


#: why ``--recover`` refuses a text model: no judge yet, and dynamic INT8 excludes nothing
TEXT_RECOVERY = ("--recover: not yet for text models: diagnose has no recovery judge in {metric} "
                 "yet (and ONNX Runtime's dynamic INT8 keeps no layer in FP32); run without "
                 "--recover for the layer ranking")


def check_text(config: DiagnoseConfig, spec: Any, task: Task, reference: str) -> None:
    """One line, before any data is read, where a text model cannot be diagnosed as asked:
    ``--recover``, or a SUT whose framework captures no text model's layers yet."""
    if not is_text(spec):
        return
    if config.recover:
        raise UserError(TEXT_RECOVERY.format(metric=task.metric.name))
    for name in dict.fromkeys((config.sut, reference)):
        info = require_available(name)
        why = hooks.text_refusal(info, hooks.diagnoser(info), "diagnose")
        if why:
            raise UserError(why)


def judge_of(config: DiagnoseConfig, task: Task, spec: Any, data: Data) -> judges.Judge | None:
    """The recovery curve's judge in the task's metric, on ``--eval-samples`` (None without
    ``--recover``); made before any SUT is built, so data it cannot judge is refused first."""
    if not config.recover:
        return None
    count = min(config.eval_samples or len(data.labels), len(data.labels))
    return judges.judge_for(task, spec, data, count, config.batch_size)


def capture_errors(config: DiagnoseConfig, data: Data, test: tuple[Backend, ModuleType],
                   ref: tuple[Backend, ModuleType]) -> tuple[layer_errors.Matching, dict]:
    """Capture both models chunk by chunk on the first ``samples`` evaluation samples and
    accumulate every matched layer's error."""
    count = min(config.samples, len(data.labels))
    matching, methods = None, {}
    for start in range(0, count, config.chunk):
        stop = min(start + config.chunk, count)
        got = test[1].capture(test[0], data.batch(test[0].layout, start, stop))
        want = ref[1].capture(ref[0], data.batch(ref[0].layout, start, stop))
        if matching is None:
            matching = layer_errors.match(got.layers, want.layers)
            if not matching.pairs:
                raise UserError(f"no layer of {config.sut} matched one of the reference by "
                                "name or by position and shape: compare SUTs of one model")
            methods = {"test": _capture_facts(got), "reference": _capture_facts(want)}
        layer_errors.accumulate(matching, got.layers, want.layers)
        log.info("captured samples %d-%d of %d", start, stop, count)
    assert matching is not None
    layer_errors.attribute(matching.pairs, matching.inputs_of)
    return matching, methods


def _capture_facts(capture: Any) -> dict[str, Any]:
    return {"method": capture.method, "precision_source": capture.precision_source,
            "layers": len(capture.layers),
            "notes": {k: str(v) for k, v in capture.notes.items()}}


def run(config: DiagnoseConfig) -> dict[str, Any]:
    """Diagnose, optionally recover, and return the results record (written by the caller)."""
    spec, config, task = resolve(config)
    reference = reference_name(config)
    check_text(config, spec, task, reference)
    data, calibration = open_data(config, spec)
    check(config, reference, len(data.labels), task)
    judge = judge_of(config, task, spec, data)
    damage = Recipe(damage=config.damage)
    test = build(config, config.sut, spec, calibration, damage)
    ref = build(config, reference, spec, calibration)
    matching, methods = capture_errors(config, data, test, ref)
    pairs = matching.pairs
    jump = layer_errors.first_jump(pairs)
    record: dict[str, Any] = {
        "kind": "diagnosis", "model": config.model, "sut": config.sut, "against": reference,
        "samples": min(config.samples, len(data.labels)), "damage": [list(d) for d in
                                                                   config.damage],
        "capture": methods, "matched": matching.by_method(),
        "unmatched": {"test": matching.unmatched_test,
                      "reference": matching.unmatched_reference},
        "first_jump": jump.name if jump else None,
        "jump_rule": {"jump_db": layer_errors.JUMP_DB,
                      "near_worst_db": layer_errors.NEAR_WORST_DB,
                      "lossless_db": layer_errors.LOSSLESS_DB},
        "layers": [layer_record(pair) for pair in pairs],
        "worst": [pair.name for pair in layer_errors.worst(pairs, config.worst)],
        "exclusion": getattr(test[1], "EXCLUSION", ""),
        "describe": {"test": test[0].describe(), "reference": ref[0].describe()},
        "task": task.describe(spec),
    }
    if output_quality.scores_boxes(task):  # the final output's error, both SUTs' metric
        record["quality"] = output_quality.detection_quality(
            task, spec, data, test[0], ref[0], record["samples"], config.batch_size)
    if judge is not None:
        try:
            record["recovery"] = recover(config, data, calibration, spec, test, ref, pairs,
                                         judge)
        except (UserError, SutError) as exc:  # the diagnosis itself stands: keep it
            record["recovery_failed"] = str(exc)
    for backend in (test[0], ref[0]):
        backend.close()
    return record


def layer_record(pair: layer_errors.Pair) -> dict[str, Any]:
    return {"name": pair.name, "op_type": pair.op_type, "precision": pair.precision,
            "reference": pair.reference, "reference_op": pair.reference_op,
            "reference_precision": pair.reference_precision, "matched_by": pair.matched_by,
            "shape": list(pair.shape), "sqnr_db": round(pair.sqnr_db, 3),
            "cosine": round(pair.cosine, 6), "lost_db": round(pair.lost_db, 3),
            "excludable": pair.excludable,
            "inputs": list(pair.inputs)}


def excludable(pairs: list[layer_errors.Pair], k: int) -> list[str]:
    """The worst ``k`` layers that run quantized (keeping an FP32 layer in FP32 changes
    nothing) and that the framework can keep in FP32."""
    return [pair.name for pair in excludable_pairs(pairs, k)]


def excludable_pairs(pairs: list[layer_errors.Pair], k: int) -> list[layer_errors.Pair]:
    ranked = layer_errors.worst(pairs, len(pairs))
    return [pair for pair in ranked if pair.precision.startswith("int") and pair.excludable][:k]


def price(config: DiagnoseConfig, data: Data, spec: Any, test: tuple[Backend, ModuleType],
          ref: tuple[Backend, ModuleType], pairs: list[layer_errors.Pair],
          pool: list[layer_errors.Pair]) -> tuple[list[recovery_cost.Cost], dict[str, Any]]:
    """The candidate layers, each priced in ms from both SUTs' profiles on the timed batch,
    in the order ``--recover-by`` asks; and how they were priced."""
    found, why = recovery_cost.profile_pair(
        [(config.sut, test[0]), (reference_name(config), ref[0])],
        lambda layout: data.batch(layout, 0, config.batch_size),
        config.profile_iterations, config.profile_warmup)
    layers = [(pair.name, pair.op_type) for pair in pairs]
    graph, vocabulary = _canonical_graph(config, spec)
    if not recovery_cost.named_as_graph(layers, graph):
        graph, vocabulary = None, f"{config.sut}'s own layer names, then op positions"
    costs = recovery_cost.costs(pool, layers, *found, why, graph)
    facts = {"iterations": config.profile_iterations, "warmup": config.profile_warmup,
             "batch_size": config.batch_size,
             "unknown": [c.name for c in costs if c.cost_ms is None], "why_unknown": why,
             "cost": "time in the reference minus time in the INT8 model (its compute node "
                     "with the overhead attributed to it), per batch",
             "test": _profile_facts(found[0]), "reference": _profile_facts(found[1]),
             "vocabulary": vocabulary}
    return recovery_cost.order(costs, config.recover_by), facts


def _canonical_graph(config: DiagnoseConfig, spec: Any) -> tuple[Any, str]:
    """The canonical FP32 ONNX model's nodes, which pair the two profiles' layers (as
    ``run.py profile`` pairs them), and a line saying what paired them."""
    try:
        graph, line = layer_times.canonical_graph(config, spec)
    except (UserError, SutError) as exc:
        return None, f"frameworks' own names and op positions (no canonical ONNX: {exc})"
    return graph, (f"canonical ONNX layers of {line}" if graph is not None else line)


def _profile_facts(found: Any) -> dict[str, Any] | None:
    if found is None:
        return None
    return {"sut": found.sut, "method": found.method,
            "end_to_end_ms": round(found.end_to_end_ms, 4),
            "layer_sum_ms": round(found.layer_sum_ms, 4)}


def recover(config: DiagnoseConfig, data: Data, calibration: Any, spec: Any,
            test: tuple[Backend, ModuleType], ref: tuple[Backend, ModuleType],
            pairs: list[layer_errors.Pair], judge: judges.Judge) -> dict[str, Any]:
    """The recovery curve: K = 0, 1, 2, 4 ... ``recover`` candidate layers in FP32, plus the
    reference, judged in the task's metric on ``judge``'s evaluation samples and timed in
    interleaved rounds. The candidates are the worst ``max(worst, recover)`` excludable
    layers, each priced in ms from the two SUTs' profiles, taken worst first or
    (``recover_by="ms"``) most SQNR per ms first; each point's latency is predicted from the
    prices beside its measured one."""
    points = recovery.curve_points(config.recover)
    candidates, priced = price(config, data, spec, test, ref, pairs,
                               excludable_pairs(pairs, max(config.worst, max(points))))
    ranked = [cost.name for cost in candidates][:max(points)]
    # a point keeping every quantized layer in FP32 is the FP32 model: the SUT's own proof
    # refuses to call it INT8, and the reference point already measures it
    quantized = {pair.name for pair in excludable_pairs(pairs, len(pairs))}
    dropped = [k for k in points[1:] if quantized and quantized <= set(ranked[:k])]
    points = [k for k in points if k not in dropped]
    variants = [recovery.Variant("K=0", 0, [], test[0], describe=test[0].describe())]
    for k in points[1:]:
        # a fault lives in a layer's quantization: a layer kept in FP32 has none
        recipe = Recipe(exclude=tuple(ranked[:k]), damage=tuple(
            (name, factor) for name, factor in config.damage if name not in ranked[:k]))
        backend, _ = build(config, config.sut, spec, calibration, recipe)
        variants.append(recovery.Variant(f"K={k}", k, ranked[:k], backend,
                                         describe=backend.describe()))
    variants.append(recovery.Variant(f"reference {reference_name(config)}", None, [], ref[0],
                                     describe=ref[0].describe()))
    for variant in variants:
        recovery.score(variant, judge)
    inputs = {id(v): v.backend.encode_samples(data.batch(v.backend.layout, 0, config.batch_size))
              for v in variants}
    recovery.time_rounds(variants, inputs, config.rounds, config.round_seconds)
    rows = recovery.summarize(variants, judge, len(next(iter(inputs.values()))))
    recovery_cost.add_predictions(rows, {cost.name: cost for cost in candidates})
    for variant in variants[1:-1]:
        variant.backend.close()
    return {"points": points, "eval_samples": judge.count, "rounds": config.rounds,
            "dropped": {"points": dropped, "why": "every quantized layer kept in FP32: the "
                        "FP32 model, which the reference point measures"} if dropped else None,
            "round_seconds": config.round_seconds, "batch_size": config.batch_size,
            "timing": TIMING + (UNTIMED_POSTPROCESS if judge.postprocessed else ""),
            "recover_by": config.recover_by, "order": ranked,
            "candidates": [cost.record() for cost in candidates], "costs": priced,
            "rows": rows}
