"""Top-1 accuracy from LoadGen's ``mlperf_log_accuracy.json``, the official script's way.

Each entry's ``data`` is the response bytes in hex: one float32, the predicted class. The same
``qsl_idx`` may appear more than once; the first response counts. The label of ``qsl_idx`` is
line ``qsl_idx`` of the val_map the QSL was built from (the run folder keeps a copy of it in QSL
order, so calibration images held out of a folder never shift the lines). Two runs are compared
sample by sample by image, the path on each run's val_map line, never by ``qsl_idx``: a run
that held calibration images out has other indices for the same images.

    python -m quantmark.report.accuracy --mlperf-accuracy-file mlperf_log_accuracy.json \\
        --imagenet-val-file val_map.txt [--expected-count 50000] [--output accuracy.txt]
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from quantmark.ground.errors import UserError
from quantmark.tasks.accuracy_log import ACCURACY_LOG, read_log_entries
from quantmark.tasks.classification.scoring import (
    AccuracyResult,
    accuracy_text,
    compute_accuracy,
    decode_predictions,
    decode_value,
    read_classes,
    read_val_map,
    read_val_map_labels,
    score,
)

if TYPE_CHECKING:
    from quantmark.report.agreement_interval import AgreementFigure
    from quantmark.report.stats import AccuracyChange
    from quantmark.tasks.contract import QualityChange, Task

# the classification task's scoring (quantmark.tasks.classification.scoring), named here for the
# official-form command below and the readers that pair two runs' samples
__all__ = ["ACCURACY_LOG", "AccuracyResult", "Pairing", "RunSamples", "accuracy_text",
           "compute_accuracy", "decode_predictions", "decode_value", "main", "pair",
           "paired_change", "read_classes", "run_task", "read_log_entries", "read_val_map",
           "read_val_map_labels", "run_samples", "samples_change", "score"]


@dataclass(frozen=True)
class RunSamples:
    """An accuracy run folder's samples in QSL order: which image (its val_map.txt), its
    label, the class the SUT answered, the image's source (val_groups.txt, when the data had
    one) and the dataset's content fingerprint (results.json, when recorded)."""

    images: list[str]
    labels: list[int]
    answers: dict[int, float]  # qsl_idx -> class
    groups: dict[str, str] | None
    fingerprint: str | None

    def correct(self, row: int) -> bool:
        answer = self.answers.get(row, math.nan)
        return math.isfinite(answer) and int(answer) == self.labels[row]


def run_samples(folder: str | Path, log: str | Path | None = None) -> RunSamples | None:
    """The samples of an accuracy run folder (``log``: its accuracy log, if named otherwise);
    None when it lacks its log or val_map."""
    from quantmark.qsl.groups import read_groups
    from quantmark.report.current_set import read_results

    folder = Path(folder)
    log, val_map = Path(log or folder / ACCURACY_LOG), folder / "val_map.txt"
    if not log.is_file() or not val_map.is_file():
        return None
    items = read_val_map(val_map)
    results = read_results(folder)  # a member's logs in an ensemble run have none
    fingerprint = results.dataset.get("fingerprint") if results else None
    return RunSamples([rel for rel, _ in items], [label for _, label in items],
                      decode_predictions(log)[0], read_groups(folder),
                      fingerprint if isinstance(fingerprint, str) else None)


@dataclass(frozen=True)
class Pairing:
    """The samples two runs share, matched by image (never by QSL position): run a's and run
    b's row of each, and how many answered samples had no partner."""

    images: list[str]
    rows_a: list[int]
    rows_b: list[int]
    left_out: int


def pair(a: RunSamples, b: RunSamples) -> Pairing | None:
    """Match the answered samples of two runs by image path; None when the runs read other
    datasets (their content fingerprints differ, so one path may be two images) or give one
    image two labels. A calibration hold-out shifts QSL indices, never images."""
    if a.fingerprint and b.fingerprint and a.fingerprint != b.fingerprint:
        return None
    rows_of_b = {image: row for row, image in enumerate(b.images) if row in b.answers}
    images, rows_a, rows_b = [], [], []
    for row, image in enumerate(a.images):
        other = rows_of_b.get(image)
        if row not in a.answers or other is None:
            continue
        if a.labels[row] != b.labels[other]:
            return None
        images.append(image)
        rows_a.append(row)
        rows_b.append(other)
    answered = sum(row < len(a.images) for row in a.answers) + sum(
        row < len(b.images) for row in b.answers)
    return Pairing(images, rows_a, rows_b, answered - 2 * len(images))


def paired_change(baseline: str | Path, candidate: str | Path, by_source_image: bool = False
                  ) -> AccuracyChange | QualityChange | None:
    """The paired top-1 change from the baseline's accuracy run to the candidate's, on the
    images both answered, or None when they share none (or read other datasets). The samples
    are grouped by source image when either run folder has a val_groups.txt.
    ``by_source_image`` (the built-in dataset) groups a run recorded before val_groups.txt
    existed by label, one or two photos each: coarser than by photo, so still valid."""
    task = run_task(baseline)
    if task is not None and task.pairs_runs:  # a detector's mAP: the task pairs its runs
        return task.paired_change(Path(baseline), Path(candidate))
    base, cand = run_samples(baseline), run_samples(candidate)
    if base is None or cand is None:
        return None
    return samples_change(base, cand, by_source_image)


def run_task(folder: str | Path) -> Task | None:
    """The task an accuracy run folder's results.json names; None for a folder without one
    (a member's logs in an ensemble) or a record written before tasks (classification)."""
    from quantmark.report.current_set import read_results
    from quantmark.tasks.catalog import get_task

    results = read_results(Path(folder))
    name = (results.task or {}).get("name") if results else None
    return get_task(name) if name else None


def samples_change(base: RunSamples, cand: RunSamples, by_source_image: bool = False
                   ) -> AccuracyChange | None:
    """``paired_change`` of two runs already read."""
    from dataclasses import replace

    from quantmark.report.stats import accuracy_change

    pairing = pair(base, cand)
    if pairing is None or not pairing.images:
        return None
    change = accuracy_change([base.correct(r) for r in pairing.rows_a],
                             [cand.correct(r) for r in pairing.rows_b],
                             _sources(base, cand, pairing, by_source_image))
    return replace(change, left_out=pairing.left_out)


def samples_agreement(base: RunSamples, cand: RunSamples, by_source_image: bool = False
                      ) -> AgreementFigure | None:
    """How often the candidate answered the baseline's class, on the images both answered,
    with its interval grouped by source image as ``samples_change``'s is; None when they read
    other datasets or share no image."""
    from quantmark.report.agreement_interval import agreement_interval

    pairing = pair(base, cand)
    if pairing is None or not pairing.images:
        return None
    same = [base.answers[i] == cand.answers[j]
            for i, j in zip(pairing.rows_a, pairing.rows_b, strict=True)]
    return agreement_interval(same, _sources(base, cand, pairing, by_source_image))


def paired_agreement(baseline: str | Path, candidate: str | Path, by_source_image: bool = False
                     ) -> AgreementFigure | None:
    """``samples_agreement`` of two accuracy run folders; None for a task that pairs its own
    runs (a detector: its change is its mAP, there is no one class per sample)."""
    task = run_task(baseline)
    if task is not None and task.pairs_runs:
        return None
    base, cand = run_samples(baseline), run_samples(candidate)
    if base is None or cand is None:
        return None
    return samples_agreement(base, cand, by_source_image)


def _sources(base: RunSamples, cand: RunSamples, pairing: Pairing, by_source_image: bool
             ) -> list[str] | list[int] | None:
    """Each paired sample's source image (val_groups.txt), its label for a built-in run
    recorded before val_groups.txt, or None: every sample its own."""
    sources = base.groups or cand.groups
    if sources:
        return [sources.get(image, image) for image in pairing.images]
    return [base.labels[row] for row in pairing.rows_a] if by_source_image else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Top-1 accuracy of a LoadGen accuracy log.")
    parser.add_argument("--mlperf-accuracy-file", required=True)
    parser.add_argument("--imagenet-val-file", required=True, help="val_map.txt in QSL order")
    parser.add_argument("--expected-count", type=int, default=None,
                        help="QSL size: report indices with no response")
    parser.add_argument("--output", help="write accuracy.txt here (with the log's hash line)")
    args = parser.parse_args(argv)
    try:
        labels = read_val_map_labels(args.imagenet_val_file)
        result = compute_accuracy(args.mlperf_accuracy_file, labels, args.expected_count)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = accuracy_text(result, args.mlperf_accuracy_file if args.output else None)
    if args.output:
        from quantmark.ground.hashing import atomic_write_text

        atomic_write_text(args.output, text)
    print(text, end="")
    classes = read_classes(Path(args.imagenet_val_file).parent)
    if classes is not None:
        print(f"note: labels are the {len(classes)} classes of classes.txt "
              f"({', '.join(classes[:5])}{', ...' if len(classes) > 5 else ''})",
              file=sys.stderr)
    if result.duplicates:
        print(f"note: {result.duplicates} duplicate responses ignored (first one counted)",
              file=sys.stderr)
    if result.missing:
        print(f"error: {result.missing} of {args.expected_count} samples have no response; "
              "the run did not cover the whole QSL", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
