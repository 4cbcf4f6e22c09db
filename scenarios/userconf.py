"""user.conf parsing and validation.

LoadGen reads ``model.scenario.key = value`` lines and silently ignores keys and model names it
does not know, so a typo (``Offline.target_qsp``) quietly runs with defaults. We parse the file
ourselves first and reject anything LoadGen would ignore, naming the line. LoadGen also takes
values it cannot use (a negative count wraps to a huge unsigned one, a target_qps of 0 is a
rate of nothing), and it reads any bytes as text: those are refused here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from quantmark.ground.errors import UserError
from quantmark.ground.paths import require_path

SCENARIOS = ("SingleStream", "MultiStream", "Offline", "Server")

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
    **{key: _COUNT for key in (
        "min_duration", "max_duration", "min_query_count", "max_query_count", "qsl_rng_seed",
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
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UserError(f"user.conf {file}:{line} is not UTF-8 text (byte "
                        f"0x{data[exc.start]:02x}); pass the text file of "
                        "'model.scenario.key = value' lines") from None


def _parse_value(where: str, key: str, value_text: str) -> float:
    """The number on a line, within the range LoadGen can use for ``key``."""
    try:
        value = float(int(value_text, 0)) if value_text.isdigit() else float(value_text)
    except ValueError:
        raise UserError(f"{where}: value '{value_text}' is not a number") from None
    allowed = RANGES[key]
    if not allowed.allows(value):
        raise UserError(f"{where}: {key} = {value_text} is out of range (LoadGen would clamp "
                        f"or misread it); use {allowed.text}")
    return value


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


def parse_user_conf(path: str | Path, known_models: tuple[str, ...]) -> list[ConfLine]:
    """Parse and validate a user.conf; raise a one-line UserError naming the bad line."""
    file = Path(path)
    entries: list[ConfLine] = []
    for number, raw in enumerate(read_conf_text(file).splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        where = f"{file}:{number}"
        if "=" not in text:
            raise UserError(f"{where}: expected 'model.scenario.key = value', got '{raw.strip()}'")
        name, _, value_text = (part.strip() for part in text.partition("="))
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
