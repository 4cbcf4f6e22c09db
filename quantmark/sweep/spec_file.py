"""A sweep file (TOML or YAML): read, every key checked for its type and range, and each
refusal one line naming the file, the key and its line (tomllib gives values no lines, so they
are found in the text; YAML's nodes carry them)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.paths import require_path
from quantmark.sweep.axes import parse_size
from quantmark.sweep.lengths import PADDINGS, parse_seq_len

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# What each key of a sweep file must hold: a string stands for a list only in the flags' form,
# "a,b" (a list key); a string never stands for a number or a boolean.
_TEXT_LIST = "a string or a list of strings"
KEY_TYPES: dict[str, str] = {
    "models": _TEXT_LIST, "suts": _TEXT_LIST, "scenarios": _TEXT_LIST,
    # one ensemble is "MODEL@SUT,MODEL@SUT": its commas do not split it into a list
    "ensembles": "a string (one ensemble) or a list of strings",
    "ensemble_modes": _TEXT_LIST,
    "batch_sizes": "a whole number or a list of whole numbers", "repeats": "a whole number",
    "threads": "a whole number", "workers": "a whole number", "seconds": "a number",
    "timeout": "a number", "official": "true or false", "accuracy": "true or false",
    "output": "a string", "model_path": "a string", "dataset_path": "a string",
    # input size and dataset as dimensions (quantmark.sweep.axes): image_sizes = [64, "224x320"]
    "image_sizes": "an image size (S or \"HxW\") or a list of them",
    "datasets": "a string (\"DIR1,DIR2\") or a list of dataset folders",
    # a text model's sequence length as a dimension (quantmark.sweep.lengths): seq_lens =
    # [32, 128, 384]; its padding and tokenizer, every cell's
    "seq_lens": "a whole number of tokens or a list of them",
    "padding": "fixed or dynamic", "tokenizer": "a string",
    "num_classes": "a whole number", "labels": "a string",
    "preprocess": "a preset name, a recipe file, or a table of recipe keys",
    "calibration_list": "a string", "user_conf": "a string",
    # --sut-option as a dimension: [sut_options] ov_api = ["sync", "async"]
    "sut_options": "a table of OPTION = a value or a list of values",
    "cluster": "a string",
    # one rule is "SUT_PATTERN:REQ,REQ": its commas do not split it into a list
    "placement": "a string (one rule) or a list of strings",
}


# What each numeric key may hold: refused where the file is read (naming the file, the key
# and its line) and again in build_spec (naming the flag), never in a generic list.
LIMITS: dict[str, tuple[float, bool, str]] = {  # key -> (lowest, lowest refused, in words)
    "batch_sizes": (1, False, "whole numbers >= 1"), "repeats": (1, False, "a whole number >= 1"),
    "seconds": (0, True, "a number > 0"), "timeout": (0, True, "a number of seconds > 0"),
    "threads": (0, False, "a whole number >= 0 (0: all cores)"),
    "workers": (0, False, "a whole number >= 0 (0: the SUT's preferred number)"),
    "num_classes": (0, False, "a whole number >= 0 (0: the model's own)"),
}


def out_of_range(key: str, value: Any) -> Any:
    """The first of ``value``'s numbers ``key`` may not hold (nan and inf never), or None."""
    if key not in LIMITS:
        return None
    low, low_refused, _ = LIMITS[key]
    for number in value if isinstance(value, list) else [value]:
        if not math.isfinite(number) or number < low or (low_refused and number == low):
            return number
    return None


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_fits(key: str, value: Any) -> bool:
    """Does ``value``, as TOML or YAML read it, have the type ``key`` needs?"""
    expected = KEY_TYPES[key]
    if expected == _TEXT_LIST or key in ("ensembles", "placement", "datasets"):
        return isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value))
    if key == "batch_sizes":
        return is_whole(value) or (isinstance(value, list) and all(map(is_whole, value)))
    if key == "sut_options":
        return isinstance(value, dict) and all(map(_option_values, value.values()))
    if key in ("image_sizes", "seq_lens"):  # "64,128" as the flag gives it, or a list
        def size(item: Any) -> bool:
            return is_whole(item) or isinstance(item, str)

        return size(value) or (isinstance(value, list) and all(map(size, value)))
    if key == "preprocess":
        return isinstance(value, str | dict)
    if expected == "a whole number":
        return is_whole(value)
    if expected == "a number":
        return is_whole(value) or isinstance(value, float)
    if expected == "true or false":
        return isinstance(value, bool)
    return isinstance(value, str)


def _option_values(value: Any) -> bool:
    """An option's values as a file writes them: one or a list, each text or a number (a
    timeout's seconds), never a boolean or a table."""
    def one(item: Any) -> bool:
        return isinstance(item, str | float) or is_whole(item)

    return one(value) or (isinstance(value, list) and bool(value) and all(map(one, value)))


def _toml_key_line(text: str, key: str) -> int | None:
    """The line of top-level ``key`` (either spelling, bare or quoted, or as a [table] header)
    in TOML ``text``: tomllib gives values no line numbers. Top-level keys end at the first
    header that is not the key's own."""
    names = {key, key.replace("_", "-")}
    name = r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*"""
    assignment, header = re.compile(name + "="), re.compile(r"\s*\[\[?" + name + r"[\].]")
    for number, line in enumerate(text.splitlines(), start=1):
        found = header.match(line)
        if found:
            if next(g for g in found.groups() if g is not None) in names:
                return number
            return None
        found = assignment.match(line)
        if found and next(g for g in found.groups() if g is not None) in names:
            return number
    return None


def _yaml_key_lines(text: str) -> dict[str, int]:
    """Line of each top-level key of a YAML mapping, from yaml's own node marks."""
    import yaml

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value).replace("-", "_"): key.start_mark.line + 1 for key, _ in node.value}


def _read_sweep_data(file: Path) -> tuple[Any, str]:
    """The file parsed (TOML or YAML) and its text; a syntax error names its line."""
    text = file.read_text()
    if file.suffix == ".toml":
        return tomllib.loads(text), text
    if file.suffix not in (".yaml", ".yml"):
        raise UserError(f"sweep file {file}: name it .toml, .yaml or .yml")
    try:
        import yaml
    except ImportError:
        raise UserError("YAML sweep files need PyYAML: pip install pyyaml") from None
    try:
        return yaml.safe_load(text), text
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}" if mark is not None else str(file)
        raise UserError(f"sweep file {where} is not valid YAML ({exc.problem or exc.context}); "
                        "fix that line") from None


def load_sweep_file(path: str) -> dict[str, Any]:
    """A sweep file's settings: TOML (``.toml``) or YAML (``.yaml``/``.yml``), keys as the
    flags' names (``batch_sizes`` or ``batch-sizes``), each value of its key's real type."""
    file = Path(path)
    require_path(file, "sweep file", "pass a .toml or .yaml sweep file")
    try:
        data, text = _read_sweep_data(file)
    except tomllib.TOMLDecodeError as exc:  # "Invalid value (at line 3, column 12)"
        found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{path}:{found[1]}" if found else path
        problem = str(exc).replace(found[0], f"at column {found[2]}") if found else str(exc)
        fix = "fix that line" if found else "fix its syntax"
        raise UserError(f"sweep file {where} is not valid TOML ({problem.strip()}); {fix}"
                        .splitlines()[0]) from None
    except ValueError as exc:  # not UTF-8 text
        raise UserError(f"sweep file {path} is not valid: {exc}".splitlines()[0]) from None
    except UserError:
        raise
    except Exception as exc:  # other yaml.YAMLError, without importing yaml for TOML users
        raise UserError(f"sweep file {path} is not valid: {exc}".splitlines()[0]) from None
    if data is None and file.suffix != ".toml":
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"sweep file {path}: expected keys such as models and suts at the top")
    settings = {str(key).replace("-", "_"): value for key, value in data.items()}
    unknown = sorted(set(settings) - set(KEY_TYPES))
    if unknown:
        raise UserError(f"sweep file {path}: unknown key {unknown[0]}; known keys: "
                        f"{', '.join(sorted(KEY_TYPES))}")
    for key, value in settings.items():
        if not _type_fits(key, value):
            _raise_type_error(file, text, key, value)
        bad = out_of_range(key, value)
        if bad is not None:
            raise UserError(f"sweep file {_where(file, text, key)}: {key} = {bad!r} is out of "
                            f"range; {key} must be {LIMITS[key][2]}")
        _check_value(file, text, key, value)
    return settings


def _check_value(file: Path, text: str, key: str, value: Any) -> None:
    """A size, a length or a padding that is none: one line naming the file, key and line."""
    where = f"sweep file {_where(file, text, key)}: {key} ="
    if key in ("image_sizes", "seq_lens"):
        items = value if isinstance(value, list) else str(value).split(",")
        check = parse_size if key == "image_sizes" else parse_seq_len
        for item in (i for i in items if str(i).strip()):
            check(item, where)
    if key == "padding" and value not in PADDINGS:
        raise UserError(f"{where} {value!r}: give fixed or dynamic")


def _where(file: Path, text: str, key: str) -> str:
    """``FILE:LINE`` of a top-level key, or the file and the key where no line is found."""
    line = (_toml_key_line(text, key) if file.suffix == ".toml"
            else _yaml_key_lines(text).get(key))
    return f"{file}:{line}" if line else f"{file}, top-level key {key}"


def _raise_type_error(file: Path, text: str, key: str, value: Any) -> None:
    """One line naming the key, its line where it can be found, what it holds and needs."""
    where = _where(file, text, key)
    found = (f"{key} is a table" if isinstance(value, dict)
             else f"{key} = {value!r} is a {_type_name(value)}")
    if key == "sut_options" and isinstance(value, dict):  # one option's values are wrong
        option, bad = next((k, v) for k, v in value.items() if not _option_values(v))
        found = f"{key}.{option} = {bad!r} is a {_type_name(bad)}"
    hint = (" (write true or false without quotes)"
            if KEY_TYPES[key] == "true or false" and isinstance(value, str) else "")
    raise UserError(f"sweep file {where}: {found}; {key} must be {KEY_TYPES[key]}{hint}")


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "whole number", float: "number", str: "string",
             list: "list", dict: "table"}
    return next((name for kind, name in names.items() if isinstance(value, kind)),
                type(value).__name__)
