"""Where the results store is chosen, in names that need no SQLAlchemy: the verbs declare
their ``--store`` flag with these at every ``run.py`` start, so this module stays light."""

from __future__ import annotations

import os

STORE_VARIABLE = "QUANTMARK_STORE"
TAGS_VARIABLE = "QUANTMARK_TAGS"  # comma-separated tags for every job this process records
OFF = "off"
DEFAULT_FILE = "results.sqlite"
STORE_HELP = (f"the results store: a PostgreSQL URL (postgresql+psycopg://USER@HOST/DB), "
              f"sqlite:///PATH or a file path (default ${STORE_VARIABLE}, else "
              f"<cache>/store/{DEFAULT_FILE}; {STORE_VARIABLE}=off records nothing)")


def store_off() -> bool:
    """``$QUANTMARK_STORE=off``: record nothing."""
    return os.environ.get(STORE_VARIABLE, "").strip().lower() == OFF


def env_tags() -> tuple[str, ...]:
    """``$QUANTMARK_TAGS``, split."""
    return tuple(t.strip() for t in os.environ.get(TAGS_VARIABLE, "").split(",") if t.strip())
