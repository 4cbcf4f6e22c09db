"""Where quantmark keeps caches: $QUANTMARK_CACHE, else ~/.cache/quantmark."""

import os
from pathlib import Path


def cache_root() -> Path:
    """Root of every cache (datasets, preprocessed arrays, model artifacts)."""
    root = os.environ.get("QUANTMARK_CACHE") or os.path.join(Path.home(), ".cache", "quantmark")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(kind: str) -> Path:
    """A named sub-cache, e.g. ``cache_dir("models")``."""
    path = cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` still running? Tells an abandoned temp file from one in progress."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
