"""SUT options as a sweep dimension: ``--sut-option ov_api=sync,async`` (or a sweep file's
``[sut_options]``) runs each cell of a SUT that reads ``ov_api`` once per value.

An option applies to the SUTs whose registry entry declares its key (an ensemble's cell: its
members', and the ensemble's own member timeout). Each combination of values is a variant of the
cell, with its own id and folder, so two variants never share a run folder, a manifest entry or
a figure. A key no SUT of the sweep reads, or a value a SUT refuses, is one line before any cell
runs, as a single run's ``--sut-option`` is.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from quantmark.ground.errors import UserError

#: a cell's options: (key, value) pairs sorted by key (hashable, so a Cell stays frozen)
Options = tuple[tuple[str, str], ...]
EXAMPLE = "e.g. ov_api=sync,async"
#: the longest option value a folder name holds as written
PART_CHARS = 40


def as_options(pairs: Mapping[str, str] | Iterable[Iterable[str]] | None) -> Options:
    """A cell's options from a dict (a manifest entry, a task's argument) or pairs."""
    items = pairs.items() if isinstance(pairs, Mapping) else (pairs or ())
    return tuple(sorted((str(key), str(value)) for key, value in items))


def folder_suffix(options: Options) -> str:
    """What a variant adds to its SUT in the cell's id and folder: ``+ov_api=async``; a
    value that cannot be part of one folder name (``keep_float``'s layer names: OpenVINO's
    hold "/", eight of them run long) is its short hash."""
    return "".join(f"+{key}={_folder_part(value)}" for key, value in options)


def _folder_part(value: str) -> str:
    if "/" in value or "\\" in value or value.startswith(".") or len(value) > PART_CHARS:
        return "h" + hashlib.sha256(value.encode()).hexdigest()[:12]
    return value


def parse_flags(items: list[str]) -> dict[str, list[str]]:
    """``--sut-option KEY=V1,V2`` strings (repeatable: a key given twice gathers its values)."""
    found: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        values = _values(key.strip(), value)
        if not sep or not key.strip() or not values:
            raise UserError(f"--sut-option {item!r}: write KEY=VALUE or KEY=V1,V2, {EXAMPLE}")
        found.setdefault(key.strip(), []).extend(values)
    return {key: list(dict.fromkeys(values)) for key, values in found.items()}


def _values(key: str, text: str) -> list[str]:
    """The values one flag or table item gives: "V1,V2" is two, except for ``keep_float``,
    where "L1,L2" is one point (two layers kept in float together, as ``run.py`` reads it):
    more points are more flags or list items."""
    from quantmark.sut.registry import KEEP_FLOAT_OPTION

    parts = [part.strip() for part in text.split(",") if part.strip()]
    if key == KEEP_FLOAT_OPTION:
        return [",".join(parts)] if parts else []
    return parts


def from_table(table: Any) -> dict[str, list[str]]:
    """A sweep file's ``sut_options`` table (each key a value, "V1,V2" or a list), as key ->
    its distinct values."""
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise UserError("sut_options: give a table of OPTION = VALUE or [VALUES], e.g. "
                        "sut_options = {ov_api = [\"sync\", \"async\"]}")
    found: dict[str, list[str]] = {}
    for key, raw in table.items():
        values = [v for item in (raw if isinstance(raw, list) else [raw])
                  for v in _values(str(key), str(item))]
        if not values:
            raise UserError(f"sut_options {key}: give a value or a list of values, {EXAMPLE}")
        found[str(key)] = list(dict.fromkeys(values))
    return found


def from_settings(settings: Mapping[str, Any]) -> dict[str, list[str]]:
    """The sweep's options: the file's ``sut_options`` table, each key the flags give
    (``sut_option``: the verb's ``--sut-option`` strings) replacing the file's."""
    return {**from_table(settings.get("sut_options")),
            **parse_flags(list(settings.get("sut_option") or []))}


def check(options: Mapping[str, list[str]], suts: list[str], ensembles: bool) -> None:
    """Every key read by some SUT of the sweep (``suts``: the SUTs and the ensembles' members),
    every value accepted by each SUT that reads it; else one line naming the key, the SUTs
    and the values they take."""
    from quantmark.sut.ensemble.members import MEMBER_TIMEOUT_OPTION
    from quantmark.sut.registry import KEEP_FLOAT_OPTION, SUTS, takes_keep_float

    declared = {name: dict(SUTS[name].options) for name in suts}
    for key, values in options.items():
        if key == MEMBER_TIMEOUT_OPTION and ensembles:
            _check_seconds(key, values)
            continue
        if key == KEEP_FLOAT_OPTION:  # layer names: any value, for the SUTs that take it
            if not any(takes_keep_float(SUTS[name]) for name in suts):
                raise UserError(f"sut option {key}: no SUT of the sweep ({', '.join(suts)}) "
                                "can keep layers in float")
            continue
        readers = {name: own[key] for name, own in declared.items() if key in own}
        if not readers:
            known = "; ".join(sorted({f"{k} ({', '.join(v)})" for own in declared.values()
                                      for k, v in own.items()})) or "none"
            raise UserError(f"sut option {key}: no SUT of the sweep ({', '.join(suts)}) reads "
                            f"it; their options: {known}{_misplaced(key)}")
        for value in values:
            refusing = [name for name, accepted in readers.items() if value not in accepted]
            if refusing:
                raise UserError(f"sut option {key}={value}: {', '.join(refusing)} "
                                f"take{'' if len(refusing) > 1 else 's'} {key} = "
                                f"{' or '.join(readers[refusing[0]])}")


def _misplaced(key: str) -> str:
    """A sweep setting read as an option: in TOML every key after ``[sut_options]`` is the
    table's."""
    from quantmark.sweep.spec_file import KEY_TYPES

    if key not in KEY_TYPES:
        return ""
    return f" ({key} is a sweep setting: in a TOML file put [sut_options] after the other keys)"


def _check_seconds(key: str, values: list[str]) -> None:
    for value in values:
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            raise UserError(f"sut option {key}={value}: give seconds > 0")


def variants(options: Mapping[str, list[str]], readers: list[str],
             ensemble: bool = False) -> list[Options]:
    """Every combination of the values of the options ``readers`` read (one SUT, or an
    ensemble's members; ``ensemble``: the ensemble's own option too); ``[()]`` when they read
    none of them: the cell runs once, as without options."""
    from quantmark.sut.ensemble.members import MEMBER_TIMEOUT_OPTION
    from quantmark.sut.registry import KEEP_FLOAT_OPTION, SUTS, takes_keep_float

    declared = {key for name in readers for key, _ in SUTS[name].options}
    if ensemble:
        declared.add(MEMBER_TIMEOUT_OPTION)
    elif any(takes_keep_float(SUTS[name]) for name in readers):
        declared.add(KEEP_FLOAT_OPTION)
    keys = sorted(key for key in options if key in declared)
    return [tuple(zip(keys, combination, strict=True))
            for combination in itertools.product(*(options[key] for key in keys))]
