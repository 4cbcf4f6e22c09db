"""What ``run.py recommend`` may recommend here: every SUT this machine can run, times the
settings that change its speed (batch size, intra-op threads, the SUT's own ``--sut-option``
values from its registry entry).

The default space is kept small enough for a 15-minute budget on a 2-core machine:

* **SUTs**: every available one (``sut.registry.availability``), CPU and, where there is one,
  GPU; but the SUTs that compile the model at load (variants in ``SLOW_BUILD_VARIANTS``:
  ``torch-compile``, ``tf-xla``, ``torch-cuda-compile``) only when named one by one
  (``--suts torch-compile``): their first load takes minutes on 2 cores, a whole budget.
* **batch sizes** (``DEFAULT_BATCHES``): SingleStream issues one sample a query, so batch 1
  only (as ``run.py`` and the sweep); a MultiStream query holds 8 samples, run as 8 batches of
  1 or one of 8; Offline and Server 1, 8 and 32.
* **threads**: the framework's default (0) and the usable core count, but the core count only
  where it can differ from the default: the frameworks' defaults are one thread per physical
  core (ONNX Runtime, OpenVINO, torch) or per logical CPU (TensorFlow, LiteRT), so on a machine
  without SMT and without a CPU mask they are the same run twice.
* **SUT options**: every value of each option the SUT declares, where it can change the run
  (its registry entry's ``OptionScope``: LiteRT's invoke mode only batches above 1, its input
  quantization only on the full-integer model, OpenVINO's API and streams not in SingleStream,
  which runs inline), except values kept for comparison with older results
  (``DEFAULT_LEFT_OUT``) and values too big for this machine (``DEFAULT_FITS``: OpenVINO's
  streams up to the usable CPUs) unless ``--settings`` names them. OpenVINO's streams are
  its workers and infer requests: the plugin makes one request per stream (``ov_streams``,
  with ``auto`` the hint's choice first).

On the 2-core machine (no SMT, 20 CPU SUTs available, 2 of them compile SUTs) the default
space is 18 candidates for SingleStream, 48 for MultiStream and 74 for Offline or Server.

The order matters: the search measures each SUT's *base* candidate first (``staging``: the
scenario's ``candidates.BASE_BATCH``, else the SUT's first batch, and the first candidate of
that batch here, i.e. the first value of each option and the first thread count), and its
other settings only once the base is near the leader.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.recommend.candidates import OBJECTIVES, Candidate
from quantmark.sut.info import SutInfo

log = logging.getLogger(__name__)

#: scenario -> its default batch sizes
DEFAULT_BATCHES: dict[str, tuple[int, ...]] = {
    "SingleStream": (1,), "MultiStream": (1, 8), "Offline": (1, 8, 32), "Server": (1, 8, 32)}
#: variants that compile the model when it loads (minutes on 2 cores): only when named
SLOW_BUILD_VARIANTS = ("compile", "xla")
#: (option, value) pairs the default space leaves out: LiteRT's per-call input quantization is
#: the old timed path, kept to compare with results from before ``at-load`` existed
DEFAULT_LEFT_OUT = frozenset({("tflite_quantize", "per-call")})
#: option -> whether a value belongs in the default space on this machine (``--settings``
#: may name any): more OpenVINO streams than usable CPUs only split the cores finer
DEFAULT_FITS: dict[str, Callable[[str], bool]] = {
    "ov_streams": lambda value: value == "auto" or int(value) <= cpu_counts()[0]}
GROUPS = ("cpu", "gpu", "all")
SETTINGS_EXAMPLE = "e.g. --settings ov_api=sync,async"


def space(scenario: str, model: str, suts: Sequence[str] | str | None = None,
          batch_sizes: Sequence[int] | str | None = None,
          threads: Sequence[int] | str | None = None,
          settings: Sequence[str] | Mapping[str, Sequence[str]] | None = None
          ) -> list[Candidate]:
    """Every candidate of the search, in registry order (each framework's FP32 first), then
    batch, threads and options. ``suts`` narrows to those names (``cpu``, ``gpu``, ``all``
    for every SUT of that kind that runs here); ``batch_sizes`` and ``threads`` replace the
    defaults; ``settings`` (``KEY=V1,V2`` strings, or key -> values) replaces the values of
    those options. ``model`` is the model the space is for (a batch it cannot fill is refused
    now, not as a failed candidate later)."""
    if scenario not in OBJECTIVES:
        raise UserError(f"--scenario {scenario!r}: choose one of {', '.join(OBJECTIVES)}")
    infos = chosen_suts(suts)
    batches = chosen_batches(scenario, model, batch_sizes)
    thread_counts = chosen_threads(threads)
    options = parse_settings(settings)
    check_settings(options, infos)
    out: list[Candidate] = []
    for info in infos:
        for batch in batches:
            for variant in option_variants(info, scenario, batch, options):
                out.extend(Candidate(info.name, batch, count, variant) for count in thread_counts)
    log.debug("recommend space: %d candidates (%d SUTs x batches %s x threads %s x options)",
             len(out), len(infos), list(batches), list(thread_counts))
    return out


def _items(raw: Sequence[object] | str) -> list[str]:
    """A flag's ``a,b`` or a list, as its non-empty items."""
    parts = raw.split(",") if isinstance(raw, str) else [str(item) for item in raw]
    return [part.strip() for part in parts if part.strip()]


def chosen_suts(names: Sequence[str] | str | None) -> list[SutInfo]:
    """The SUTs of the space. None: every available SUT but the compile ones. A group
    (``cpu``, ``gpu``, ``all``) is its available SUTs, compile ones left out as by default; a
    name given alone must run here (else one line saying why)."""
    from quantmark.sut.registry import SUTS, availability, require_available
    from quantmark.sweep.plan import expand_suts

    items = _items(names) if names is not None else ["all"]
    if not items:
        raise UserError("--suts: the list is empty; name SUTs or cpu / gpu / all, "
                        "e.g. --suts ort-int8,ov-int8 or --suts cpu")
    named = {name for name in items if name not in GROUPS}
    for name in named:
        require_available(name)
    chosen = []
    for name in expand_suts(items):
        info = SUTS[name]
        if name not in named and (not availability(info)[0]
                                  or info.variant in SLOW_BUILD_VARIANTS):
            continue
        chosen.append(info)
    if not chosen:
        raise UserError(f"--suts {','.join(items)}: no SUT of it can run here; see "
                        "python run.py --list-suts")
    return chosen


def _whole_numbers(raw: Sequence[int] | str, flag: str, least: int, example: str) -> list[int]:
    """Distinct whole numbers >= ``least``, in the order given; else one line."""
    values = []
    for item in _items(raw):
        try:
            value = int(item)
        except ValueError:
            value = least - 1
        if value < least:
            raise UserError(f"{flag} {item!r}: give whole numbers of at least {least}, "
                            f"e.g. {flag} {example}")
        values.append(value)
    if not values:
        raise UserError(f"{flag}: the list is empty")
    return list(dict.fromkeys(values))


def chosen_batches(scenario: str, model: str,
                   given: Sequence[int] | str | None) -> tuple[int, ...]:
    """The batch sizes: the scenario's defaults, or those given (SingleStream: 1 only); a
    given batch a built-in model cannot fill, or memory cannot hold, is one line now."""
    if given is None:
        return DEFAULT_BATCHES[scenario]
    batches = _whole_numbers(given, "--batch-sizes", 1, "1,8,32")
    if scenario == "SingleStream" and batches != [1]:
        raise UserError(f"--batch-sizes {','.join(map(str, batches))} with SingleStream: it "
                        "issues one sample per query, so it runs batch 1 only; drop "
                        "--batch-sizes or use Offline, MultiStream or Server")
    from quantmark.models.zoo import MODELS
    from quantmark.run.checks import check_batch_fits

    if model in MODELS:
        for batch in batches:
            check_batch_fits(batch, model, None, flag="--batch-sizes")
    return tuple(batches)


def chosen_threads(given: Sequence[int] | str | None) -> tuple[int, ...]:
    """The intra-op thread counts: those given (0: the framework's default), else the
    default and the usable core count where it can differ from the default."""
    if given is not None:
        return tuple(_whole_numbers(given, "--threads", 0, "0,4"))
    usable, logical, physical = cpu_counts()
    if usable == logical == physical:
        return (0,)
    return (0, usable)


def cpu_counts(root: Path = Path("/sys/devices/system/cpu")) -> tuple[int, int, int | None]:
    """(usable CPUs of this process, logical CPUs, physical cores among the usable ones);
    physical is None where sysfs does not say."""
    usable_ids = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    logical = os.cpu_count() or len(usable_ids) or 1
    usable = len(usable_ids) or logical
    cores = set()
    for cpu in usable_ids:
        topology = root / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return usable, logical, None
    return usable, logical, len(cores) or None


def parse_settings(raw: Sequence[str] | Mapping[str, Sequence[str]] | None
                   ) -> dict[str, list[str]]:
    """``--settings KEY=V1,V2`` (repeatable; a key given twice gathers its values) or a
    mapping, as key -> its distinct values."""
    if raw is None:
        return {}
    pairs: Iterable[tuple[str, Sequence[str] | str]]
    if isinstance(raw, Mapping):
        pairs = raw.items()
    else:
        pairs = []
        for item in [raw] if isinstance(raw, str) else raw:
            key, sep, value = str(item).partition("=")
            if not sep or not key.strip() or not _items(value):
                raise UserError(f"--settings {item!r}: write KEY=VALUE or KEY=V1,V2, "
                                f"{SETTINGS_EXAMPLE}")
            pairs.append((key, value))
    found: dict[str, list[str]] = {}
    for key, values in pairs:
        found.setdefault(str(key).strip(), []).extend(_items(values))
    return {key: list(dict.fromkeys(values)) for key, values in found.items()}


def check_settings(options: Mapping[str, list[str]], infos: list[SutInfo]) -> None:
    """Every key read by a SUT of the space, every value one each SUT reading it accepts;
    else one line naming the key or value and the valid ones."""
    declared = {info.name: dict(info.options) for info in infos}
    for key, values in options.items():
        readers = {name: own[key] for name, own in declared.items() if key in own}
        if not readers:
            known = "; ".join(sorted({f"{k}={','.join(v)}" for own in declared.values()
                                      for k, v in own.items()})) or "none"
            hint = (" (batch sizes and threads have their own flags: --batch-sizes, "
                    "--threads)" if key in ("batch", "batch_size", "threads") else
                    " (layers kept in float are raced with --recover K, from run.py "
                    "diagnose's ranking)" if key == "keep_float" else "")
            raise UserError(f"--settings {key}: no SUT of the space reads it; their options: "
                            f"{known}{hint}")
        for value in values:
            refusing = sorted(name for name, accepted in readers.items()
                              if value not in accepted)
            if refusing:
                valid = readers[refusing[0]]
                raise UserError(f"--settings {key}={value}: {', '.join(refusing)} take "
                                f"{key} = {' or '.join(valid)}")


def option_variants(info: SutInfo, scenario: str, batch: int,
                    options: Mapping[str, list[str]]) -> list[tuple[tuple[str, str], ...]]:
    """Every combination of the values of the SUT's options that can change this run (as its
    registry entry scopes them: ``SutInfo.option_matters``; the values given in ``options``,
    else the registry's, less ``DEFAULT_LEFT_OUT`` and the values ``DEFAULT_FITS`` says do
    not fit this machine), sorted by key; ``[()]`` when none can."""
    keys, choices = [], []
    for key, accepted in sorted(info.options):
        if not info.option_matters(key, scenario, batch):
            continue
        fits = DEFAULT_FITS.get(key, lambda value: True)
        values = options.get(key) or [value for value in accepted
                                      if (key, value) not in DEFAULT_LEFT_OUT and fits(value)]
        keys.append(key)
        choices.append(values)
    return [tuple(zip(keys, combination, strict=True))
            for combination in itertools.product(*choices)]
