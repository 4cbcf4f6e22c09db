"""``run.py report DIR [DIR ...] [--output DIR]``: tables of results folders. A sweep folder,
several folders (merged) or any folder with ``--output``: the characterization report
(Markdown, CSV, HTML with figures), as is a folder holding train-bench results. One plain
results folder: its percentile table (CSV, Markdown). Diagnoses, profiles and recommendations
under the folders: their tables. ``run.py report --store [URL] --output DIR``: the results
store's dashboard instead (``quantmark.store.dashboard``).

Every figure shown is LoadGen's, from the runs' logs (``report.logged_run``): a run whose
results.json says otherwise is named in one line, and the report exits 1.

The report's statistics (scipy), figures (matplotlib) and the store (SQLAlchemy) are imported
when a report is made:
the lean install, which has neither, must still start every other verb."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from rich.markup import escape

from quantmark.commands import options
from quantmark.ground.errors import UserError
from quantmark.report import console_tables as tables
from quantmark.report import diagnosis_section as diagnosis
from quantmark.report import profile_section, recommend_section, training
from quantmark.run.checks import check_output_writable

NAME = "report"
HELP = "tables (and, for sweeps, figures and HTML) of results folders"

console = tables.make_console()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folders", nargs="*", help="results or sweep folders; several merge")
    options.output(parser, default=None, help="where the characterization report goes "
                                              "(default: the sweep folder, when there is one); "
                                              "with --store, the dashboard's folder")
    parser.add_argument("--store", nargs="?", const="", metavar="URL",
                        help="instead of folders, the results store's dashboard: one "
                             "self-contained HTML page (dashboard.html in --output) of every "
                             "series' latest figure, trend and regress verdict (URL default: "
                             "$QUANTMARK_STORE, else the SQLite file in the cache)")


def main(args: argparse.Namespace) -> int:
    if args.store is not None:
        store_dashboard(args.store or None, args.folders, args.output)
    elif not args.folders:
        raise UserError("report: pass results or sweep folders, or --store [URL] --output DIR "
                        "for the results store's dashboard")
    else:
        return 1 if report(args.folders, args.output) else 0
    return 0


def store_dashboard(url: str | None, folders: list[str], output: str | None) -> None:
    """Write the results store's dashboard into ``output`` (regressions first)."""
    if folders:
        raise UserError("report --store draws the results store, not folders: pass either "
                        "folders or --store")
    if output is None:
        raise UserError("report --store: say where the dashboard goes with --output DIR")
    check_output_writable(output)
    # scipy, matplotlib and SQLAlchemy: see the module's docstring
    from quantmark.store.dashboard import write_store_dashboard

    written, verdicts = write_store_dashboard(url, output)
    regressed = sum(v.outcome == "regressed" for v in verdicts)
    console.print(f"dashboard of {len(verdicts)} series ({regressed} regressed) written to "
                  f"{escape(str(written))}")


def report(folders: list[str], output: str | None = None) -> int:
    """The characterization report or the percentile table of ``folders`` (see the module),
    then the tables of the diagnoses, profiles and recommendations among them; how many runs'
    results.json disagree with their LoadGen logs."""
    for folder in folders:
        if not Path(folder).is_dir():
            raise UserError(f"report folder {folder} does not exist; pass a results or sweep "
                            "folder")
    is_sweep = any((Path(f) / "sweep.json").is_file() for f in folders)
    if len(folders) > 1 and output is None:
        raise UserError("several folders merge into one report: say where with --output DIR")
    diagnoses, profiles = diagnosis.load(folders), profile_section.load(folders)
    recommendations = recommend_section.load(folders)
    disagreeing = 0
    if is_sweep or len(folders) > 1 or output is not None or training.load(folders):
        disagreeing = characterization(folders, Path(output or folders[0]),
                                       bool(profiles or recommendations))
    elif not (diagnoses or profiles or recommendations) \
            or any(Path(folders[0]).rglob("mlperf_log_detail.txt")):
        disagreeing = percentile_table(folders[0])
    for record in diagnoses:  # run.py diagnose's folders: their tables (and in the report)
        tables.print_diagnosis(console, record)
    tables.print_agreement(console, diagnoses)
    profile_section.print_profiles(console, profiles)  # run.py profile's, likewise
    recommend_section.print_recommendations(console, recommendations)  # run.py recommend's
    return disagreeing


def characterization(folders: list[str], output: Path, profiles: bool = False) -> int:
    """Write the characterization report of ``folders`` into ``output`` and print its tables
    (``profiles``: the folders hold profiles or recommendations, a report of their own); how
    many runs' results.json disagree with their LoadGen logs."""
    if importlib.util.find_spec("matplotlib") is None:  # the lean Raspberry Pi install
        raise UserError("the characterization report draws its figures with matplotlib, which is "
                        "not installed: pip install 'quantmark[data]', or copy the folders to a "
                        "machine that has it and run python run.py report there")
    # scipy and matplotlib: see the module's docstring
    from quantmark.report.console_reports import print_characterization
    from quantmark.report.sweep_report import write

    check_output_writable(str(output))
    written = write(folders, output)
    study = written.study
    if not (study.configs or study.explained or study.training or written.diagnoses
            or profiles):
        raise UserError(f"no LoadGen runs (mlperf_log_detail.txt), train-bench results, "
                        f"diagnoses, profiles or recommendations under {', '.join(folders)}")
    print_characterization(console, folders, study)
    names = ", ".join(p.name for p in written.files if p.parent == output)
    console.print(f"written to {escape(str(output))}: {names} and "
                  f"{sum(p.suffix == '.png' for p in written.files)} figures")
    return len(study.disagreements)


def percentile_table(folder: str) -> int:
    """Write (CSV, Markdown) and print the percentile table of every run under ``folder``; how
    many runs' results.json disagree with their LoadGen logs."""
    # scipy: see the module's docstring
    from quantmark.report.console_reports import print_percentiles
    from quantmark.report.run_table import write_report

    rows, csv_path, md_path = write_report(Path(folder))
    if not rows:
        raise UserError(f"no LoadGen runs (mlperf_log_detail.txt) under {folder}")
    print_percentiles(console, folder, rows, csv_path, md_path)
    return sum(bool(row.disagrees) for row in rows)
