"""Whether folders hold anything the characterization report shows, decided before a file of
it is written: a refused report (exit 2) must leave nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantmark.ground.errors import UserError
from quantmark.ground.metric import TOP1
from quantmark.report import quality
from quantmark.report.characterize import Study


def require_reportable(study: Study, records: list[Any], folders: list[str | Path]) -> None:
    """UserError unless ``study`` has performance runs, explained cells, train-bench results
    or ``records`` (``run.py diagnose``'s, ``run.py profile``'s and ``run.py recommend``'s).
    Accuracy runs alone have no row in the report (their figure, in their task's metric, sits
    in a performance run's row), so a folder of only those is refused, naming them."""
    if study.configs or study.explained or study.training or records:
        return
    where = ", ".join(str(folder) for folder in folders)
    names = " / ".join(m.name for m in quality.in_order(
        record.get("metric", TOP1) for record in study.accuracy.values()))
    found = (f" (only {len(study.accuracy)} accuracy run(s): their {names} is in each "
             "accuracy.txt, and a report row needs a performance run)" if study.accuracy else "")
    raise UserError(f"no LoadGen runs (mlperf_log_detail.txt), train-bench results, diagnoses, "
                    f"profiles or recommendations under {where}{found}; no report was written: "
                    "run performance tests too, or drop --output to list the folder")
