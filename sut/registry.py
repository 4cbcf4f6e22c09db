"""Every SUT name quantmark knows, and whether this machine can run it.

The registry collects what each framework folder declares as plain data: every sub-package of
``quantmark.sut`` with a ``suts`` module (``sut/onnxruntime/suts.py`` ...), found with pkgutil,
and every module named in the ``quantmark.frameworks`` entry-point group by an installed
distribution (a framework living outside quantmark). Only those data modules are imported, never
a framework: ``availability`` checks installed packages with ``importlib.util.find_spec`` and
package metadata, the GPU with the driver's device files, and a GPU build of a framework by the
files it ships (ONNX Runtime's CUDA/TensorRT provider libraries, torch's CUDA library), so
``--list-suts`` is fast, works with no framework installed at all, and names every blocker with
its fix. ``load_factory`` imports the framework, when a run builds its SUT.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import pkgutil
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.fingerprint import gpu_present
from quantmark.ground.fingerprint import package_version as _dist_version
from quantmark.sut.info import PRECISION_KEY_PATTERN, PRECISION_KEYS, FrameworkInfo, SutInfo

__all__ = ["ENTRY_POINT_GROUP", "FP32_BASELINE", "FRAMEWORKS", "GPU_FP32_BASELINE",
           "KEEP_FLOAT_OPTION", "SUTS", "FrameworkInfo", "SutInfo", "availability",
           "check_options", "factory_module", "find_sut", "fp32_baseline", "get_sut",
           "keep_float_layers", "load_factory", "load_nms", "module_sut", "needs_calibration",
           "no_nms_reason",
           "require_available", "takes_keep_float", "variant_order"]

log = logging.getLogger(__name__)

#: the entry-point group through which a distribution adds a framework: each entry point names
#: a plain-data module declaring ``FRAMEWORK`` (or "module:attribute" naming the FrameworkInfo)
ENTRY_POINT_GROUP = "quantmark.frameworks"
DATA_MODULE = "suts"  # sut/<framework>/suts.py


def builtin_data_modules() -> list[str]:
    """``quantmark.sut.<folder>.suts`` of every framework folder, in folder order. Finding a
    ``suts`` module imports only its (empty) package ``__init__``."""
    package = importlib.import_module(__package__)
    names = []
    for found in pkgutil.iter_modules(package.__path__, f"{__package__}."):
        module = f"{found.name}.{DATA_MODULE}"
        if found.ispkg and importlib.util.find_spec(module) is not None:
            names.append(module)
    return names


def plugin_data_modules() -> list[importlib.metadata.EntryPoint]:
    """The ``quantmark.frameworks`` entry points of the installed distributions."""
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
                  key=lambda point: point.name)


def _load(module_name: str, attribute: str) -> tuple[FrameworkInfo, str]:
    """The FrameworkInfo a data module declares, and the package its relative factories
    resolve against."""
    module = importlib.import_module(module_name)
    framework = getattr(module, attribute, None)
    if not isinstance(framework, FrameworkInfo):
        raise TypeError(f"{module_name}.{attribute} is not a quantmark.sut.info.FrameworkInfo")
    for info in framework.suts:
        _check_declared(info, f"{module_name}.{attribute}")
    return framework, module.__package__ or ""


def _check_declared(info: Any, where: str) -> None:
    """A SUT must say what it computes in: its precision key is data every backend, converter
    and record reads, and there is no default that could be right for it."""
    if not isinstance(info, SutInfo):
        raise TypeError(f"{where}: {info!r} is not a quantmark.sut.info.SutInfo")
    if not re.fullmatch(PRECISION_KEY_PATTERN, info.precision_key):
        got = f"{info.precision_key!r}, not a key" if info.precision_key else "none"
        raise TypeError(f"{where}: SUT {info.name!r} declares precision_key={got}: declare "
                        f"the one lower-case key its backend computes in "
                        f"(SutInfo(..., precision_key=...): {', '.join(PRECISION_KEYS)}, or "
                        f"the framework's own)")
    if not isinstance(info.needs_calibration, bool) or not isinstance(info.proof, tuple):
        raise TypeError(f"{where}: SUT {info.name!r}: needs_calibration must be a bool and "
                        "proof a tuple of executed precisions")
    unknown = sorted({key for key, _ in info.option_scopes} - {key for key, _ in info.options})
    if unknown:
        raise TypeError(f"{where}: SUT {info.name!r} scopes {', '.join(unknown)}, which it does "
                        "not declare in its options; declare the option or drop its scope")


def _declared() -> list[tuple[FrameworkInfo, str]]:
    """Every framework: the built-in folders (their errors are bugs, raised), then the plugins
    (a broken one is logged and skipped, so the others still list and run)."""
    frameworks = [_load(name, "FRAMEWORK") for name in builtin_data_modules()]
    for point in plugin_data_modules():
        try:
            frameworks.append(_load(point.module, point.attr or "FRAMEWORK"))
        except Exception as exc:  # noqa: BLE001 - a third party's module: any failure
            log.warning("framework plugin %r (%s) not loaded: %s", point.name, point.value, exc)
    return frameworks


def collect() -> tuple[dict[str, FrameworkInfo], dict[str, SutInfo]]:
    """(framework name -> FrameworkInfo, SUT name -> SutInfo): CPU SUTs before GPU SUTs, each
    in its framework's rank order, then as declared. A name declared twice keeps its first
    declaration (built-in before plugins) and logs the second."""
    frameworks: dict[str, FrameworkInfo] = {}
    suts: dict[str, SutInfo] = {}
    position: dict[str, tuple[bool, int, int]] = {}
    for framework, package in _declared():
        if framework.name in frameworks:
            log.warning("framework %r declared twice; keeping the first", framework.name)
            continue
        frameworks[framework.name] = framework
        for info in framework.suts:
            if info.name in suts:
                log.warning("SUT %r declared twice; keeping %s's", info.name,
                            suts[info.name].framework)
                continue
            suts[info.name] = replace(info, package=package, distributions=(
                info.distributions or framework.distributions))
            position[info.name] = (info.device != "cpu", framework.rank, len(position))
    ranked = sorted(frameworks.values(), key=lambda framework: framework.rank)
    return ({framework.name: framework for framework in ranked},
            {name: suts[name] for name in sorted(suts, key=position.__getitem__)})


FRAMEWORKS, SUTS = collect()
# Each framework's FP32 SUT: the baseline its other precisions are compared with.
FP32_BASELINE: dict[str, str] = {f.name: f.fp32_baseline for f in FRAMEWORKS.values()
                                 if f.fp32_baseline}
# The same on the GPU: a GPU SUT is compared with its framework's FP32 on the GPU.
GPU_FP32_BASELINE: dict[str, str] = {f.name: f.gpu_fp32_baseline for f in FRAMEWORKS.values()
                                     if f.gpu_fp32_baseline}
# the pip name of a module whose distribution is called otherwise, for the blocker's text
_PIP_NAMES: dict[str, str] = {module: dist for f in FRAMEWORKS.values()
                              for module, dist in f.pip_names.items()}


def fp32_baseline(name: str) -> str | None:
    """The FP32 SUT of the same framework on the same device as ``name`` (None if there is
    none): ort-cuda-fp16 -> ort-cuda-fp32, ort-int8 -> ort-fp32."""
    info = get_sut(name)
    table = GPU_FP32_BASELINE if info.device == "gpu" else FP32_BASELINE
    return table.get(info.framework)


def get_sut(name: str) -> SutInfo:
    """Look a SUT up by name; unknown names get the list of valid ones."""
    try:
        return SUTS[name]
    except KeyError:
        raise UserError(f"unknown SUT '{name}'; valid SUTs: {', '.join(SUTS)}") from None


def needs_calibration(name: str) -> bool:
    """Whether the SUT ``name`` quantizes with the shared calibration set (its entry says so;
    what a result records about calibration follows from it)."""
    return bool(get_sut(name).needs_calibration)


def factory_module(info: SutInfo) -> str:
    """The absolute module of the SUT's factory ("quantmark.sut.pytorch.cuda"); "" if none."""
    if info.factory is None:
        return ""
    module = info.factory.partition(":")[0]
    return importlib.util.resolve_name(module, info.package or __package__)


def module_sut(name: str, module: str) -> SutInfo:
    """The entry of ``name`` when ``module``'s factory builds it: a backend module asked for
    another module's SUT answers with one line naming the SUTs it builds."""
    info = SUTS.get(name)
    if info is None or factory_module(info) != module:
        own = [other.name for other in SUTS.values() if factory_module(other) == module]
        raise UserError(f"{module} has no SUT {name!r}; it runs {', '.join(own)}")
    return info


def find_sut(framework: str, precision_key: str, device: str = "cpu") -> SutInfo:
    """The one SUT of ``framework`` on ``device`` computing in ``precision_key`` (a backend
    built from a precision, a converter naming the SUT that fits a user's file)."""
    found = [info for info in SUTS.values() if info.framework == framework
             and info.device == device and info.precision_key == precision_key]
    if len(found) != 1:
        keys = sorted({info.precision_key for info in SUTS.values()
                       if info.framework == framework and info.device == device})
        what = "no" if not found else "more than one"
        raise UserError(f"{framework} has {what} {device} SUT computing in {precision_key!r} "
                        f"(its precision keys: {', '.join(keys) or 'none'})")
    return found[0]


def variant_order() -> tuple[str, ...]:
    """Every framework's variants in one order the figures' shared axis can use: each
    framework's own order is kept (fp32 before fp16 before int8 ...), and variants free to go
    either way come in framework rank order. Two frameworks ordering a pair both ways (a cycle)
    are resolved by taking the variant seen first."""
    orders = [framework.variant_order for framework in FRAMEWORKS.values()]
    seen = list(dict.fromkeys(v for order in orders for v in order))
    before: dict[str, set[str]] = {v: set() for v in seen}
    for order in orders:
        for index, later in enumerate(order):
            before[later].update(order[:index])
    merged: list[str] = []
    while len(merged) < len(seen):
        ready = [v for v in seen if v not in merged and before[v] <= set(merged)]
        merged.append(ready[0] if ready else next(v for v in seen if v not in merged))
    return tuple(merged)


def _missing_modules(modules: tuple[str, ...]) -> list[str]:
    return [module for module in modules if importlib.util.find_spec(module) is None]


def _package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _ships(module: str, subdir: str, stem: str) -> bool:
    """The installed package ``module`` has a shared library named like ``stem`` in ``subdir``
    (``libonnxruntime_providers_cuda.so``, ``torch_cuda.dll`` ...)."""
    folder = _package_dir(module)
    return folder is not None and any((folder / subdir).glob(f"*{stem}.*"))


# ONNX Runtime's execution providers -> the provider library its GPU wheels ship in capi/
_ORT_PROVIDER_LIBS = {"CUDAExecutionProvider": "onnxruntime_providers_cuda",
                      "TensorrtExecutionProvider": "onnxruntime_providers_tensorrt"}


def _ort_provider_blocker(provider: str, extra: str) -> str | None:
    """Why the installed onnxruntime cannot offer ``provider`` (None if it can). The CPU
    wheel ("onnxruntime") has no GPU provider library; onnxruntime-gpu ships both. Read from
    the files, not by importing onnxruntime, so the listing stays import-free."""
    if _ships("onnxruntime", "capi", _ORT_PROVIDER_LIBS[provider]):
        return None
    fix = f"pip uninstall -y onnxruntime && pip install 'quantmark[{extra}]'"
    if _dist_version("onnxruntime-gpu") is None:
        cpu = _dist_version("onnxruntime")
        here = f" (onnxruntime {cpu} here is the CPU build, without {provider})" if cpu else ""
        return f"onnxruntime-gpu not installed{here}: {fix}"
    return (f"the installed onnxruntime files have no {provider} (the CPU onnxruntime "
            f"overwrote onnxruntime-gpu's): {fix}")


def _torch_cuda_blocker() -> str | None:
    """Why the installed torch cannot run CUDA (None if it is a CUDA build)."""
    if _ships("torch", "lib", "torch_cuda"):
        return None
    version = _dist_version("torch") or "here"
    return (f"torch {version} is a CPU-only build: install a CUDA build of torch "
            "(see https://pytorch.org/get-started/locally/)")


def _gpu_build_blocker(info: SutInfo) -> str | None:
    kind, _, what = info.gpu_build.partition(":")
    if kind == "ort":
        return _ort_provider_blocker(what, info.extra)
    if kind == "torch":
        return _torch_cuda_blocker()
    return None


def availability(info: SutInfo) -> tuple[bool, str]:
    """(can run here, why not): every blocker, each naming its fix where there is one."""
    if info.unavailable:
        return False, info.unavailable
    blockers: list[str] = []
    if not info.implemented:
        blockers.append("not built yet in this quantmark version")
    if info.device == "gpu" and not gpu_present():
        blockers.append("needs an NVIDIA GPU (none found)")
    missing = _missing_modules(info.requires)
    for module, hint in info.missing_hints:  # torchao: the one INT8 path of torch on a GPU
        if module in missing:
            blockers.append(hint)
            missing.remove(module)
    # the framework is there but is its CPU build: the blocker names the fix (same extra)
    kind = info.gpu_build.partition(":")[0]
    module = "onnxruntime" if kind == "ort" else kind
    build = _gpu_build_blocker(info) if kind and module not in missing else None
    if missing:
        fix = "" if build else f": pip install 'quantmark[{info.extra}]'"
        names = [_PIP_NAMES.get(module, module) for module in missing]
        blockers.append(f"{', '.join(names)} not installed{fix}")
    if build:
        blockers.append(build)
    return (not blockers), "; ".join(blockers)


def require_available(name: str) -> SutInfo:
    """The SutInfo for ``name`` if it can run here, else a one-line UserError saying why."""
    info = get_sut(name)
    ok, reason = availability(info)
    if not ok:
        raise UserError(f"SUT '{name}' cannot run here: {reason}")
    return info


#: ``--sut-option keep_float=LAYER[,LAYER...]``: a mixed-precision point, the SUT's INT8 model
#: re-quantized with those layers kept in float by its framework's own exclusion (the
#: ``rebuild`` of ``run.py diagnose --recover``); any SUT ``takes_keep_float`` reads it
KEEP_FLOAT_OPTION = "keep_float"


def takes_keep_float(info: SutInfo) -> bool:
    """Whether ``info`` can run a mixed-precision point: a static INT8 SUT built by its
    framework folder's ``backend`` module, whose folder has a ``diagnose`` module (each one's
    ``rebuild`` re-quantizes those SUTs only: ort-trt-int8, built by ``gpu``, it refuses).
    Found from the entry and the folder's files, without importing the framework."""
    if info.precision_key != "int8" or not info.needs_calibration or info.factory is None:
        return False
    folder = info.package or __package__
    return (factory_module(info) == f"{folder}.backend"
            and importlib.util.find_spec(f"{folder}.diagnose") is not None)


def keep_float_layers(options: dict[str, str]) -> tuple[str, ...]:
    """The layers ``keep_float`` names (comma-separated, in order, each once); () without it.
    An empty list is one line: the option says which layers, as ``run.py diagnose`` names
    them."""
    if KEEP_FLOAT_OPTION not in options:
        return ()
    layers = tuple(dict.fromkeys(name.strip() for name in str(options[KEEP_FLOAT_OPTION])
                                 .split(",") if name.strip()))
    if not layers:
        raise UserError(f"--sut-option {KEEP_FLOAT_OPTION}= names no layer: give the layers "
                        f"to keep in float, e.g. {KEEP_FLOAT_OPTION}=LAYER1,LAYER2 (names as "
                        "run.py diagnose lists them)")
    return layers


def check_options(info: SutInfo, options: dict[str, str]) -> None:
    """Every --sut-option must be one this SUT reads, with a value it accepts; ``keep_float``
    one the SUT takes (``takes_keep_float``), naming layers (the build checks the names)."""
    accepted = dict(info.options)
    for key, value in options.items():
        if key == KEEP_FLOAT_OPTION:
            if not takes_keep_float(info):
                takers = [other.name for other in SUTS.values() if takes_keep_float(other)]
                raise UserError(f"--sut-option {key}={value}: {info.name} cannot keep layers "
                                f"in float; the SUTs that can: {', '.join(takers) or 'none'}")
            keep_float_layers(options)
            continue
        if key not in accepted:
            known = ", ".join(accepted) or "none"
            raise UserError(f"--sut-option {key}={value}: {info.name} has no option {key!r} "
                            f"(its options: {known})")
        if value not in accepted[key]:
            raise UserError(f"--sut-option {key}={value}: choose one of "
                            f"{', '.join(accepted[key])}")


def load_factory(info: SutInfo) -> Callable[..., Any]:
    """Import the SUT's module (only now does the framework get imported). A relative module
    (".backend:create") resolves against the package that declared the SUT: the framework's
    folder for a built-in one, the plugin's own package for one from an entry point."""
    if info.factory is None:
        raise UserError(f"SUT '{info.name}' is not built yet in this quantmark version")
    return _resolve(info.factory, info)


def _resolve(target: str, info: SutInfo) -> Callable[..., Any]:
    """The callable ``target`` ("module:callable") names, a relative module resolved against
    the package that declared ``info``."""
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name, package=info.package or __package__)
    return getattr(module, attribute)


def load_nms(info: SutInfo) -> Callable[[], Any] | None:
    """What builds the NMS op of the SUT's framework (``FrameworkInfo.nms``, resolved against
    the package that declared the SUT, as ``load_factory``; importing it imports the
    framework), or None where the framework declares none."""
    framework = FRAMEWORKS.get(info.framework)
    if framework is None or framework.nms is None:
        return None
    return _resolve(framework.nms, info)


def no_nms_reason(info: SutInfo) -> str:
    """Why the SUT's framework has no NMS op (its ``no_nms``, or that it declares none)."""
    framework = FRAMEWORKS.get(info.framework)
    if framework is not None and framework.nms is not None:
        return ""
    return (framework.no_nms if framework is not None and framework.no_nms
            else f"{info.framework} declares no NMS op to quantmark")
