"""What a sweep runs: its settings (from flags or a YAML/TOML file) and the cells they expand to.

A cell is one LoadGen test: a model, a SUT, a scenario, a batch size and a repeat, or the
accuracy run of a (model, SUT). Cells are ordered so each SUT's accuracy run comes first (it
builds and caches the artifact, so no timed run pays a conversion) and a framework's FP32 SUT
runs just before its other precisions (ratios then compare runs minutes apart). Repeats go
round the whole sweep, so their spread shows the machine's drift, not one moment's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from quantmark.errors import UserError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
ACCURACY_BATCH = 8


@dataclass(frozen=True)
class Cell:
    """One LoadGen test of the sweep."""

    model: str
    sut: str
    scenario: str
    batch_size: int
    repeat: int = 1
    mode: str = "performance"  # "performance" | "accuracy"

    @property
    def id(self) -> str:
        if self.mode == "accuracy":
            return f"{self.model}/{self.sut}/accuracy"
        return f"{self.model}/{self.sut}/{self.scenario}-b{self.batch_size}-r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SweepSpec:
    """Everything that decides a sweep's cells and how they are measured."""

    models: list[str]
    suts: list[str]
    scenarios: list[str] = field(default_factory=lambda: ["Offline", "SingleStream"])
    batch_sizes: list[int] = field(default_factory=lambda: [8])
    repeats: int = 1
    output: str = "sweep"
    seconds: float = 10.0  # quick runs' minimum duration
    official: bool = False
    accuracy: bool = True
    timeout: float = 1800.0  # per cell
    threads: int = 0
    dataset_path: str | None = None
    calibration_list: str | None = None
    user_conf: str | None = None

    def measuring_settings(self) -> dict[str, Any]:
        """What must match for cells of two runs of the sweep to be compared (resume)."""
        return {"seconds": self.seconds, "official": self.official, "threads": self.threads,
                "dataset_path": _absolute(self.dataset_path),
                "calibration_list": _absolute(self.calibration_list),
                "user_conf": _absolute(self.user_conf)}


def _absolute(path: str | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else None


def cells(spec: SweepSpec) -> list[Cell]:
    """Every cell in run order. SingleStream queries hold one sample, so it runs at batch 1
    only; the other scenarios run every batch size."""
    out: list[Cell] = []
    for repeat in range(1, spec.repeats + 1):
        for model in spec.models:
            for sut in spec.suts:
                if spec.accuracy and repeat == 1:
                    batch = min(ACCURACY_BATCH, max(spec.batch_sizes))
                    out.append(Cell(model, sut, "Offline", batch, mode="accuracy"))
                for scenario in spec.scenarios:
                    batches = [1] if scenario == "SingleStream" else spec.batch_sizes
                    out.extend(Cell(model, sut, scenario, b, repeat) for b in batches)
    return out


def expand_suts(names: list[str]) -> list[str]:
    """SUT names, with ``cpu`` / ``gpu`` / ``all`` standing for every SUT of that kind, each
    framework's FP32 first. Unknown names are a one-line error listing the valid ones."""
    from sut.registry import FP32_BASELINE, SUTS, get_sut

    chosen: list[str] = []
    for name in names:
        if name in ("cpu", "gpu", "all"):
            chosen.extend(info.name for info in SUTS.values()
                          if name == "all" or info.device == name)
        else:
            chosen.append(get_sut(name).name)
    chosen = list(dict.fromkeys(chosen))
    frameworks = list(dict.fromkeys(SUTS[n].framework for n in chosen))
    return sorted(chosen, key=lambda n: (frameworks.index(SUTS[n].framework),
                                         n != FP32_BASELINE.get(SUTS[n].framework)))


def load_sweep_file(path: str) -> dict[str, Any]:
    """A sweep file's settings: TOML (``.toml``) or YAML (``.yaml``/``.yml``), keys as the
    flags' names (``batch_sizes`` or ``batch-sizes``)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"sweep file {path} does not exist")
    try:
        if file.suffix == ".toml":
            data = tomllib.loads(file.read_text())
        elif file.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(file.read_text()) or {}
        else:
            raise UserError(f"sweep file {path}: name it .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise UserError(f"sweep file {path} is not valid: {exc}".splitlines()[0]) from None
    except ImportError:
        raise UserError("YAML sweep files need PyYAML: pip install pyyaml") from None
    except Exception as exc:  # yaml.YAMLError, without importing yaml for TOML users
        raise UserError(f"sweep file {path} is not valid: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise UserError(f"sweep file {path}: expected keys such as models and suts at the top")
    known = {f.name for f in fields(SweepSpec)}
    settings = {key.replace("-", "_"): value for key, value in data.items()}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UserError(f"sweep file {path}: unknown key {unknown[0]}; known keys: "
                        f"{', '.join(sorted(known))}")
    return settings


def _as_list(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise UserError(f"{name}: give a comma-separated list, e.g. --{name} a,b")
    if not items:
        raise UserError(f"{name}: the list is empty")
    return items


def build_spec(settings: dict[str, Any]) -> SweepSpec:
    """Check and normalise settings (from a file, flags overriding) into a SweepSpec."""
    from models.zoo import MODEL_NAMES

    if "models" not in settings or "suts" not in settings:
        raise UserError("a sweep needs --models and --suts (or models and suts in the file)")
    models = _as_list(settings["models"], "models")
    for model in models:
        if model not in MODEL_NAMES:
            raise UserError(f"unknown model '{model}'; valid models: {', '.join(MODEL_NAMES)}")
    scenarios = _as_list(settings.get("scenarios", "Offline,SingleStream"), "scenarios")
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise UserError(f"unknown scenario '{scenario}'; valid: {', '.join(SCENARIOS)}")
    try:
        batch_sizes = [int(b) for b in _as_list(settings.get("batch_sizes", "8"),
                                                "batch-sizes")]
        repeats = int(settings.get("repeats", 1))
        seconds = float(settings.get("seconds", 10.0))
        timeout = float(settings.get("timeout", 1800.0))
        threads = int(settings.get("threads", 0))
    except (TypeError, ValueError) as exc:
        raise UserError(f"sweep settings: a number was expected ({exc})") from None
    if any(b < 1 for b in batch_sizes) or repeats < 1 or seconds <= 0 or timeout <= 0:
        raise UserError("batch sizes and repeats must be >= 1, seconds and timeout > 0")
    return SweepSpec(
        models=list(dict.fromkeys(models)),
        suts=expand_suts(_as_list(settings["suts"], "suts")),
        scenarios=list(dict.fromkeys(scenarios)), batch_sizes=sorted(set(batch_sizes)),
        repeats=repeats, output=str(settings.get("output") or "sweep"), seconds=seconds,
        official=bool(settings.get("official", False)),
        accuracy=bool(settings.get("accuracy", True)), timeout=timeout, threads=threads,
        dataset_path=settings.get("dataset_path"),
        calibration_list=settings.get("calibration_list"),
        user_conf=settings.get("user_conf"),
    )
