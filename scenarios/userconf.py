"""user.conf parsing and validation.

LoadGen reads ``model.scenario.key = value`` lines and silently ignores keys and model names it
does not know, so a typo (``Offline.target_qsp``) quietly runs with defaults. We parse the file
ourselves first and reject anything LoadGen would ignore, naming the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantmark.errors import UserError

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


@dataclass(frozen=True)
class ConfLine:
    """One ``model.scenario.key = value`` line."""

    model: str
    scenario: str
    key: str
    value: float
    line: int
    text: str


def parse_user_conf(path: str | Path, known_models: tuple[str, ...]) -> list[ConfLine]:
    """Parse and validate a user.conf; raise a one-line UserError naming the bad line."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"user.conf {file} does not exist; pass --user-conf FILE or omit it")
    entries: list[ConfLine] = []
    for number, raw in enumerate(file.read_text().splitlines(), start=1):
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
        try:
            value = float(int(value_text, 0)) if value_text.isdigit() else float(value_text)
        except ValueError:
            raise UserError(f"{where}: value '{value_text}' is not a number") from None
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
