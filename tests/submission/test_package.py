"""Packaging runs into the MLPerf v6.x submission tree: what it refuses and what it writes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.submission.package import MAX_ACCURACY_LOG_BYTES, package, truncate_accuracy_log
from quantmark.submission.rules import ScenarioRuns, find_scenarios, scenario_problems
from quantmark.submission.system import REQUIRED_KEYS
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def passing_results(quick_all_tests, photo_subset, tmp_path_factory) -> Path:
    """The quick all-tests results with every compliance test passed. A timing check of two
    short runs can fail on a busy machine with nothing cached; a submitter reruns that test,
    and so do we (at most twice) before packaging."""
    proc, out = quick_all_tests
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    copy = tmp_path_factory.mktemp("passing") / "results"
    shutil.copytree(out, copy)
    base = scenario(copy)
    for test in ("TEST01", "TEST04"):
        for _ in range(2):
            if (base / test / "verify_performance.txt").read_text().rstrip().endswith("PASS"):
                break
            run_cli("--audit", test, "--scenario", "Offline", "--sut", "ort-int8", "--model",
                    "resnet50", "--user-conf", str(out.parent / "all-tests.conf"),
                    "--dataset-path", str(photo_subset),
                    "--output", str(copy), timeout=600)
    return copy


@pytest.fixture()
def results(passing_results, tmp_path) -> Path:
    """A private copy (tests below damage it)."""
    copy = tmp_path / "results"
    shutil.copytree(passing_results, copy)
    return copy


def scenario(results: Path) -> Path:
    return next(results.glob("*-ort-int8/resnet50/Offline"))


@pytest.mark.slow
def test_quick_runs_are_refused_with_the_reason(results, tmp_path):
    proc = run_cli("submission", "--results", str(results), "--submitter", "Acme",
                   "--division", "open", "--output", str(tmp_path / "sub"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "quick run; rerun with --official" in proc.stderr
    assert not (tmp_path / "sub").exists()


@pytest.mark.slow
def test_missing_test_is_refused(results, tmp_path):
    shutil.rmtree(scenario(results) / "TEST04")
    with pytest.raises(UserError, match="TEST04 is missing; run it with --audit TEST04"):
        package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                require_official=False)


@pytest.mark.slow
def test_failed_test_is_refused(results, tmp_path):
    verify = scenario(results) / "TEST01" / "verify_accuracy.txt"
    verify.write_text(verify.read_text().replace("TEST PASS", "TEST FAIL"))
    with pytest.raises(UserError, match="TEST01 accuracy check did not pass"):
        package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                require_official=False)


@pytest.mark.slow
def test_invalid_run_is_refused(results, tmp_path):
    detail = scenario(results) / "performance" / "run_1" / "mlperf_log_detail.txt"
    detail.write_text(detail.read_text().replace('"value": "VALID"', '"value": "INVALID"'))
    with pytest.raises(UserError, match="performance run is INVALID"):
        package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                require_official=False)


@pytest.mark.slow
def test_closed_needs_resnet50_at_target_on_full_imagenet(results, tmp_path):
    runs = find_scenarios(results)
    problems = " | ".join(scenario_problems(runs[0], "closed", require_official=False))
    assert "under the closed target 75.6954%" in problems  # random weights
    assert "scores all 50000 ImageNet validation images, this run scored 231" in problems
    with pytest.raises(UserError, match="under the closed target"):
        package(results, submitter="Acme", division="closed", output=tmp_path / "sub",
                require_official=False)
    assert scenario_problems(runs[0], "open", require_official=False) == []
    lite = ScenarioRuns(runs[0].folder, runs[0].system, "efficientnet-lite0", "Offline")
    assert any("closed division takes only resnet50" in p
               for p in scenario_problems(lite, "closed", require_official=False))


@pytest.mark.slow
def test_existing_output_is_refused(results, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                require_official=False)
    assert (tmp_path / "sub" / "keep.txt").read_text() == "mine"


@pytest.mark.slow
def test_tree_has_every_required_file(results, tmp_path):
    """Quick runs packaged with only the 600 s checks off: the layout and contents are the
    same as for an official run (an official run is checked by MLPerf's own checker)."""
    user = tmp_path / "system.json"
    user.write_text(json.dumps({"cooling": "air", "host_memory_configuration": "1x 24 GiB",
                                "system_type_detail": "cloud VM"}))
    packaged = package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                       system_file=user, require_official=False)
    base = tmp_path / "sub" / "open" / "Acme"
    system = scenario(results).parents[1].name
    leaf = base / "results" / system / "resnet50" / "Offline"
    expected = [
        "user.conf", "README.md", "measurements.json",
        "performance/run_1/mlperf_log_summary.txt", "performance/run_1/mlperf_log_detail.txt",
        "accuracy/mlperf_log_summary.txt", "accuracy/mlperf_log_detail.txt",
        "accuracy/mlperf_log_accuracy.json", "accuracy/accuracy.txt",
        "TEST01/verify_accuracy.txt", "TEST01/verify_performance.txt",
        "TEST01/accuracy/mlperf_log_accuracy.json",
        "TEST01/performance/run_1/mlperf_log_summary.txt",
        "TEST01/performance/run_1/mlperf_log_detail.txt",
        "TEST04/verify_performance.txt", "TEST04/performance/run_1/mlperf_log_summary.txt",
        "TEST04/performance/run_1/mlperf_log_detail.txt",
    ]
    for name in expected:
        assert (leaf / name).is_file() and (leaf / name).stat().st_size > 0, name
    assert packaged.scenarios == [f"{system}/resnet50/Offline"]

    description = json.loads((base / "systems" / f"{system}.json").read_text())
    assert set(REQUIRED_KEYS) <= set(description)
    assert all(str(description[key]).strip() for key in REQUIRED_KEYS)
    assert description["division"] == "open" and description["submitter"] == "Acme"
    assert description["cooling"] == "air"
    assert "onnxruntime" in description["framework"].lower()
    assert packaged.systems[system] == []  # nothing left for the submitter to fill

    measurements = json.loads((leaf / "measurements.json").read_text())
    assert measurements["weight_data_types"] == "int8"
    # the 256-crop folder holds out a tenth of itself for calibration (the built-in photos
    # have a calibration split of their own)
    assert "calibrated on 25 images (held out from dataset" in \
        measurements["weight_transformations"]
    assert all(measurements.values())

    full = scenario(results) / "accuracy" / "mlperf_log_accuracy.json"
    accuracy = (leaf / "accuracy" / "accuracy.txt").read_text().splitlines()
    assert accuracy[0] == (scenario(results) / "accuracy" / "accuracy.txt").read_text() \
        .splitlines()[0]
    assert accuracy[1] == "hash=" + hashlib.sha256(full.read_bytes()).hexdigest()
    umask = os.umask(0)
    os.umask(umask)
    for written in (leaf / "accuracy" / "accuracy.txt", base / "systems" / f"{system}.json"):
        assert written.stat().st_mode & 0o777 == 0o666 & ~umask  # shareable, not mkstemp's 0600
    assert (leaf / "accuracy" / "mlperf_log_accuracy.json").stat().st_size <= \
        MAX_ACCURACY_LOG_BYTES
    assert json.loads((base / "model_mapping.json").read_text()) == \
        {"resnet50": "resnet"}
    assert (base / "src" / "run.py").is_file() and (base / "src" / "sut").is_dir()
    assert "--official --all-tests" in (leaf / "README.md").read_text()


def test_truncation_keeps_head_and_tail_and_hashes_the_original(tmp_path):
    source = tmp_path / "big.json"
    source.write_text("[" + ",".join(f'{{"qsl_idx": {i}}}' for i in range(5000)) + "]")
    digest = truncate_accuracy_log(source, tmp_path / "small.json")
    small = (tmp_path / "small.json").read_text()
    text = source.read_text()
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    assert small.startswith(text[:4096]) and small.endswith(text[-4096:])
    assert len(small.encode()) <= MAX_ACCURACY_LOG_BYTES
    tiny = tmp_path / "tiny.json"
    tiny.write_text("[]")
    truncate_accuracy_log(tiny, tmp_path / "tiny_out.json")
    assert (tmp_path / "tiny_out.json").read_text() == "[]"


@pytest.mark.slow
def test_failure_while_writing_leaves_nothing_behind(results, tmp_path):
    bad = tmp_path / "system.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="is not valid JSON"):
        package(results, submitter="Acme", division="open", output=tmp_path / "sub",
                system_file=bad, require_official=False)
    assert not (tmp_path / "sub").exists()
    assert not list(tmp_path.glob(".sub.staging*"))
