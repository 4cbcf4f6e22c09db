"""Faults of the machine or of the folders (disk full, permissions, a file in the way), named
as what they are, with the fix that moves them: ``--output`` for the results tree,
$QUANTMARK_CACHE for the cache.

Apart from ``errors`` (the exceptions), which everything, ``paths`` included, imports: naming a
fault needs to know where the cache is (``paths``).
"""

from __future__ import annotations

import errno
from pathlib import Path

from quantmark.ground.paths import in_cache

# Faults of the machine or of the folders, not of the SUT: each is named as what it is.
_ENVIRONMENT = {
    errno.ENOSPC: "no space left on the disk writing {path}; free space there or pass --output "
                  "to another file system",
    errno.EDQUOT: "disk quota exceeded writing {path}; free space there or pass --output to "
                  "another file system",
    errno.EFBIG: "file size limit reached writing {path} (ulimit -f); raise the limit and rerun",
    errno.EROFS: "{path} is on a read-only file system; pass --output to a writable folder",
    errno.EACCES: "permission denied on {path}; fix its permissions or pass --output to a "
                  "folder you can write",
    errno.EPERM: "operation not permitted on {path}; fix its permissions or pass --output to a "
                 "folder you can write",
    errno.ENOTDIR: "a file is in the way inside the results tree at {path} (a folder is "
                   "needed); move it away or pass another --output",
    errno.EEXIST: "a file is in the way inside the results tree at {path} (a folder is "
                  "needed); move it away or pass another --output",
    errno.EISDIR: "a folder is in the way at {path} (a file is needed); move it away or pass "
                  "another --output",
}


# The same faults in quantmark's cache ($QUANTMARK_CACHE): --output would not move it.
_CACHE_FIX = "set QUANTMARK_CACHE to a folder you can write (default ~/.cache/quantmark)"
_CACHE = {
    errno.ENOSPC: "no space left on the disk writing {path} in quantmark's cache; free space "
                  "there or " + _CACHE_FIX.replace("a folder", "a folder on another disk"),
    errno.EDQUOT: "disk quota exceeded writing {path} in quantmark's cache; free space there "
                  "or " + _CACHE_FIX.replace("a folder", "a folder on another disk"),
    errno.EROFS: "{path} is on a read-only file system, and quantmark's cache is written "
                 "there; " + _CACHE_FIX,
    errno.EACCES: "permission denied on {path} in quantmark's cache; fix its permissions or "
                  + _CACHE_FIX,
    errno.EPERM: "operation not permitted on {path} in quantmark's cache; fix its permissions "
                 "or " + _CACHE_FIX,
    errno.ENOTDIR: "a file is in the way at {path}, where quantmark's cache needs a folder; "
                   "move it away or " + _CACHE_FIX,
    errno.EEXIST: "a file is in the way at {path}, where quantmark's cache needs a folder; "
                  "move it away or " + _CACHE_FIX,
    errno.EISDIR: "a folder is in the way at {path} in quantmark's cache (a file is needed); "
                  "move it away or " + _CACHE_FIX,
}


def environment_fault(exc: BaseException) -> str | None:
    """The one-line description of an OSError that the machine or the folders caused (disk
    full, permissions, a file in the way), or None for any other error. A fault in the cache
    names $QUANTMARK_CACHE as the fix, one in the results tree --output."""
    if not isinstance(exc, OSError) or exc.errno not in _ENVIRONMENT:
        return None
    if exc.filename is not None and exc.errno in _CACHE:
        if in_cache(str(exc.filename)):
            path = str(exc.filename)
            if exc.errno in (errno.ENOTDIR, errno.EEXIST):
                path = _first_file_on(path)
            return _CACHE[exc.errno].format(path=path)
    path = str(exc.filename) if exc.filename is not None else "a result file"
    if exc.errno in (errno.ENOTDIR, errno.EEXIST) and exc.filename is not None:
        path = _first_file_on(path)
    elif exc.filename2 is not None:
        path = f"{path} -> {exc.filename2}"
    return _ENVIRONMENT[exc.errno].format(path=path)


def _first_file_on(path: str) -> str:
    """The file that stands where a folder of ``path`` should be (itself if none is found)."""
    parts = Path(path).parts
    for end in range(1, len(parts) + 1):
        candidate = Path(*parts[:end])
        if candidate.exists() and not candidate.is_dir():
            return str(candidate)
    return path
