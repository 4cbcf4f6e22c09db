"""TensorRT engines: ONNX -> serialized engine (plan), cached like every artifact.

What decides an engine is hashed into its cache key (``engine_cache_key``): the ONNX it was
parsed from, the precision, the dynamic-batch optimisation profile, the TensorRT version, the
GPU (name and compute capability: a plan only runs on the GPU kind it was tuned on), the
calibration set for INT8 and the INT8 route. Engines live in
``cache_dir("models")/<model>/<key>/`` like every other artifact.

INT8 has two routes:

* ``calibrator`` (default): implicit quantization. TensorRT's entropy calibrator picks
  per-tensor scales on the shared calibration set; its cache is reused across engines
  (``sut.tensorrt.calibration``).
* ``qdq``: explicit quantization. ONNX Runtime's static quantizer writes a QDQ model with the
  form TensorRT accepts (signed INT8, symmetric scales, zero points 0, float biases), and
  TensorRT honours those scales (``models.qdq``, shared with ``ort-trt-int8``).

``trt-fp32`` clears ``BuilderFlag.TF32`` (on by default since Ampere): its matrix products are
IEEE FP32, so the FP32 baseline is FP32. Both INT8 routes also allow FP16, so layers TensorRT
keeps out of INT8 run FP16 rather than FP32 (what MLPerf submissions do); the SUT reports per
layer what ran.

Versions: the precision flags (``BuilderFlag.FP16`` / ``INT8``) and the calibrator are
TensorRT 10 API; TensorRT 11 removed both (strongly typed networks only). Under TensorRT 11
``trt-fp32`` and the ``qdq`` route still build, and the other SUTs stop with a one-line reason.

CUDA calls go through cuda-python (``sut.tensorrt.cuda_runtime``).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from quantmark.ground.errors import SutError, UserError
from quantmark.ground.hashing import hash_file, hash_json
from quantmark.models.artifacts import Artifact, cached_build, progress
from quantmark.sut.tensorrt.calibration import (
    CALIBRATION_BATCH,
    CALIBRATOR,
    CalibrationBatcher,
    CalibrationCache,
    calibration_cache_path,
    make_entropy_calibrator,
)
from quantmark.sut.tensorrt.cuda_runtime import gpu_identity

if TYPE_CHECKING:
    from quantmark.sut.layers import Recipe

#: everything about how an engine is built that is not an argument of ``engine_cache_key``
BUILD_RECIPE: dict[str, Any] = {"profiling_verbosity": "DETAILED", "int8_also_fp16": True,
                                "fp32_tf32": False, "calibrator": CALIBRATOR,
                                "calibration_batch": CALIBRATION_BATCH, "version": 1}
ROUTES = ("calibrator", "qdq")
PRECISIONS = ("fp32", "fp16", "int8")
PLAN_SUFFIX = ".plan"


# --------------------------------------------------------------------------- cache keys

def engine_cache_key(onnx_key: str, precision: str, profile: BatchProfile, trt_version: str,
                     gpu_name: str, compute_capability: str, calibration_hash: str | None,
                     route: str | None, layer_recipe: dict[str, Any] | None = None,
                     sample_shape: tuple[int, ...] | None = None) -> str:
    """Stable hash of everything that decides an engine; any changed field changes it.
    ``layer_recipe`` (``Recipe.key()``: layers kept in FP32) and ``sample_shape`` (the size a
    user's ONNX with a dynamic height or width is built for) join the key only when given, so
    the SUT's normal engine keeps the key it always had."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    fields: dict[str, Any] = {
        "what": "tensorrt-engine", "onnx": onnx_key, "precision": precision,
        "profile": profile.to_json(), "tensorrt": trt_version, "gpu": gpu_name,
        "compute_capability": compute_capability, "calibration": calibration_hash,
        "route": route, "recipe": BUILD_RECIPE,
    }
    if layer_recipe:
        fields["layer_recipe"] = layer_recipe
    if sample_shape:
        fields["sample_shape"] = list(sample_shape)
    return hash_json(fields)


def fixed_sample_shape(tensor_shape: tuple[int, ...],
                       sample_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """One sample's shape as the engine is built for it: the network input's own dims, its
    dynamic ones (-1) taken from ``sample_shape`` (the spec's, in the model's layout)."""
    dims = tuple(tensor_shape)[1:]
    if -1 not in dims:
        return dims
    if sample_shape is None or len(sample_shape) != len(dims):
        raise SutError(f"TensorRT needs the input's size: the model's input {tuple(tensor_shape)} "
                       "has dynamic dims besides the batch")
    return tuple(s if d == -1 else d for d, s in zip(dims, sample_shape, strict=True))


def int8_calibration(name: str, spec: Any, calibration: Any, layout: str) -> np.ndarray:
    """The calibration samples of trt-int8, as the engine's input takes them. Both routes
    calibrate with float32 batches (the calibrator's buffers, the QDQ quantizer's reader), so a
    raw-pixel (uint8) model is refused in one line."""
    if spec.input_dtype != "float32":
        raise UserError(f"{name}: model {spec.name} takes {spec.input_dtype} pixels, and "
                        "TensorRT's INT8 calibration feeds float32 batches: run trt-fp16 or "
                        "trt-fp32, or INT8 with ort-int8, ov-int8 or tflite-int8")
    return calibration.arrays(layout)


# --------------------------------------------------------------------------- batch profile

@dataclass(frozen=True)
class BatchProfile:
    """Min / opt / max batch of the engine's dynamic-batch optimisation profile."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.opt <= self.max:
            raise ValueError(f"need 1 <= min <= opt <= max, got {self.min}/{self.opt}/{self.max}")

    @classmethod
    def for_run(cls, scenario: str, batch_size: int) -> BatchProfile:
        """SingleStream predicts one sample at a time: 1/1/1. The batching scenarios (Offline,
        MultiStream, Server) predict up to ``batch_size`` samples, usually exactly that many:
        tuned for ``batch_size``, valid from 1 (a Server batch can be partly filled)."""
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        if scenario == "SingleStream":
            return cls(1, 1, 1)
        return cls(1, batch_size, batch_size)

    def shapes(self, sample_shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """(min, opt, max) input shapes for a sample shape such as (3, 224, 224)."""
        return tuple((batch, *sample_shape) for batch in (self.min, self.opt, self.max))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


# --------------------------------------------------------------------------- TensorRT version

def check_trt_supports(trt: Any, precision: str, route: str | None) -> None:
    """Refuse, in one line, what this TensorRT cannot build (TensorRT 11 has no weak typing)."""
    version = trt.__version__
    if precision in ("fp16", "int8") and not hasattr(trt.BuilderFlag, "FP16"):
        if precision == "fp16" or route == "calibrator":
            what = ("the INT8 calibrator" if precision == "int8" else "BuilderFlag.FP16")
            hint = (" or run trt-int8 with --sut-option trt_int8_route=qdq"
                    if precision == "int8" else "")
            raise UserError(f"TensorRT {version} removed {what} (strongly typed networks only); "
                            f"trt-{precision} needs TensorRT 10: pip install 'tensorrt>=10,<11'"
                            f"{hint}")


# --------------------------------------------------------------------------- engine build

#: one ONNX node in a layer's metadata; a fused layer joins several with \x1f or \x1e
ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
#: network layers a precision constraint means nothing for (no arithmetic on float values)
UNCONSTRAINED_LAYERS = ("CONSTANT", "SHAPE", "QUANTIZE", "DEQUANTIZE", "ASSERTION")


def onnx_nodes(metadata: Any) -> list[str]:
    """The ONNX node names in TensorRT's layer metadata ("[ONNX Layer: /conv/Conv]", which the
    ONNX parser writes on every layer it makes; fused engine layers list each node)."""
    return ONNX_LAYER.findall(str(metadata or ""))


def layer_node(layer: Any) -> str:
    """The ONNX node a network layer was parsed from: its metadata, else the layer's name
    (the parser names a node's main layer after the node)."""
    found = onnx_nodes(getattr(layer, "metadata", ""))
    return found[0] if found else str(layer.name)


def keep_fp32(trt: Any, network: Any, config: Any, exclude: Any) -> dict[str, list[str]]:
    """Force every network layer of the ONNX nodes ``exclude`` to compute and output FP32
    (``ILayer.precision``, ``set_output_type``) and make the builder obey
    (``BuilderFlag.OBEY_PRECISION_CONSTRAINTS``; PREFER would let it fall back silently).
    Returns {node: [network layers forced]}; a node with no layer is refused."""
    forced: dict[str, list[str]] = {name: [] for name in exclude}
    floats = (trt.float32, trt.float16)
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        node = layer_node(layer)
        if node not in forced or getattr(layer.type, "name", str(layer.type)) in \
                UNCONSTRAINED_LAYERS:
            continue
        layer.precision = trt.float32
        for out in range(layer.num_outputs):
            if layer.get_output(out).dtype in floats:
                layer.set_output_type(out, trt.float32)
        forced[node].append(str(layer.name))
    missing = sorted(name for name, layers in forced.items() if not layers)
    if missing:
        raise UserError(f"no layer of the TensorRT network comes from ONNX node(s) "
                        f"{', '.join(missing)}: name them as `run.py diagnose` lists them")
    config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    return forced


def _parse(trt: Any, builder: Any, logger: Any, path: Path) -> tuple[Any, Any]:
    """TensorRT's network of the ONNX file (and its parser, which must outlive the build);
    the parser's errors as one SutError."""
    flags = 0 if int(trt.__version__.split(".")[0]) >= 10 else (
        1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise SutError(f"TensorRT's ONNX parser rejected {path}: {errors}")
    return network, parser


def _configure(trt: Any, builder: Any, tensor: Any, precision: str, profile: BatchProfile,
               sample_shape: tuple[int, ...] | None = None) -> tuple[Any, BatchProfile]:
    """The builder config: per-layer profiling, the batch profile (a static-batch user ONNX
    runs its own batch only) for ``sample_shape`` and the precision flags (FP32 without TF32;
    INT8 also FP16)."""
    shape = tuple(tensor.shape)
    built_profile = profile
    if shape[0] != -1:
        built_profile = BatchProfile(shape[0], shape[0], shape[0])
    config = builder.create_builder_config()
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    optimisation = builder.create_optimization_profile()
    optimisation.set_shape(tensor.name, *built_profile.shapes(
        sample_shape or fixed_sample_shape(shape, None)))
    config.add_optimization_profile(optimisation)
    if precision == "fp32" and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    if precision in ("fp16", "int8") and hasattr(trt.BuilderFlag, "FP16"):
        config.set_flag(trt.BuilderFlag.FP16)
    if precision == "int8" and hasattr(trt.BuilderFlag, "INT8"):
        config.set_flag(trt.BuilderFlag.INT8)
    return config, built_profile


def _attach_calibrator(builder: Any, config: Any, tensor: Any, calibration: np.ndarray,
                       cache_file: Path) -> tuple[Any, CalibrationBatcher, CalibrationCache]:
    """The entropy calibrator of the calibrator route, fed fixed batches of the calibration
    set (samples as the model takes them) through its own optimisation profile, its cache in
    ``cache_file``."""
    batcher = CalibrationBatcher(calibration, CALIBRATION_BATCH)
    calib_profile = builder.create_optimization_profile()
    fixed = (CALIBRATION_BATCH, *calibration.shape[1:])
    calib_profile.set_shape(tensor.name, fixed, fixed, fixed)
    config.set_calibration_profile(calib_profile)
    cache = CalibrationCache(cache_file)
    calibrator = make_entropy_calibrator(batcher, cache)
    config.int8_calibrator = calibrator
    return calibrator, batcher, cache


def _serialize(builder: Any, network: Any, config: Any, calibrator: Any, what: str) -> bytes:
    """The engine plan; the calibrator's buffers are freed whatever happens."""
    try:
        plan = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None:
            calibrator.free()
    if plan is None:
        raise SutError(f"TensorRT could not build the {what} (its log above says why)")
    return bytes(plan)


def _engine_meta(onnx_artifact: Artifact, plan: Path, tensor: Any, route: str | None,
                 built: dict[str, Any], sample_shape: tuple[int, ...]) -> dict[str, Any]:
    """What the engine's manifest records: the model facts it keeps from its ONNX, how and for
    what it was built (``built``: TensorRT, GPU, profiles), its input and its hash."""
    meta = {k: v for k, v in onnx_artifact.meta.items()
            if k in ("model", "input_name", "output_name", "layout", "label_offset",
                     "num_classes")}
    meta.update({**built, "input_name": tensor.name,
                 "sample_shape": list(sample_shape), "route": route,
                 "onnx_key": onnx_artifact.key, "onnx_file": str(onnx_artifact.path),
                 "build_recipe": BUILD_RECIPE, "sha256": hash_file(plan)})
    return meta


def check_recipe(precision: str, route: str | None, recipe: Recipe | None) -> None:
    """Refuse, in one line, a recipe this build cannot honour: faults (TensorRT injects none),
    layers kept in FP32 of an FP32 engine, or of the QDQ route (explicit quantization obeys
    its Q/DQ nodes, not layer precisions: exclude there by leaving the node unquantized)."""
    if recipe is None or not recipe.key():
        return
    if recipe.damage:
        raise UserError("the TensorRT SUTs inject no faults (no --damage); damage a model "
                        "another framework quantizes")
    if precision == "fp32":
        raise UserError("trt-fp32 runs every layer in FP32 already: nothing to exclude")
    if route == "qdq":
        raise UserError("trt-int8's qdq route quantizes where its Q/DQ nodes say, whatever the "
                        "layer precisions: exclude layers with the calibrator route "
                        "(trt_int8_route=calibrator)")


def _check_request(trt: Any, precision: str, route: str | None, calibration: Any,
                   recipe: Recipe | None) -> None:
    """Refuse a build this TensorRT, route or recipe cannot make, before any work."""
    check_recipe(precision, route, recipe)
    check_trt_supports(trt, precision, route)
    if precision == "int8" and route not in ROUTES:
        raise ValueError(f"INT8 route must be one of {ROUTES}, got {route!r}")
    if precision == "int8" and route == "calibrator" and calibration is None:
        raise ValueError("the calibrator route needs the calibration array")


def build_engine(onnx_artifact: Artifact, precision: str, profile: BatchProfile, *,
                 route: str | None = None, calibration: np.ndarray | None = None,
                 calibration_hash: str | None = None, recipe: Recipe | None = None,
                 sample_shape: tuple[int, ...] | None = None) -> Artifact:
    """The cached TensorRT engine of ``onnx_artifact`` at ``precision`` for ``profile`` (and
    ``sample_shape``, one sample as fed: a user's ONNX may leave its height or width dynamic).

    ``route`` is "calibrator" or "qdq" for INT8 (None otherwise); the calibrator route needs
    ``calibration`` (samples as the model takes them), both INT8 routes its hash. ``recipe``
    keeps its ``exclude`` ONNX nodes in FP32 (``keep_fp32``); TensorRT injects no faults."""
    import tensorrt as trt

    layer_recipe = recipe.key() if recipe is not None else {}
    _check_request(trt, precision, route, calibration, recipe)
    gpu, capability = gpu_identity()
    model = onnx_artifact.meta.get("model", onnx_artifact.path.stem)
    key = engine_cache_key(onnx_artifact.key, precision, profile, trt.__version__, gpu,
                           capability, calibration_hash if precision == "int8" else None,
                           route if precision == "int8" else None, layer_recipe or None,
                           sample_shape if "user_file" in onnx_artifact.meta else None)
    calibration_file = (calibration_cache_path(model, onnx_artifact.key, calibration_hash or "",
                                               trt.__version__)
                        if precision == "int8" and route == "calibrator" else None)

    def build(folder: Path) -> Artifact:
        progress(f"building the TensorRT {precision} engine of {model} for {gpu} "
                 f"(batch {profile.min}/{profile.opt}/{profile.max}; one-off, then cached) ...")
        started = time.perf_counter()
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network, _parser = _parse(trt, builder, logger, onnx_artifact.path)
        tensor = network.get_input(0)
        sample = fixed_sample_shape(tuple(tensor.shape), sample_shape)
        config, built_profile = _configure(trt, builder, tensor, precision, profile, sample)
        forced = keep_fp32(trt, network, config, recipe.exclude) if layer_recipe else None
        calibrator = batcher = cache = None
        if precision == "int8" and route == "calibrator":
            calibrator, batcher, cache = _attach_calibrator(builder, config, tensor, calibration,
                                                            calibration_file)
        plan = _serialize(builder, network, config, calibrator,
                          f"{precision} engine of {model}")
        out = folder / f"{model}-{precision}{PLAN_SUFFIX}"
        out.write_bytes(plan)
        seconds = time.perf_counter() - started
        progress(f"built the TensorRT engine of {model} in {seconds:.1f} s")
        meta = _engine_meta(onnx_artifact, out, tensor, route, {
            "tensorrt": trt.__version__, "gpu": gpu, "compute_capability": capability,
            "profile": built_profile.to_json(), "requested_profile": profile.to_json()},
            sample)
        if forced is not None:
            meta["layer_recipe"] = {**layer_recipe, "fp32_layers": forced}
        if cache is not None:
            meta["calibration"] = {"hash": calibration_hash, "samples": int(len(calibration)),
                                   "batch": CALIBRATION_BATCH, "cache_file": str(cache.path),
                                   "cache_hit": cache.hit, "cache_written": cache.written,
                                   "batches_fed": batcher.served, "padded": batcher.padded}
        elif precision == "int8":
            meta["calibration"] = {"hash": calibration_hash, "qdq": onnx_artifact.meta.get("qdq")}
        return Artifact(path=out, format="tensorrt", precision=precision, key=key,
                        weights=onnx_artifact.weights,
                        source_hash=onnx_artifact.meta.get("sha256") or hash_file(
                            onnx_artifact.path),
                        times={"engine_build_s": round(seconds, 3)}, meta=meta)

    return cached_build(model, key, build)
