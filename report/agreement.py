"""Do two accuracy runs predict the same classes for the same samples?

Used to prove a port: the same .tflite over the same images on an x86 machine and on an arm64
one (a Pi, or the emulated userland of ``tools/arm_check.sh``) should give the same top-1
class for each sample. Where they do not, the samples that differ are listed with both
classes, so the difference is quantified, not hidden in an accuracy figure.

    python -m quantmark.report.agreement X86_ACCURACY_LOG ARM_ACCURACY_LOG [--min-percent 100]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from quantmark.ground.errors import UserError
from quantmark.report.accuracy import decode_predictions


@dataclass
class Agreement:
    """Per-sample comparison of two runs over the same QSL."""

    same: int
    compared: int
    only_in_one: int  # samples one log has and the other lacks
    differing: list[tuple[int, int, int]] = field(default_factory=list)  # (qsl_idx, a, b)

    @property
    def percent(self) -> float:
        return 100.0 * self.same / self.compared if self.compared else 0.0

    def line(self) -> str:
        text = f"agreement {self.same}/{self.compared} ({self.percent:.3f}%)"
        if self.only_in_one:
            text += f"; {self.only_in_one} samples in only one log"
        return text


def compare(log_a: str | Path, log_b: str | Path) -> Agreement:
    """Compare the predicted class of every sample both accuracy logs hold."""
    return agree(decode_predictions(log_a)[0], decode_predictions(log_b)[0])


def agree(a: dict[int, float], b: dict[int, float]) -> Agreement:
    """Compare two runs' predictions (qsl_idx -> class) on the samples both hold."""
    common = sorted(a.keys() & b.keys())
    differing = [(i, int(a[i]), int(b[i])) for i in common if a[i] != b[i]]
    return Agreement(same=len(common) - len(differing), compared=len(common),
                     only_in_one=len(a.keys() ^ b.keys()), differing=differing)


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
    for index, first, second in result.differing:
        print(f"  sample {index}: class {first} vs {second}")
    if not result.compared or result.only_in_one or result.percent < args.min_percent:
        print(f"below the required {args.min_percent:g}% (or samples missing)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
