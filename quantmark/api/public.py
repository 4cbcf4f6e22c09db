"""quantmark's Python API: the CLI's jobs as calls, with the flags as keyword arguments and
typed answers. Each LoadGen test still runs in its own process, as from ``run.py``; bad input
raises ``quantmark.UserError`` with the CLI's one line (``exit_code`` 2), a failed SUT
``quantmark.SutError`` (3).

    import quantmark as qm
    r = qm.run(scenario="Offline", sut="ort-int8", model="digits-cnn")
    print(r.figure, r.unit, r.interval, r.valid)
    qm.sweep(models="digits-cnn", suts="ort-fp32,ort-int8", scenarios="Offline",
             output="sweep").to_frame()

Nothing is printed unless ``show=True`` (then the CLI's tables are). ``run.py`` calls the
same functions (``quantmark.api.answers``) with ``show=True``; each answer's ``exit_code`` is
the one ``run.py`` exits with.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from quantmark.api import answers
from quantmark.api.flags import arguments

if TYPE_CHECKING:
    from quantmark.api.results import (
        Comparison,
        History,
        Recommendation,
        Regression,
        RunResult,
        SweepResult,
    )
    from quantmark.ground.records import DiagnosisRecord, ProfileRecord


def run(*, show: bool = False, **flags: Any) -> RunResult:
    """One LoadGen test in its own process (``repeats=N``: N of them, with the median's
    interval), as ``run.py --scenario S --sut X ...`` runs it.

    ``flags``: ``run.py``'s, by name (``scenario``, ``sut``, ``model``, ``mode``,
    ``batch_size``, ``repeats``, ``output`` ...). Returns the runs' records and, from LoadGen's
    logs, the figure, its unit, its interval and whether every run was VALID."""
    return answers.run(arguments("run", "run", flags), show)


def compare(a: str | Path, b: str | Path, *, paired: bool = False,
            show: bool = False) -> Comparison:
    """How many times faster the runs under ``b`` are than those under ``a``, from LoadGen's
    logs, with the interval and verdict ``run.py compare A B`` prints."""
    return answers.compare(arguments("compare", "compare",
                                     {"a": str(a), "b": str(b), "paired": paired}), show)


def sweep(*, show: bool = False, **flags: Any) -> SweepResult:
    """Run (or resume) a sweep as ``run.py sweep`` does, cells in their own processes, and
    write its report; ``.to_frame()`` is the report's table."""
    return answers.sweep(arguments("sweep", "sweep", flags), show)


def history(*, show: bool = False, **flags: Any) -> History:
    """Each matching series' figures over time from the results store (``store`` its URL,
    ``model``, ``sut``, ``since`` ... its filters; ``plot`` a PNG to draw the trend in);
    empty with ``nothing`` saying why when nothing matched."""
    return answers.history(arguments("history", "history", flags), show)


def regress(*, show: bool = False, **flags: Any) -> Regression:
    """Did the newest job of each selected series regress against its baseline: the verdicts
    ``run.py regress`` prints (``.regressed``: those that did; ``json``: also written
    there)."""
    return answers.regress(arguments("regress", "regress", flags), show)


def recommend(*, show: bool = False, **flags: Any) -> Recommendation:
    """Search the SUTs and settings as ``run.py recommend`` does (resumable: the same call
    continues a search) and answer which to deploy. Not on a fleet (``cluster``): that is
    ``run.py recommend --cluster``."""
    return answers.recommend(arguments("recommend", "recommend", flags), show)


def profile(*, show: bool = False, **flags: Any) -> ProfileRecord:
    """Where a SUT's time goes, layer by layer, against its reference (``run.py profile``);
    the record its folder holds."""
    return answers.profile(arguments("profile", "profile", flags), show)


def diagnose(*, show: bool = False, **flags: Any) -> DiagnosisRecord:
    """Where an INT8 SUT loses precision against its framework's FP32, layer by layer, and
    (``recover=K``) the way back (``run.py diagnose``); the record its folder holds."""
    return answers.diagnose(arguments("diagnose", "diagnose", flags), show)
