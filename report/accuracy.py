"""Top-1 accuracy from LoadGen's ``mlperf_log_accuracy.json``, the official script's way.

Each entry's ``data`` is the response bytes in hex: one float32, the predicted class. The same
``qsl_idx`` may appear more than once; the first response counts. The label of ``qsl_idx`` is
line ``qsl_idx`` of the val_map the QSL was built from (the run folder keeps a copy of it in QSL
order, so calibration images held out of a folder never shift the lines).

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
    if not isinstance(entries, list) or any(
            not isinstance(e, dict) or "qsl_idx" not in e or "data" not in e for e in entries):
        raise UserError(f"{path} is not a LoadGen accuracy log (a JSON list of "
                        "{seq_id, qsl_idx, data}); pass mlperf_log_accuracy.json")
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
    from quantmark.qsl.imagenet import parse_val_map

    file = Path(path)
    if not file.is_file():
        raise UserError(f"val_map {file} does not exist; pass the val_map.txt the run used")
    items, _ = parse_val_map(file.read_bytes(), file)
    return [label for _, label in items]


def correct_by_sample(folder: str | Path) -> tuple[list[bool], list[int]] | None:
    """Whether each sample (in QSL order) was right in an accuracy run folder, and its label;
    None when the folder lacks its log or val_map."""
    folder = Path(folder)
    log, val_map = folder / "mlperf_log_accuracy.json", folder / "val_map.txt"
    if not log.is_file() or not val_map.is_file():
        return None
    labels = read_val_map_labels(val_map)
    predictions, _ = decode_predictions(log)
    correct = [math.isfinite(p := predictions.get(i, math.nan)) and int(p) == label
               for i, label in enumerate(labels)]
    return correct, labels


def paired_change(baseline: str | Path, candidate: str | Path, by_source_image: bool
                  ) -> AccuracyChange | None:
    """The paired top-1 change from the baseline's accuracy run to the candidate's (same
    samples, same labels), or None when they are not comparable. ``by_source_image``: the
    built-in dataset, whose every class is one photo cropped many times, so the interval
    resamples classes (photos), not crops."""
    from quantmark.report.stats import accuracy_change

    base, cand = correct_by_sample(baseline), correct_by_sample(candidate)
    if base is None or cand is None or base[1] != cand[1]:
        return None
    return accuracy_change(base[0], cand[0], groups=base[1] if by_source_image else None)


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
