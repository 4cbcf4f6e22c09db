"""Two accuracy runs are compared image by image, never by QSL index, and crops of one source
photo are judged together: the paired top-1 change, the agreement of the report and of
``python -m quantmark.report.agreement``, and a malformed log entry named by its index."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from quantmark.ground.errors import UserError
from quantmark.report.accuracy import paired_change, run_samples
from quantmark.report.agreement import compare
from quantmark.report.intervals import AccuracyLogs
from quantmark.report.stats import accuracy_change
from tests.conftest import ROOT
from tests.report.test_accuracy import hexf

IMAGES = [f"val/img_{i:03d}.jpg" for i in range(40)]
LABELS = [i % 4 for i in range(40)]
HELD_OUT = {3, 11, 19, 27}  # calibration images the INT8 run held out of its QSL


def write_run(folder: Path, images: list[str], answers: list[int], *,
              groups: dict[str, str] | None = None, fingerprint: str | None = "same") -> Path:
    """An accuracy run folder as record.py leaves it: log, val_map (QSL order), results.json
    and, when the data named sources, val_groups.txt."""
    folder.mkdir(parents=True)
    entries = [{"seq_id": n, "qsl_idx": n, "data": hexf(a)} for n, a in enumerate(answers)]
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    (folder / "val_map.txt").write_text(
        "".join(f"{image} {LABELS[IMAGES.index(image)]}\n" for image in images))
    if groups is not None:
        (folder / "val_groups.txt").write_text(
            "".join(f"{image} {groups[image]}\n" for image in images))
    if fingerprint is not None:
        (folder / "results.json").write_text(json.dumps({"dataset": {"fingerprint": fingerprint}}))
    return folder


def two_runs(tmp_path: Path, **kwargs) -> tuple[Path, Path, list[bool], list[bool]]:
    """FP32 over all 40 images (wrong on image 0 and 1); INT8 over the 36 not held out, wrong on
    images 1, 2 and 5. By image the runs agree on 33 of 36 shared images (0, 2 and 5 differ)."""
    fp32 = [(LABELS[i] + 1) % 4 if i in (0, 1) else LABELS[i] for i in range(40)]
    kept = [i for i in range(40) if i not in HELD_OUT]
    int8 = [(LABELS[i] + 1) % 4 if i in (1, 2, 5) else LABELS[i] for i in kept]
    base = write_run(tmp_path / "fp32", IMAGES, fp32, **kwargs)
    cand = write_run(tmp_path / "int8", [IMAGES[i] for i in kept], int8, **kwargs)
    return (base, cand, [fp32[i] == LABELS[i] for i in kept],
            [a == LABELS[i] for a, i in zip(int8, kept, strict=True)])


def test_runs_with_a_calibration_hold_out_pair_by_image_not_by_index(tmp_path):
    base, cand, base_right, cand_right = two_runs(tmp_path)
    change = paired_change(base, cand)
    assert change == replace(accuracy_change(base_right, cand_right), left_out=4)
    assert (change.n_samples, change.left_out) == (36, 4)
    assert (change.only_baseline_right, change.only_candidate_right) == (2, 1)
    assert "on the 36 images both runs saw (4 in only one)" in change.text()
    records = {key: {"folder": folder} for key, folder in
               ((("box", "m", "fp32"), base), (("box", "m", "int8"), cand))}
    logs = AccuracyLogs(records)
    # by qsl_idx the INT8 answers are shifted against FP32's and would agree on few samples
    assert logs.agreement(("box", "m", "int8"), ("box", "m", "fp32")).percent == pytest.approx(
        100 * 33 / 36)
    assert logs.change(("box", "m", "int8"), ("box", "m", "fp32")) == change


def test_runs_over_other_datasets_are_not_paired(tmp_path):
    base = write_run(tmp_path / "a", IMAGES, LABELS, fingerprint="one")
    cand = write_run(tmp_path / "b", IMAGES, LABELS, fingerprint="other")
    assert paired_change(base, cand) is None
    logs = AccuracyLogs({("s", "m", "a"): {"folder": base}, ("s", "m", "b"): {"folder": cand}})
    assert logs.agreement(("s", "m", "b"), ("s", "m", "a")) is None


def test_the_source_photos_in_the_run_folder_group_the_change(tmp_path):
    photos = {image: f"photo{i % 5}" for i, image in enumerate(IMAGES)}
    base, cand, base_right, cand_right = two_runs(tmp_path, groups=photos)
    kept = [i for i in range(40) if i not in HELD_OUT]
    change = paired_change(base, cand)
    expected = accuracy_change(base_right, cand_right, groups=[f"photo{i % 5}" for i in kept])
    assert (change.low, change.high, change.p_value) == (expected.low, expected.high,
                                                          expected.p_value)
    assert change.method == "cluster-t" and change.n_groups == 5
    assert "over 5 source images" in change.text() and "McNemar" not in change.text()
    # a dataset without val_groups.txt: every sample its own source, McNemar
    assert paired_change(*two_runs(tmp_path / "plain")[:2]).method == "mcnemar"


def test_a_builtin_run_recorded_before_val_groups_groups_by_label(tmp_path):
    base, cand, _, _ = two_runs(tmp_path)
    assert paired_change(base, cand, by_source_image=True).n_groups == 4  # the 4 labels
    assert paired_change(base, cand).n_groups == 36


def test_the_agreement_command_matches_images_and_lists_the_differing_ones(tmp_path):
    base, cand, _, _ = two_runs(tmp_path)
    found = compare(base / "mlperf_log_accuracy.json", cand / "mlperf_log_accuracy.json")
    assert (found.same, found.compared, found.only_in_one) == (33, 36, 4)
    assert [image for image, _, _ in found.differing] == [IMAGES[0], IMAGES[2], IMAGES[5]]
    proc = subprocess.run([sys.executable, "-m", "quantmark.report.agreement",
                           str(base / "mlperf_log_accuracy.json"),
                           str(cand / "mlperf_log_accuracy.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.startswith("agreement 33/36 (91.667%); 4 samples in only one log")
    assert f"  {IMAGES[2]}: class 2 vs 3" in proc.stdout


def test_a_log_without_its_val_map_is_one_line_exit_2(tmp_path):
    log = tmp_path / "lone.json"
    log.write_text("[]")
    proc = subprocess.run([sys.executable, "-m", "quantmark.report.agreement", str(log),
                           str(log)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no val_map.txt beside lone.json" in lines[0]


def test_a_malformed_entry_in_a_reported_run_is_named(tmp_path):
    base, cand, _, _ = two_runs(tmp_path)
    entries = json.loads((cand / "mlperf_log_accuracy.json").read_text())
    entries[7] = {"seq_id": 7, "qsl_idx": 7}
    (cand / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    logs = AccuracyLogs({("s", "m", "a"): {"folder": base}, ("s", "m", "b"): {"folder": cand}})
    with pytest.raises(UserError, match=r"entry 7 has no data"):
        logs.change(("s", "m", "b"), ("s", "m", "a"))
    assert run_samples(tmp_path / "nowhere") is None
