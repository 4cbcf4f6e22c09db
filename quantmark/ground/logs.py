"""How quantmark's log lines look: ``[quantmark.<part>] message`` on stderr, one logger per
module under its part's logger (``quantmark.qsl.cache`` under ``quantmark.qsl``), so a user
can tell which part speaks and silence one with the standard ``logging`` machinery.

The CLI draws them with rich when stderr is a terminal; the test process (and anything not a
terminal, e.g. a sweep cell's log file) gets plain lines, never wrapped, so they can be read back.
"""

from __future__ import annotations

import logging
import sys

PART_DEPTH = 2  # "quantmark.qsl.cache" is spoken by the part "quantmark.qsl"


class PartFormatter(logging.Formatter):
    """``[quantmark.qsl] preprocessing ...``; warnings and errors say so after the part."""

    def format(self, record: logging.LogRecord) -> str:
        part = ".".join(record.name.split(".")[:PART_DEPTH])
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        return f"[{part}] {level}{record.getMessage()}"


def setup(level: int = logging.INFO) -> None:
    """Send quantmark's records to stderr (rich on a terminal, plain lines elsewhere), and only
    there. Called by the programs quantmark owns (the CLI, the test process); a host
    application that imports quantmark without calling it gets the records through its own
    root handlers as usual. Other libraries keep their handlers; calling this twice changes
    nothing."""
    root = logging.getLogger("quantmark")
    if any(getattr(h, "_quantmark", False) for h in root.handlers):
        return
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(show_time=False, show_level=False, show_path=False,
                              markup=False, rich_tracebacks=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PartFormatter())
    handler._quantmark = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    # only here: frameworks (ONNX Runtime's quantizer, for one) call logging.basicConfig, and
    # the root's handler would print every line a second time
    root.propagate = False
