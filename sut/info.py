"""The plain data a framework folder declares: its SUTs and what the rest of quantmark needs to
know about the framework without importing it.

Each framework lives in one folder, ``sut/<framework>/``, whose ``suts`` module holds a
``FRAMEWORK`` (a ``FrameworkInfo``) and imports nothing but this module: the registry collects
those modules (``sut.registry``), so listing, looking up and checking SUT names never imports a
framework. A framework outside quantmark declares the same in its own module and names that
module in the ``quantmark.frameworks`` entry-point group.

What a SUT computes in is data of its entry, written once: the precision key its backend
dispatches on, the executed precisions its load-time check must find, and whether it calibrates.
Backends, converters and the record read these fields; none keeps a name -> precision table.
So is where a ``--sut-option`` can change the run's speed (``OptionScope``): the search of
``run.py recommend`` reads it rather than keeping a table of other frameworks' options.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

#: (--sut-option key, accepted values) pairs
Options = tuple[tuple[str, tuple[str, ...]], ...]
#: the precision keys quantmark's own backends compute in; a plugin framework may use its own
#: ("int4"): its backend is the one that reads it
PRECISION_KEYS = ("fp32", "fp16", "bf16", "int8", "int8dyn", "mixed")
#: a precision key is one lower-case word: "fp32", "int8dyn", not display text
PRECISION_KEY_PATTERN = r"[a-z][a-z0-9]*"


@dataclass(frozen=True)
class OptionScope:
    """Where a ``--sut-option`` can change a run: elsewhere each of its values is the same run
    measured again, which a search (``run.py recommend``) would pay for and learn nothing. The
    option's framework knows why; an empty field restricts nothing."""

    # the scenarios it can matter in (OpenVINO's API: not SingleStream, which predicts inline)
    scenarios: tuple[str, ...] = ()
    # the smallest batch it can matter at (LiteRT's invoke mode: at batch 1 one call either way)
    min_batch: int = 1
    # the precision keys of the SUTs it can matter for (LiteRT's input quantization: "int8")
    precision_keys: tuple[str, ...] = ()

    def reaches(self, precision_key: str, scenario: str, batch: int) -> bool:
        """Whether a run of a SUT computing in ``precision_key`` at ``scenario`` and ``batch``
        is within the scope."""
        return ((not self.scenarios or scenario in self.scenarios) and batch >= self.min_batch
                and (not self.precision_keys or precision_key in self.precision_keys))


@dataclass(frozen=True)
class SutInfo:
    """One framework x precision x device combination."""

    name: str
    framework: str
    precision: str  # what the listing says ("int8 static (QDQ, per-channel)")
    device: str  # "cpu" or "gpu"
    extra: str  # the setup.py extra that installs the framework
    requires: tuple[str, ...]  # importable module names the SUT needs
    # "module:callable" building the SUT; a module starting with "." is relative to the package
    # that declared the SUT (".backend:create"); None = not built yet
    factory: str | None
    note: str = ""
    # --sut-option KEY=VALUE the SUT reads: (key, accepted values) pairs
    options: Options = ()
    # a GPU build the SUT needs beyond importable modules: an ONNX Runtime execution provider
    # ("ort:CUDAExecutionProvider") or torch's CUDA build ("torch:cuda"): see the registry
    gpu_build: str = ""
    # the short precision word tables and figures use ("int8", "compile"); "" = the name's
    # last dash-separated part
    variant: str = ""
    # the name without its variant ("ort-cuda" of "ort-cuda-fp16"): a row of the figures
    family: str = ""
    # why the SUT can never run with this quantmark (listed, with the reason, never runnable)
    unavailable: str = ""
    # (module, the blocker text when it is missing) where the extra alone would mislead
    missing_hints: tuple[tuple[str, str], ...] = ()
    # the distributions whose versions a result records (FrameworkInfo.distributions): the
    # framework's unless the SUT declares its own (torchao's INT8); filled in by the registry
    distributions: tuple[str, ...] = ()
    # the package that declared the SUT, which a relative factory resolves against; filled in
    # by the registry
    package: str = ""
    # the precision key the backend computes in (PRECISION_KEYS: "int8" is static INT8,
    # "int8dyn" dynamic); required: the registry refuses a framework whose SUT has none
    precision_key: str = ""
    # the executed precisions, as the framework's own evidence names them, of which the
    # backend's load-time check must find at least one among the compute layers before the SUT
    # measures ("int8" for both INT8 kinds; "bf16" or "fp16" for a mixed-precision rewrite);
    # () where the framework shows no per-layer precision (ONNX Runtime's TensorRT provider);
    # not declared (None): the precision key itself
    proof: tuple[str, ...] | None = None
    # it quantizes with the shared calibration set (static INT8); not declared (None): the
    # precision key is "int8"
    needs_calibration: bool | None = None
    # (option key, OptionScope) pairs: where each option can change the run (the registry
    # refuses a scope for an option the SUT does not declare); an option not named: anywhere
    option_scopes: tuple[tuple[str, OptionScope], ...] = ()

    def __post_init__(self) -> None:
        """Derive variant and family from the name, proof and needs_calibration from the
        precision key, where they were not declared."""
        variant = self.variant or self.name.rpartition("-")[2]
        suffix = f"-{variant}"
        family = self.family or (self.name[:-len(suffix)] if self.name.endswith(suffix)
                                 else self.name)
        object.__setattr__(self, "variant", variant)
        object.__setattr__(self, "family", family)
        if self.proof is None and self.precision_key:
            object.__setattr__(self, "proof", (self.precision_key,))
        if self.needs_calibration is None and self.precision_key:
            object.__setattr__(self, "needs_calibration", self.precision_key == "int8")

    @property
    def implemented(self) -> bool:
        return self.factory is not None

    def option_matters(self, key: str, scenario: str, batch: int) -> bool:
        """Whether option ``key``'s value can change a run of this SUT at ``scenario`` and
        ``batch`` (its ``OptionScope``; an option without one always can)."""
        scope = dict(self.option_scopes).get(key)
        return scope is None or scope.reaches(self.precision_key, scenario, batch)

    def proven(self, found: Iterable[str] | Mapping[str, int]) -> bool:
        """Whether the executed precisions a backend found (names, or name -> layer count)
        include one that proves the SUT's precision; always so where nothing can prove it."""
        if isinstance(found, Mapping):
            found = [precision for precision, count in found.items() if count]
        return not self.proof or bool(set(found) & set(self.proof))


@dataclass(frozen=True)
class FrameworkInfo:
    """Everything quantmark knows about one framework, declared by its folder as plain data."""

    name: str  # the SutInfo.framework of its SUTs ("onnxruntime", "torch")
    suts: tuple[SutInfo, ...]
    # pip distributions whose versions a result records, those installed (the framework, and a
    # GPU build under its own name: onnxruntime-gpu); the first is the framework itself
    distributions: tuple[str, ...]
    fp32_baseline: str | None = None  # the CPU FP32 SUT the others are compared with
    gpu_fp32_baseline: str | None = None  # the same on the GPU
    # its variants in the order the figures show them (merged across frameworks)
    variant_order: tuple[str, ...] = ()
    # module -> pip distribution where they differ, for the "not installed" text
    pip_names: dict[str, str] = field(default_factory=dict)
    rank: int = 100  # listing position: lower first (CPU SUTs before GPU SUTs)
    # its SUTs also take a TensorFlow SavedModel directory as --model-path (checked up front)
    model_folders: bool = False
    # "module:callable" building the framework's NMS op, which a detector's postprocessing
    # suppresses with (quantmark.tasks.detection), relative to the folder's package as a
    # factory is (".nms:create"); None: quantmark's shared numpy NMS, for ``no_nms``'s reason
    nms: str | None = None
    # why a framework without ``nms`` has none ("torch has no NMS op without torchvision")
    no_nms: str = ""
