"""LoadGen TestSettings from mlperf.conf + user.conf + run mode.

Order, as LoadGen itself applies it: the mlperf.conf compiled into LoadGen, then the user.conf,
then what quantmark sets:

* ``official``: nothing of mlperf.conf is changed. Only the scenario's expected latency / QPS
  is filled in, and only when the user.conf does not set it, from a short warm-up measurement
  (these are user.conf-level knobs; LoadGen's defaults would make most runs INVALID).
* ``quick`` (default): a short development run. Duration and query counts are cut down, expected
  latency / QPS come from the measurement, and the run is marked not valid for submission. Any
  key the user.conf sets for this model and scenario still wins.

Everything quantmark sets is returned as ``model.scenario.key = value`` lines, written beside the
logs as the effective ``user.conf`` so a run can be reproduced exactly.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.scenarios.userconf import (
    SCENARIOS,
    ConfLine,
    effective_keys,
    loadgen_copy,
    parse_user_conf,
)

QUICK_MIN_DURATION_MS = 5_000
OFFICIAL_MIN_DURATION_MS = 600_000  # every scenario, MLPerf inference rules
# Early stopping needs at least this many queries to estimate the target percentile.
QUICK_MIN_QUERIES = {"SingleStream": 64, "MultiStream": 662, "Server": 700, "Offline": 1}
# LoadGen pre-generates queries from the expected latency / QPS. Too few queries (latency
# overestimated, Offline QPS underestimated) ends the run early and INVALID; too many only costs
# memory, since SingleStream/MultiStream stop at the minimum duration. So lean the safe way.
LATENCY_MARGIN = 0.5  # expected latency = half the measured median
OFFLINE_QPS_MARGIN = 1.6  # Offline expected QPS = 1.6x the measured throughput (quick runs)
# Official Offline runs last about 1.1 x margin x 600 s: a smaller margin keeps a 600 s run near
# 12 minutes, still safe unless the SUT runs 25% faster under LoadGen than in the warm-up.
OFFICIAL_OFFLINE_QPS_MARGIN = 1.25
# Server load when the user.conf sets none: 30% of measured capacity. Poisson bursts plus the
# scheduling noise of a small shared machine put p99 far above the service time at higher loads.
SERVER_LOAD_FRACTION = 0.3
SERVER_LATENCY_MULTIPLE = 15.0  # quick Server latency bound: 15x a batch's service time ...
QUICK_SERVER_MIN_BOUND_MS = 50.0  # ... and never under 50 ms (OS jitter on small machines)


@dataclass(frozen=True)
class Measurement:
    """Warm-up measurement of the SUT, taken in the test's own process before LoadGen starts."""

    latency_s: float  # median latency of one sample (batch 1)
    batch_latency_s: float  # median latency of one batch of ``batch_size``
    batch_size: int
    query_path_s: float = 0.0  # median single-sample query through the real worker path
    # samples/s through the real Offline path (every worker busy); 0 when not measured
    path_throughput: float = 0.0

    @property
    def throughput(self) -> float:
        """Samples per second at the run's batch size (one worker)."""
        return self.batch_size / self.batch_latency_s

    def offline_rate(self, workers: int) -> float:
        """What an Offline run sustains: the real path's rate where measured (the harness can
        cost more than a fast model's predict), else ``predict`` alone times the workers."""
        return self.path_throughput or self.throughput * workers

    @property
    def server_capacity(self) -> float:
        """Samples per second one worker sustains when each query also pays the harness's
        per-query cost (the worker path's time beyond predict itself)."""
        harness_s = max(0.0, self.query_path_s - self.latency_s)
        return self.batch_size / (self.batch_latency_s + harness_s)

    def query_latency_s(self, samples: int) -> float:
        """Latency of a query of ``samples`` samples split into batches."""
        return math.ceil(samples / self.batch_size) * self.batch_latency_s

    def expected_rate(self, scenario: str, workers: int, samples_per_query: int = 8) -> float:
        """Samples per second a run of ``scenario`` should meet by this measurement: what
        a quick run is sized by, and what a rerun compares the rate it met with."""
        if scenario == "SingleStream":
            return 1.0 / self.latency_s
        if scenario == "MultiStream":
            return samples_per_query / self.query_latency_s(samples_per_query)
        if scenario == "Offline":
            return self.offline_rate(workers)
        return self.server_capacity * workers


@dataclass
class SettingsPlan:
    """What a single LoadGen test should be."""

    scenario: str
    mode: str  # "performance" | "accuracy"
    quick: bool
    loadgen_model: str  # model name for LoadGen's config lookups (mlperf.conf keys)
    known_models: tuple[str, ...]
    user_conf: str | None = None
    quick_min_duration_ms: int = QUICK_MIN_DURATION_MS
    workers: int = 1
    # samples/s an INVALID quick run met (quantmark.run.rerun): its rerun is sized by this rate,
    # not by the warm-up's; 0 for every other run
    met_rate: float = 0.0


@dataclass
class BuiltSettings:
    """TestSettings plus a record of how they were made."""

    settings: Any
    user_entries: list[ConfLine]
    applied: dict[str, float] = field(default_factory=dict)  # what quantmark set, by key
    notes: list[str] = field(default_factory=list)

    def effective_user_conf(self, model: str, scenario: str, source: str | None) -> str:
        """The user.conf that reproduces this run: the user's lines, then quantmark's."""
        lines = [f"# effective user.conf written by quantmark (source: {source or 'none'})"]
        lines += [entry.text for entry in self.user_entries]
        if self.applied:
            lines.append("# set by quantmark for this run:")
            lines += [f"{model}.{scenario}.{key} = {_fmt(v)}" for key, v in self.applied.items()]
        lines += [f"# {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def validate_scenario(name: str) -> str:
    if name not in SCENARIOS:
        raise UserError(f"unknown scenario '{name}'; valid scenarios: {', '.join(SCENARIOS)}")
    return name


def build_settings(plan: SettingsPlan, measurement: Measurement | None) -> BuiltSettings:
    """TestSettings for one test. Must be called once per process (LoadGen's FromConfig rule)."""
    import mlperf_loadgen as lg

    validate_scenario(plan.scenario)
    entries = (
        parse_user_conf(plan.user_conf, plan.known_models) if plan.user_conf else []
    )
    user_set = effective_keys(entries, plan.loadgen_model, plan.scenario)

    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, plan.scenario)
    with tempfile.TemporaryDirectory(prefix="quantmark-conf-") as tmp:
        conf_path = (loadgen_copy(plan.user_conf, Path(tmp)) if plan.user_conf  # no BOM
                     else str(Path(tmp) / "empty_user.conf"))
        if not plan.user_conf:
            Path(conf_path).write_text("")
        status = settings.FromConfig(conf_path, plan.loadgen_model, plan.scenario)
    if status != 0:
        raise UserError(f"LoadGen rejected user.conf {conf_path} (status {status})")
    settings.mode = (
        lg.TestMode.AccuracyOnly if plan.mode == "accuracy" else lg.TestMode.PerformanceOnly
    )
    built = BuiltSettings(settings, entries)

    def set_value(key: str, attribute: str, value: float, conf_value: float | None = None,
                  cast=int) -> None:
        """Set a knob unless the user.conf chose it; remember it as a user.conf line.

        ``conf_value`` is the value in user.conf units where they differ (latencies in ms).
        """
        if key in user_set:
            return
        setattr(settings, attribute, cast(value))
        built.applied[key] = value if conf_value is None else conf_value

    if plan.quick:
        set_value("min_duration", "min_duration_ms", plan.quick_min_duration_ms)
        set_value("min_query_count", "min_query_count", QUICK_MIN_QUERIES[plan.scenario])
        built.notes.append("quick run: NOT VALID FOR SUBMISSION (shortened duration/queries)")
    elif settings.min_duration_ms < OFFICIAL_MIN_DURATION_MS:
        built.notes.append(
            f"official run, but the user.conf sets min_duration {settings.min_duration_ms} ms "
            f"below the rules' {OFFICIAL_MIN_DURATION_MS} ms: NOT VALID FOR SUBMISSION"
        )

    if measurement is not None:
        _apply_measurement(plan, measurement, set_value, user_set, settings, built)
    return built


def _apply_measurement(plan, measurement, set_value, user_set, settings, built) -> None:
    """Expected latency / QPS from the warm-up measurement, never guessed; a quick rerun's
    from the rate its INVALID first run met (``plan.met_rate``), with the same margins."""
    scenario, met = plan.scenario, plan.met_rate
    if met and scenario != "Server":
        built.notes.append(f"quick rerun: sized by the {met:.6g} samples/s the INVALID first run "
                           "met, not by the warm-up measurement")
    if scenario == "SingleStream":
        expected_s = (1.0 / met if met else measurement.latency_s) * LATENCY_MARGIN
        set_value("target_latency", "single_stream_expected_latency_ns", expected_s * 1e9,
                  expected_s * 1e3)
    elif scenario == "MultiStream":
        per_query = settings.multi_stream_samples_per_query or 8
        latency_s = (per_query / met if met else
                     measurement.query_latency_s(per_query)) * LATENCY_MARGIN
        set_value("target_latency", "multi_stream_expected_latency_ns", latency_s * 1e9,
                  latency_s * 1e3)
    elif scenario == "Offline":
        margin = OFFLINE_QPS_MARGIN if plan.quick else OFFICIAL_OFFLINE_QPS_MARGIN
        set_value("target_qps", "offline_expected_qps",
                  (met or measurement.offline_rate(plan.workers)) * margin, cast=float)
    elif scenario == "Server":
        capacity = measurement.server_capacity * plan.workers
        set_value("target_qps", "server_target_qps", capacity * SERVER_LOAD_FRACTION, cast=float)
        if plan.quick and "target_latency" not in user_set:
            bound_ns = max(measurement.batch_latency_s * SERVER_LATENCY_MULTIPLE * 1e9,
                           QUICK_SERVER_MIN_BOUND_MS * 1e6)
            if bound_ns > settings.server_target_latency_ns:
                settings.server_target_latency_ns = int(bound_ns)
                built.applied["target_latency"] = bound_ns / 1e6
                built.notes.append(
                    "quick run: Server latency bound raised above mlperf.conf's to "
                    f"{SERVER_LATENCY_MULTIPLE:g}x the measured batch latency (at least "
                    f"{QUICK_SERVER_MIN_BOUND_MS:g} ms)"
                )
