"""user.conf parsing and validation.

LoadGen reads ``model.scenario.key = value`` lines and silently ignores keys and model names it
does not know, so a typo (``Offline.target_qsp``) quietly runs with defaults. We parse the file
ourselves first and reject anything LoadGen would ignore, naming the line. LoadGen also takes
values it cannot use (a negative count wraps to a huge unsigned one, a target_qps of 0 is a
rate of nothing), and it reads any bytes as text: those are refused here too.

Lines are split the way LoadGen 6.0 splits them (tested against it): words between blanks; a
word that is exactly ``#`` ends the line before the value, but after the value it is one more
value, which LoadGen refuses (status -22). So ``key = 60 # note`` is refused here, naming the
line, and so is ``key=60`` (one word: LoadGen ignores it). A UTF-8 byte-order mark is skipped
here, and LoadGen is given a copy without it (``loadgen_copy``): it would read the mark as part
of the first key and ignore that line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from quantmark.ground.errors import UserError
from quantmark.ground.paths import require_path

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark, as Windows editors write it
_BLANKS = re.compile(r"[ \t\n\v\f\r]+")  # what C++'s ``iss >> word`` splits on

# Keys LoadGen 6.0's TestSettings::FromConfig looks up (with the scenario each one applies to;
# None = every scenario).
KEYS: dict[str, tuple[str, ...] | None] = {
    "mode": None,
    "min_duration": None,
    "max_duration": None,
    "min_query_count": None,
    "max_query_count": None,
    "qsl_rng_seed": None,
    "sample_index_rng_seed": None,
    "schedule_rng_seed": None,
    "accuracy_log_rng_seed": None,
    "accuracy_log_probability": None,
    "accuracy_log_sampling_target": None,
    "print_timestamps": None,
    "performance_issue_unique": None,
    "performance_issue_same": None,
    "performance_issue_same_index": None,
    "performance_sample_count_override": None,
    "sample_concatenate_permutation": None,
    "test05": None,
    "test05_qsl_rng_seed": None,
    "test05_sample_index_rng_seed": None,
    "test05_schedule_rng_seed": None,
    "use_token_latencies": None,
    "ttft_latency": None,
    "tpot_latency": None,
    "infer_token_latencies": None,
    "token_latency_scaling_factor": None,
    "target_latency_percentile": ("SingleStream", "MultiStream", "Server"),
    "target_latency": ("SingleStream", "MultiStream", "Server"),
    "target_qps": ("MultiStream", "Server", "Offline"),
    "samples_per_query": ("MultiStream",),
    "max_async_queries": ("MultiStream", "Server"),
    "coalesce_queries": ("Server",),
    "server_num_issue_query_threads": ("Server",),
}




class Range(NamedTuple):
    """The values LoadGen can use for a key."""

    low: float
    high: float = math.inf
    whole: bool = True  # a count, a seed, a flag: LoadGen reads an unsigned integer
    low_open: bool = False  # the low end itself is refused (a rate or a latency of 0)
    text: str = "a whole number >= 0"

    def allows(self, value: float) -> bool:
        """Within the range, and whole where LoadGen reads an integer (nan and inf never)."""
        if not math.isfinite(value) or (self.whole and not value.is_integer()):
            return False
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high


_COUNT = Range(0)
_FLAG = Range(0, 1, text="0 or 1")
_POSITIVE = Range(0, whole=False, low_open=True, text="a number > 0")
# Every key of KEYS, with the values it may take.
RANGES: dict[str, Range] = {
    "min_duration": Range(1, text="a whole number of ms >= 1"),  # 0 ms measures nothing
    **{key: _COUNT for key in (  # max_duration 0: no limit, LoadGen's default
        "max_duration", "min_query_count", "max_query_count", "qsl_rng_seed",
        "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed",
        "accuracy_log_sampling_target", "performance_issue_same_index",
        "performance_sample_count_override", "test05_qsl_rng_seed",
        "test05_sample_index_rng_seed", "test05_schedule_rng_seed",
        "server_num_issue_query_threads")},
    **{key: _FLAG for key in (
        "print_timestamps", "performance_issue_unique", "performance_issue_same",
        "sample_concatenate_permutation", "test05", "use_token_latencies",
        "infer_token_latencies", "coalesce_queries")},
    **{key: _POSITIVE for key in (
        "target_qps", "target_latency", "ttft_latency", "tpot_latency",
        "token_latency_scaling_factor")},
    "samples_per_query": Range(1, text="a whole number >= 1"),
    "max_async_queries": _COUNT,  # 0: no limit
    "mode": Range(0, 3, text="0, 1, 2 or 3 (LoadGen's TestMode)"),
    "accuracy_log_probability": Range(0, 1, whole=False, text="a probability from 0 to 1"),
    "target_latency_percentile": Range(0, 100, whole=False, low_open=True,
                                       text="a percentile above 0, up to 100"),
}


@dataclass(frozen=True)
class ConfLine:
    """One ``model.scenario.key = value`` line."""

    model: str
    scenario: str
    key: str
    value: float
    line: int
    text: str


def read_conf_text(file: Path) -> str:
    """The file as text: a binary file (NUL bytes, not UTF-8) is refused, not parsed."""
    require_path(file, "--user-conf", "pass a user.conf text file or omit --user-conf")
    data = file.read_bytes()
    if b"\0" in data:
        line = data[:data.index(b"\0")].count(b"\n") + 1
        raise UserError(f"user.conf {file}:{line} holds a NUL byte: it is a binary file, not a "
                        "user.conf; pass the text file of 'model.scenario.key = value' lines")
    try:
        return data.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"user.conf {file}:{line} is not UTF-8 text (byte "
                        f"0x{data[exc.start]:02x}); pass the text file of "
                        "'model.scenario.key = value' lines") from None


def loadgen_copy(path: str | Path, folder: Path) -> str:
    """The file LoadGen should read: ``path`` itself, or a copy in ``folder`` without the
    byte-order mark that would make LoadGen ignore the first line."""
    data = Path(path).read_bytes()
    if not data.startswith(BOM):
        return str(path)
    copy = folder / "user.conf"
    copy.write_bytes(data.removeprefix(BOM))
    return str(copy)


def _parse_value(where: str, key: str, value_text: str) -> float:
    """The number on a line, within the range LoadGen can use for ``key``."""
    if value_text.isdigit() and len(value_text) > 1 and value_text.startswith("0"):
        raise UserError(f"{where}: {key} = {value_text}: LoadGen may read a leading 0 as "
                        f"octal; write {value_text.lstrip('0') or '0'}")
    value = _number(value_text)
    if value is None:
        raise UserError(f"{where}: value '{value_text}' is not a number")
    allowed = RANGES[key]
    if not allowed.allows(value):
        raise UserError(f"{where}: {key} = {value_text} is out of range (LoadGen would clamp "
                        f"or misread it); use {allowed.text}")
    if allowed.whole and not value_text.lstrip("+").isdigit():  # 1e3, 10.0
        raise UserError(f"{where}: {key} = {value_text}: LoadGen reads this key digit by digit "
                        f"and stops at the first other character; write {int(value)}")
    return value


def _number(text: str) -> float | None:
    """``text`` as a number, or None; 1_000 is refused as LoadGen refuses it (Python's float
    takes it)."""
    try:
        if "_" in text:
            return None
        return float(int(text, 0)) if text.isdigit() else float(text)
    except ValueError:
        return None


def _check_names(where: str, model: str, scenario: str, key: str,
                 known_models: tuple[str, ...]) -> None:
    """Names LoadGen would ignore silently are refused."""
    if model != "*" and model not in known_models:
        raise UserError(
            f"{where}: unknown model '{model}' (LoadGen would ignore it); "
            f"use one of {', '.join(known_models)} or *"
        )
    if scenario != "*" and scenario not in SCENARIOS:
        raise UserError(
            f"{where}: unknown scenario '{scenario}'; use one of {', '.join(SCENARIOS)} or *"
        )
    if key not in KEYS:
        raise UserError(
            f"{where}: unknown key '{key}' (LoadGen would ignore it silently); "
            f"valid keys: {', '.join(sorted(KEYS))}"
        )
    applies = KEYS[key]
    if applies is not None and scenario != "*" and scenario not in applies:
        raise UserError(f"{where}: key '{key}' has no effect in {scenario}; "
                        f"it applies to {', '.join(applies)}")


def _split_line(where: str, raw: str) -> tuple[str, str] | None:
    """``(key, value)`` of a line as LoadGen reads it; None for a blank line or a comment.

    Anything LoadGen would ignore silently or refuse with a bare status is a UserError here.
    """
    words = [word for word in _BLANKS.split(raw) if word]
    if not words or words[0] == "#":
        return None
    line = raw.strip()
    if words[0].startswith("#"):  # LoadGen reads "#text" as a key: harmless alone
        if len(words) == 1 or words[1] == "#" or (
                words[1] == "=" and len(words) > 2
                and all(_number(word) is not None for word in words[2:])):
            return None  # LoadGen ignores it: a comment in effect
        raise UserError(f"{where}: '{words[0]} {words[1]} ...' is not a comment to LoadGen, "
                        "which reads '#' as one only when a blank follows it (it refuses the "
                        "line); write '# ' at the start")
    if len(words) == 1 or words[1] == "#" or (words[1] != "=" and "=" not in line):
        raise UserError(f"{where}: expected 'model.scenario.key = value', got '{line}'")
    if words[1] != "=":
        raise UserError(f"{where}: write blanks around '=' ('{line}'): LoadGen reads "
                        "'key = value' as three words and ignores or refuses anything else")
    if len(words) == 2:
        raise UserError(f"{where}: no value after '=' ('{line}'), which LoadGen ignores; "
                        "give a number")
    if len(words) > 3 or "#" in words[2]:
        if "#" in "".join(words[2:]):
            raise UserError(f"{where}: a comment after the value ('{line}'): LoadGen reads "
                            "no comment there and refuses the line (status -22); put the "
                            "comment on a line of its own")
        raise UserError(f"{where}: more than one value ('{line}'); give one number")
    return words[0], words[2]


def parse_user_conf(path: str | Path, known_models: tuple[str, ...]) -> list[ConfLine]:
    """Parse and validate a user.conf; raise a one-line UserError naming the bad line."""
    file = Path(path)
    entries: list[ConfLine] = []
    for number, raw in enumerate(read_conf_text(file).splitlines(), start=1):
        where = f"{file}:{number}"
        split = _split_line(where, raw)
        if split is None:
            continue
        name, value_text = split
        parts = name.split(".")
        if len(parts) != 3 or not all(parts):
            raise UserError(f"{where}: key '{name}' must be model.scenario.key")
        model, scenario, key = parts
        _check_names(where, model, scenario, key, known_models)
        value = _parse_value(where, key, value_text)
        entries.append(ConfLine(model, scenario, key, value, number, raw.strip()))
    return entries


def effective_keys(entries: list[ConfLine], model: str, scenario: str) -> dict[str, float]:
    """The values LoadGen will take for ``model``/``scenario`` (its exact-then-wildcard order)."""
    found: dict[str, float] = {}
    for key in {entry.key for entry in entries}:
        for want_model, want_scenario in (
            (model, scenario), ("*", scenario), (model, "*"), ("*", "*")
        ):
            # LoadGen keeps the last value written for an exact key string.
            matches = [e for e in entries
                       if e.key == key and e.model == want_model and e.scenario == want_scenario]
            if matches:
                found[key] = matches[-1].value
                break
    return found
