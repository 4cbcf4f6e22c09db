"""BENCHMARKS.md, generated from the recorded results in benchmarks/, and the way to add one.

The page holds each figure's current table, per machine, with the command that made it and the
commit; the history of a figure is git's (of benchmarks/ and the page), never the page's.

    python -m quantmark.bench.results_page [--results benchmarks] [--output BENCHMARKS.md]
        [--check]
    python -m quantmark.bench.results_page record FOLDER --command "python run.py sweep ..."
        [--command ...] [--name NAME] [--title TITLE] [--made-at COMMIT [--commit-note TEXT]]
        [--store URL] [--results benchmarks] [--output BENCHMARKS.md]

``record`` takes a finished sweep, results folder or bench output folder (``nms_ops.json``,
``parity.json``), checks its runs with the results store (``--store URL`` records them there
too; by default a scratch store), writes ``benchmarks/<name>.json`` and generates the page
again. A folder whose runs the store's checks do not back is refused in one line (exit 2), and
so is a recorded result whose figures disagree with its runs when the page is generated.
``--made-at`` names the commit the runs were made at; without it the result is labelled with
the commit checked out when it was recorded. ``--check`` writes nothing and exits 1 when the
page is not what the recorded results give.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from quantmark.bench import page_markdown, recorded_result, result_capture
from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text

log = logging.getLogger(__name__)

PAGE = Path("BENCHMARKS.md")


def render(results: Path) -> str:
    """The page the recorded results in ``results`` give (each checked against its runs)."""
    return page_markdown.page(recorded_result.load_all(results))


def generate(results: Path, output: Path, check: bool = False) -> int:
    """Write the page (0), or with ``check`` say whether it is current (0) or not (1)."""
    text = render(results)
    if check:
        if output.is_file() and output.read_text() == text:
            return 0
        log.error("%s is not what %s/ gives; run: %s", output, results,
                  page_markdown.GENERATE)
        return 1
    atomic_write_text(output, text)
    log.info("wrote %s from %d recorded result(s) in %s/", output,
             len(list(results.glob("*.json"))), results)
    return 0


def record(args: argparse.Namespace) -> int:
    """Record ``args.folder`` and generate the page again."""
    source = Path(args.folder)
    data = result_capture.capture(source, args.command, args.made_at, args.commit_note,
                                  args.title, args.store)
    name = args.name or (source.parent.name if source.is_file() else source.resolve().name)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UserError(f"--name {name!r}: a recorded result's name is a file name (letters, "
                        "digits, '.', '_', '-')")
    results = Path(args.results)
    data = json.loads(recorded_result.dumps(data))  # as the page will read it
    recorded_result.checked(data, results / f"{name}.json")  # what the page checks, now
    results.mkdir(parents=True, exist_ok=True)
    path = recorded_result.save(results, name, data)
    log.info("recorded %s as %s (%s %s)", source, path, data["commit"]["basis"],
             data["commit"]["rev"][:7])
    return generate(results, Path(args.output))


def _parser(recording: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m quantmark.bench.results_page" + (" record" if recording else ""),
        description=__doc__.splitlines()[0])
    if recording:
        parser.add_argument("folder", help="a finished sweep, results folder or bench output")
        parser.add_argument("--command", action="append", default=[],
                            help="the command line that made it (again for each command)")
        parser.add_argument("--name", help="the recorded result's name (default: the folder's)")
        parser.add_argument("--title", default="", help="its heading on the page")
        parser.add_argument("--made-at", help="the commit its runs were made at")
        parser.add_argument("--commit-note", default="", help="how that commit is known")
        parser.add_argument("--store", help="a results store to record its runs into too")
    else:
        parser.add_argument("--check", action="store_true",
                            help="write nothing; exit 1 when the page is not current")
    parser.add_argument("--results", default=str(recorded_result.RESULTS_DIR))
    parser.add_argument("--output", default=str(PAGE))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    recording = bool(argv) and argv[0] == "record"
    args = _parser(recording).parse_args(argv[1:] if recording else argv)
    try:
        if recording:
            return record(args)
        return generate(Path(args.results), Path(args.output), args.check)
    except UserError as exc:
        log.error("%s", exc)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
