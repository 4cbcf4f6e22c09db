"""Do two accuracy runs predict the same classes for the same samples?

Used to prove a port: the same .tflite over the same images on an x86 machine and on an arm64
one (a Pi, or the emulated userland of ``tools/arm_check.sh``) should give the same top-1
class for each sample. Where they do not, the samples that differ are listed with both
classes, so the difference is quantified, not hidden in an accuracy figure. Samples are matched
by image (the val_map.txt in each log's run folder), never by ``qsl_idx``: a run that held
calibration images out numbers the same images differently.

    python -m quantmark.report.agreement X86_ACCURACY_LOG ARM_ACCURACY_LOG [--min-percent 100]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.report.accuracy import RunSamples, pair, run_samples


@dataclass
class Agreement:
    """Per-sample comparison of two runs over the same images."""

    same: int
    compared: int
    only_in_one: int  # answered samples whose image the other run did not answer
    differing: list[tuple[str, float, float]] = field(default_factory=list)  # (image, a, b)

    @property
    def percent(self) -> float:
        return 100.0 * self.same / self.compared if self.compared else 0.0

    def line(self) -> str:
        text = f"agreement {self.same}/{self.compared} ({self.percent:.3f}%)"
        if self.only_in_one:
            text += f"; {self.only_in_one} samples in only one log"
        return text


def compare(log_a: str | Path, log_b: str | Path) -> Agreement:
    """Compare the predicted class of every image both accuracy logs answered."""
    found = agree(_samples(log_a), _samples(log_b))
    if found is None:
        raise UserError(f"{log_a} and {log_b} are runs over different datasets (their content "
                        "fingerprints differ, or an image has two labels); compare runs over "
                        "the same images")
    return found


def _samples(log: str | Path) -> RunSamples:
    path = Path(log)
    if not path.is_file():
        raise UserError(f"accuracy log {path} does not exist; pass a run's "
                        "mlperf_log_accuracy.json")
    found = run_samples(path.parent, path)
    if found is None:
        raise UserError(f"{path.parent} has no val_map.txt beside {path.name}; pass the "
                        "accuracy log in its run folder (its val_map says which image each "
                        "sample is)")
    return found


def agree(a: RunSamples, b: RunSamples) -> Agreement | None:
    """Compare two runs' classes on the images both answered; None when they read other
    datasets."""
    pairing = pair(a, b)
    if pairing is None:
        return None
    rows = zip(pairing.images, pairing.rows_a, pairing.rows_b, strict=True)
    differing = [(image, a.answers[i], b.answers[j]) for image, i, j in rows
                 if a.answers[i] != b.answers[j]]
    return Agreement(same=len(pairing.images) - len(differing), compared=len(pairing.images),
                     only_in_one=pairing.left_out, differing=differing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-sample agreement of two accuracy logs.")
    parser.add_argument("log_a", help="mlperf_log_accuracy.json of the reference run")
    parser.add_argument("log_b", help="mlperf_log_accuracy.json of the run to check")
    parser.add_argument("--min-percent", type=float, default=100.0,
                        help="exit 1 below this agreement (default 100: every sample)")
    args = parser.parse_args(argv)
    try:
        result = compare(args.log_a, args.log_b)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.line())
    for image, first, second in result.differing:
        print(f"  {image}: class {first:g} vs {second:g}")
    if not result.compared or result.only_in_one or result.percent < args.min_percent:
        print(f"below the required {args.min_percent:g}% (or samples missing)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
