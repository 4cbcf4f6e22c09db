"""MLPerf Inference's quality targets for its yolo (YOLOv11) benchmark, and the check of a run.

The figures are data copied from MLCommons' submission checker, which is what decides a closed
submission: repository mlcommons/inference, file
``tools/submission/submission_checker/constants.py`` (round "v6.0"), entries
``"accuracy-target": {"yolo-95": ("mAP", 53.4 * 0.95), "yolo-99": ("mAP", 53.4 * 0.99)}`` and
``"dataset-size": {"yolo-95": 1525, "yolo-99": 1525}``. The checker reads every line of
accuracy.txt matching ``mAP=`` and requires each to be >= the target (percent).

The 1525 images are the benchmark's "coco_safe" subset of COCO val2017 (the licence-compliant
images; see ``vision/classification_and_detection/yolo/README.md`` in the same repository), not
the 5000 of full val2017. The constants name no model variant; 53.4 is the COCO mAP Ultralytics
publishes for YOLO11l, which is our reading, not the checker's word. A target therefore means
something only for that workload: other datasets (or another image count) are reported "target
not applicable", with the reason.

Beyond MLPerf's point comparison, a check given an interval of the measured mAP says whether
the target is met or broken with that confidence, or that the run cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass

from quantmark.ground.errors import UserError

SOURCE = ("mlcommons/inference tools/submission/submission_checker/constants.py "
          "(v6.0 accuracy-target yolo-99/yolo-95)")
REFERENCE_MAP = 53.4  # percent, mAP@[.5:.95] (pycocotools, bbox)
FRACTIONS = {"yolo-99": 0.99, "yolo-95": 0.95}
OFFICIAL_IMAGES = 1525  # the checker's dataset-size: the coco_safe subset of val2017


@dataclass(frozen=True)
class TargetCheck:
    """A run's mAP against one MLPerf target (all figures in percent). ``met`` is MLPerf's
    rule, measured >= threshold; ``verdict`` adds the interval's view when one is known."""

    name: str
    reference: float
    fraction: float
    threshold: float
    measured: float
    met: bool
    low: float | None = None
    high: float | None = None
    applies: bool = True
    reason: str = ""  # why the target does not apply

    @property
    def verdict(self) -> str | None:
        """"met" (the whole interval is at or above the threshold), "broken" (all below),
        "cannot tell" (it straddles), or None without an interval or when not applicable."""
        if not self.applies or self.low is None or self.high is None:
            return None
        if self.low >= self.threshold:
            return "met"
        if self.high < self.threshold:
            return "broken"
        return "cannot tell"

    def line(self) -> str:
        """One line for accuracy.txt and the console (never containing ``mAP=``: the checker
        would read it as a second result)."""
        if not self.applies:
            return f"target {self.name}: not applicable ({self.reason})"
        state = "met" if self.met else "NOT met"
        text = (f"target {self.name}: {self.threshold:.3f} ({self.fraction:.0%} of reference "
                f"{self.reference}) {state}, measured {self.measured:.3f}")
        if self.verdict is not None:
            text += f"; interval [{self.low:.3f}, {self.high:.3f}]: {self.verdict}"
        return text


def _fraction(name: str) -> float:
    if name not in FRACTIONS:
        raise UserError(f"unknown MLPerf yolo target {name!r}; pass one of "
                        f"{', '.join(FRACTIONS)}")
    return FRACTIONS[name]


def check(measured: float, name: str = "yolo-99",
          interval: tuple[float, float] | None = None) -> TargetCheck:
    """Check ``measured`` mAP (percent) against target ``name``; ``interval`` (low, high) in
    percent, when known, gives the verdict by confidence."""
    fraction = _fraction(name)
    threshold = REFERENCE_MAP * fraction
    low, high = interval if interval is not None else (None, None)
    return TargetCheck(name, REFERENCE_MAP, fraction, threshold, measured,
                       measured >= threshold, low, high)


def not_applicable(measured: float, reason: str, name: str = "yolo-99") -> TargetCheck:
    """A check recorded as not applicable, saying why (the report still shows the target)."""
    fraction = _fraction(name)
    return TargetCheck(name, REFERENCE_MAP, fraction, REFERENCE_MAP * fraction, measured,
                       False, applies=False, reason=reason)


def applicability(is_coco_val2017: bool, images: int) -> str | None:
    """Why MLPerf's yolo target does not apply to a workload, or None when it does: the
    target is for COCO val2017's 1525-image coco_safe subset (the caller knows the dataset
    by its fingerprint; the reference model is the caller's to say)."""
    if not is_coco_val2017:
        return ("MLPerf's yolo target is set on COCO val2017 (its 1525-image coco_safe "
                "subset); this dataset is another")
    if images != OFFICIAL_IMAGES:
        return (f"MLPerf's yolo target is set on the {OFFICIAL_IMAGES}-image coco_safe "
                f"subset of COCO val2017; this run scored {images} images")
    return None


def check_workload(measured: float, is_coco_val2017: bool, images: int,
                   name: str = "yolo-99",
                   interval: tuple[float, float] | None = None) -> TargetCheck:
    """``check`` where the workload is MLPerf's, ``not_applicable`` (with why) elsewhere."""
    reason = applicability(is_coco_val2017, images)
    if reason is not None:
        return not_applicable(measured, reason, name)
    return check(measured, name, interval)
