"""A task's paired change reads as classification's: its interval, its verdict, and the
change its evaluation set can resolve."""

from __future__ import annotations

import pytest

from quantmark.tasks.contract import QualityChange


def test_a_tasks_change_says_what_its_set_resolves() -> None:
    change = QualityChange(-0.84, -1.90, 0.21, 360, 360, "bootstrap over images", "mAP@[.5:.95]")
    assert change.verdict == "no measurable change"
    assert change.resolves == pytest.approx(1.055)
    assert change.text() == ("-0.84 pt mAP@[.5:.95] [-1.90, +0.21] over 360 images, bootstrap "
                             "over images: no measurable change; the set resolves ±1.1 pt")
    worse = QualityChange(-3.0, -4.0, -2.0, 50, 50, "paired bootstrap", "cosine %",
                          units="sentences")
    assert worse.text().endswith("over 50 sentences, paired bootstrap: worse; the set "
                                 "resolves ±1 pt")
