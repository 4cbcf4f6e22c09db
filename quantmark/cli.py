"""quantmark's command line: argv -> the verb's own flags -> that verb's ``main``.

``run.py`` at the top of the repository and the ``quantmark`` console script both call ``main``.
Each verb is one module of ``quantmark.commands`` (found, not listed: see that package), which
declares its flags; the verb runs through the Python API where it answers it
(``quantmark.api.command_line``: the same call ``quantmark.run(...)`` makes), else through the
verb's own ``main``. This module only picks the verb and turns what goes wrong into one line
and an exit code. ``run`` is the verb when none is named, so these all work::

    python run.py                                   # the built-in default job
    python run.py --scenario Offline --sut ort-int8 [--model resnet50] ...
    python run.py --official --all-tests --scenario Offline --sut ort-int8 --model resnet50
    python run.py --audit TEST01 --scenario Offline --sut ort-int8   # one compliance test
    python run.py --scenario Offline --sut ort-int8 --repeats 5   # median and 95% interval
    python run.py --list-suts
    python run.py sweep --models resnet50 --suts ort-fp32,ort-int8 --output DIR   # or FILE
    python run.py report DIR [DIR ...] [--output DIR]
    python run.py compare RESULTS_A RESULTS_B        # ratio of two sets of runs, with interval
    python run.py VERB --help                        # each verb's flags

Exit codes: 0 done, 1 a verb's own "finished, but not everything passed", 2 bad input or
environment (one line), 3 the SUT failed (one line), 130 interrupted.
"""

from __future__ import annotations

import sys

from quantmark.api import command_line
from quantmark.commands.parsing import DEFAULT_VERB, build_parser, parse
from quantmark.ground import logs
from quantmark.ground.errors import SutError, UserError
from quantmark.ground.faults import environment_fault

__all__ = ["DEFAULT_VERB", "build_parser", "main", "parse"]


def main(argv: list[str] | None = None) -> int:
    """Run the verb; its exit code, or 2/3/130 with one line on stderr."""
    logs.setup()
    argv = sys.argv[1:] if argv is None else argv
    try:
        verb, args = parse(argv)
        return command_line.main(verb, args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SutError as exc:
        print(f"SUT failed: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; the one in progress was discarded",
              file=sys.stderr)
        return 130
    except OSError as exc:  # disk full, permissions, a file in the way: named, not a traceback
        fault = environment_fault(exc)
        if fault is None:
            raise
        print(f"error: {fault}", file=sys.stderr)
        return 2
