"""What a results folder must hold before it may be packaged as an MLPerf submission.

Each check returns the reasons a scenario cannot be submitted, each naming the fix. The rules are
the inference rules' (v6.x, image classification) as the official submission checker applies
them, plus quantmark's own refusals: a quick run, a missing or failed compliance test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quantmark.ground.records import RESULTS, RunRecord, load_run
from quantmark.report.loadgen_log import LogError, read_detail
from quantmark.scenarios.settings import OFFICIAL_MIN_DURATION_MS

MIN_PERFORMANCE_SAMPLES = 1024  # resnet50's performance_sample_count
# LoadGen 6.0.17's mlperf.conf (rules round v6.1); a user.conf may not change them.
OFFICIAL_SEEDS = {
    "effective_qsl_rng_seed": 2085463073848966840,
    "effective_sample_index_rng_seed": 2747215439041700203,
    "effective_schedule_rng_seed": 16159082839903944936,
}
IMAGENET_VAL_SIZE = 50_000
CLOSED_MODELS = {"resnet50": 75.6954}  # closed-division model -> top-1 target (99% of FP32)
AUDIT_TESTS = {"TEST01": ("accuracy", "performance"), "TEST04": ("performance",)}


@dataclass
class ScenarioRuns:
    """The runs of one SUT, model and scenario in a results folder."""

    folder: Path  # <results>/<system>/<model>/<scenario>
    system: str
    model: str
    scenario: str

    @property
    def performance(self) -> Path:
        return self.folder / "performance" / "run_1"

    @property
    def accuracy(self) -> Path:
        return self.folder / "accuracy"

    def audit_run(self, test: str) -> Path:
        return self.folder / test / "performance" / "run_1"

    def results(self, run: Path) -> RunRecord:
        """The run's record; an empty one where it has none (the checks name what lacks)."""
        path = run / RESULTS
        return load_run(path) if path.is_file() else RunRecord()


def find_scenarios(root: Path) -> list[ScenarioRuns]:
    """Every ``<system>/<model>/<scenario>`` under ``root`` that has a performance run."""
    found = []
    for detail in sorted(root.glob("*/*/*/performance/run_1/mlperf_log_detail.txt")):
        folder = detail.parents[2]
        found.append(ScenarioRuns(folder, folder.parents[1].name, folder.parent.name,
                                  folder.name))
    return found


def _official_run_problems(run: Path, what: str, results: RunRecord,
                           require_official: bool) -> list[str]:
    """A performance-mode run (normal or audit) that the rules accept as a measurement."""
    try:
        detail = read_detail(run / "mlperf_log_detail.txt")
    except LogError as exc:
        return [f"{what}: {exc}"]
    problems = []
    if detail["_errors"]:
        problems.append(f"{what}: LoadGen logged errors ({detail['_errors'][0]}); rerun")
    if require_official:
        if results.settings.get("mode") != "official" or \
                (run / "NOT_VALID_FOR_SUBMISSION.txt").exists():
            problems.append(f"{what} is a quick run; rerun with --official")
        if int(detail.get("effective_min_duration_ms") or 0) < OFFICIAL_MIN_DURATION_MS:
            problems.append(f"{what}: min_duration {detail.get('effective_min_duration_ms')} ms "
                            f"is under the rules' {OFFICIAL_MIN_DURATION_MS} ms; drop the "
                            "user.conf override and rerun with --official")
        for key, value in OFFICIAL_SEEDS.items():
            if detail.get(key) != value:
                problems.append(f"{what}: {key} is {detail.get(key)}, not the official "
                                f"{value}; do not set seeds in user.conf")
    if int(detail.get("effective_performance_sample_count") or 0) < MIN_PERFORMANCE_SAMPLES:
        problems.append(f"{what}: performance_sample_count "
                        f"{detail.get('effective_performance_sample_count')} is under "
                        f"{MIN_PERFORMANCE_SAMPLES}; use a dataset with at least that many images")
    if detail.get("result_validity") != "VALID":
        reason = detail.get("result_invalid_reason") or "see its mlperf_log_summary.txt"
        problems.append(f"{what} is INVALID ({reason}); fix the settings and rerun")
    if detail.get("effective_scenario") == "SingleStream" and not detail.get(
            "early_stopping_met", True):
        problems.append(f"{what}: early stopping was not met; rerun")
    return problems


def scenario_problems(runs: ScenarioRuns, division: str,
                      require_official: bool = True) -> list[str]:
    """Every reason ``runs`` cannot go into a ``division`` submission (empty: it can)."""
    where = f"{runs.system}/{runs.model}/{runs.scenario}"
    problems = _official_run_problems(runs.performance, f"{where} performance run",
                                      runs.results(runs.performance), require_official)
    problems += _accuracy_problems(runs, division, where)
    for test, checks in AUDIT_TESTS.items():
        run = runs.audit_run(test)
        if not (run / "mlperf_log_detail.txt").is_file():
            problems.append(f"{where}: {test} is missing; run it with --audit {test} "
                            "(or --all-tests)")
            continue
        problems += _official_run_problems(run, f"{where} {test} run", runs.results(run),
                                           require_official)
        for check in checks:
            verify = runs.folder / test / f"verify_{check}.txt"
            text = verify.read_text() if verify.is_file() else ""
            if not any(line.strip() == "TEST PASS" for line in text.splitlines()):
                problems.append(f"{where}: {test} {check} check did not pass (see {verify}); "
                                "fix the SUT and rerun the test")
    return problems


def _accuracy_problems(runs: ScenarioRuns, division: str, where: str) -> list[str]:
    run = runs.accuracy
    needed = ("mlperf_log_detail.txt", "mlperf_log_accuracy.json", "accuracy.txt")
    missing = [name for name in needed if not (run / name).is_file()]
    if missing:
        return [f"{where}: no accuracy run ({', '.join(missing)} missing); run it with "
                "--mode accuracy (or --all-tests)"]
    problems = []
    detail = read_detail(run / "mlperf_log_detail.txt")
    if detail["_errors"]:
        problems.append(f"{where} accuracy run: LoadGen logged errors; rerun")
    accuracy = runs.results(run).accuracy or {}
    if division == "closed":
        target = CLOSED_MODELS.get(runs.model)
        if target is None:
            problems.append(f"{where}: the closed division takes only "
                            f"{', '.join(CLOSED_MODELS)}; submit {runs.model} to open")
        elif accuracy.get("top1", 0.0) < target:
            problems.append(f"{where}: top-1 {accuracy.get('top1', 0.0):.3f}% is under the "
                            f"closed target {target}%; fix the model or submit to open")
        if accuracy.get("total") != IMAGENET_VAL_SIZE:
            problems.append(f"{where}: the closed division scores all {IMAGENET_VAL_SIZE} "
                            f"ImageNet validation images, this run scored "
                            f"{accuracy.get('total')}; pass --dataset-path with the full set "
                            "and --calibration-list")
    return problems
