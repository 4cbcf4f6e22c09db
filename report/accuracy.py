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
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import hash_file

if TYPE_CHECKING:
    from quantmark.report.stats import AccuracyChange

ACCURACY_LOG = "mlperf_log_accuracy.json"


@dataclass(frozen=True)
class AccuracyResult:
    good: int
    total: int
    duplicates: int
    missing: int = 0  # expected qsl indices with no response (only when the count is known)

    @property
    def percent(self) -> float:
        return 100.0 * self.good / self.total if self.total else 0.0

    def line(self) -> str:
        """The first line of accuracy.txt, in the official script's form."""
        return f"accuracy={self.percent:.3f}%, good={self.good}, total={self.total}"


def read_log_entries(log_path: str | Path) -> list[dict]:
    """The accuracy log's entries; a file that is not LoadGen's is a one-line UserError."""
    path = Path(log_path)
    try:
        entries = json.loads(path.read_text() or "[]")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read accuracy log {path} ({type(exc).__name__}); pass the "
                        "mlperf_log_accuracy.json of a finished LoadGen run") from None
    if not isinstance(entries, list):
        raise UserError(f"{path} is not a LoadGen accuracy log (a JSON list of "
                        "{seq_id, qsl_idx, data}); pass mlperf_log_accuracy.json")
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise UserError(f"{path}: entry {number} is {type(entry).__name__} "
                            f"{_short(entry)}, not an object {{seq_id, qsl_idx, data}}; pass "
                            "the mlperf_log_accuracy.json LoadGen wrote")
        lacking = [key for key in ("qsl_idx", "data") if key not in entry]
        if lacking:
            raise UserError(f"{path}: entry {number} has no {' or '.join(lacking)} (got "
                            f"{_short(sorted(entry))}); pass the mlperf_log_accuracy.json "
                            "LoadGen wrote")
    return entries


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def decode_value(hex_data: object, where: str = "response") -> float:
    """A response's first float32 (the predicted class); an empty response is -1. ``data`` that
    is not LoadGen's hex (another type, odd length, non-hex digits) is a one-line UserError."""
    if not isinstance(hex_data, str):
        raise UserError(f"{where}: data is {type(hex_data).__name__} {_short(hex_data)}, not a "
                        "hex string; pass the mlperf_log_accuracy.json LoadGen wrote")
    try:
        raw = bytes.fromhex(hex_data)
    except ValueError:
        raise UserError(f"{where}: data {_short(hex_data)} is not hex bytes (odd length or "
                        "non-hex digits); pass the mlperf_log_accuracy.json LoadGen wrote"
                        ) from None
    return float(np.frombuffer(raw[:4], dtype=np.float32)[0]) if len(raw) >= 4 else -1.0


def _index(entry: dict, where: str) -> int:
    index = entry["qsl_idx"]
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UserError(f"{where}: qsl_idx {_short(index)} is not a sample index (an integer "
                        ">= 0); pass the mlperf_log_accuracy.json LoadGen wrote")
    return index


def decode_predictions(log_path: str | Path) -> tuple[dict[int, float], int]:
    """qsl_idx -> predicted class (float32), and how many duplicate entries were dropped."""
    predictions: dict[int, float] = {}
    duplicates = 0
    for number, entry in enumerate(read_log_entries(log_path)):
        where = f"{log_path}: entry {number}"
        index = _index(entry, where)
        value = decode_value(entry["data"], where)  # a malformed duplicate is still malformed
        if index in predictions:
            duplicates += 1
            continue
        predictions[index] = value
    return predictions, duplicates


def score(predictions: dict[int, float], labels: np.ndarray | list[int], duplicates: int = 0,
          expected_count: int | None = None) -> AccuracyResult:
    """Compare each prediction with ``labels[qsl_idx]``; an index beyond the labels is wrong."""
    label_array = np.asarray(labels)
    good = sum(  # a NaN or infinite class (a broken SUT's bytes) is simply wrong
        1 for index, predicted in predictions.items()
        if 0 <= index < len(label_array) and math.isfinite(predicted)
        and int(predicted) == int(label_array[index])
    )
    missing = 0
    if expected_count is not None:
        missing = sum(1 for i in range(expected_count) if i not in predictions)
    return AccuracyResult(good=good, total=len(predictions), duplicates=duplicates,
                          missing=missing)


def compute_accuracy(log_path: str | Path, labels: np.ndarray | list[int],
                     expected_count: int | None = None) -> AccuracyResult:
    """Decode the log and score it against ``labels`` (index = qsl_idx)."""
    predictions, duplicates = decode_predictions(log_path)
    return score(predictions, labels, duplicates, expected_count)


def read_val_map_labels(path: str | Path) -> list[int]:
    """Labels in line order of a ``<relative path> <label>`` file (the official script's input)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"val_map {file} does not exist; pass the val_map.txt the run used")
    return [label for _, label in read_val_map(file)]


def read_classes(folder: str | Path) -> list[str] | None:
    """The class names a run scored against (``classes.txt`` beside its val_map.txt, written
    when the dataset named its classes), in label order; None when it has none."""
    from quantmark.qsl.label_space import CLASSES_FILE, read_class_names

    file = Path(folder) / CLASSES_FILE
    return read_class_names(file) if file.is_file() else None


def read_val_map(file: Path) -> list[tuple[str, int]]:
    """A run's val_map items. Its labels are any integer >= 0, each named when classes.txt lies
    beside it (a class-folder dataset of 10 classes is labelled 0..9); a bare val_map keeps
    ImageNet's refusal of 1-based labels (top label 1000)."""
    from quantmark.qsl.imagenet import parse_val_map
    from quantmark.qsl.label_space import CLASSES_FILE

    classes = read_classes(file.parent)
    items, _ = parse_val_map(file.read_bytes(), file, None if classes is None else len(classes),
                             file.parent / CLASSES_FILE)
    return items


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
                  ) -> AccuracyChange | None:
    """The paired top-1 change from the baseline's accuracy run to the candidate's, on the
    images both answered, or None when they share none (or read other datasets). The samples
    are grouped by source image when either run folder has a val_groups.txt.
    ``by_source_image`` (the built-in dataset) groups a run recorded before val_groups.txt
    existed by label, one or two photos each: coarser than by photo, so still valid."""
    base, cand = run_samples(baseline), run_samples(candidate)
    if base is None or cand is None:
        return None
    return samples_change(base, cand, by_source_image)


def samples_change(base: RunSamples, cand: RunSamples, by_source_image: bool = False
                   ) -> AccuracyChange | None:
    """``paired_change`` of two runs already read."""
    from dataclasses import replace

    from quantmark.report.stats import accuracy_change

    pairing = pair(base, cand)
    if pairing is None or not pairing.images:
        return None
    sources = base.groups or cand.groups
    groups = ([sources.get(image, image) for image in pairing.images] if sources else
              [base.labels[row] for row in pairing.rows_a] if by_source_image else None)
    change = accuracy_change([base.correct(r) for r in pairing.rows_a],
                             [cand.correct(r) for r in pairing.rows_b], groups)
    return replace(change, left_out=pairing.left_out)


def accuracy_text(result: AccuracyResult, log_path: str | Path | None = None) -> str:
    """accuracy.txt: the official first line, then (submission form) the full log's sha256."""
    lines = [result.line()]
    if log_path is not None:
        lines.append(f"hash={hash_file(log_path, length=64)}")
    return "\n".join(lines) + "\n"


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
