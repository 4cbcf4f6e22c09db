"""Where quantmark keeps caches ($QUANTMARK_CACHE, else ~/.cache/quantmark), and checks of the
paths and names a user gives (a file that is a directory, a name that escapes its folder)."""

import errno
import os
import stat
from pathlib import Path

CACHE_VARIABLE = "QUANTMARK_CACHE"


def cache_location() -> Path:
    """Where the cache is (or would be made): $QUANTMARK_CACHE, else ~/.cache/quantmark."""
    root = os.environ.get(CACHE_VARIABLE) or os.path.join(Path.home(), ".cache", "quantmark")
    return Path(root)


def in_cache(path: str | Path) -> bool:
    """Is ``path`` the cache, inside it, or (with $QUANTMARK_CACHE set) one of the folders it
    would be made in? An OSError there is fixed with $QUANTMARK_CACHE, not --output."""
    root = cache_location().absolute()
    where = Path(os.path.abspath(path))
    if where == root or root in where.parents:
        return True
    return bool(os.environ.get(CACHE_VARIABLE)) and where in root.parents \
        and where != Path(where.anchor)


def cache_root() -> Path:
    """Root of every cache (datasets, preprocessed arrays, model artifacts). A file in its
    place, or a folder that cannot be written, raises the OSError ``environment_fault``
    names with the $QUANTMARK_CACHE fix."""
    path = cache_location()
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


# ---------------------------------------------------------------- checking a user's path
def path_problem(path: str | Path, want: str = "file") -> str | None:
    """What keeps ``path`` from being read as a ``want`` ("file" or "folder"), in a few words
    ("does not exist", "is a directory", "is a symlink loop", ...); None when nothing does.

    One place says it, so every flag names the same problem the same way instead of calling a
    directory or a symlink loop "missing".
    """
    try:
        info = os.stat(path)
    except OSError as exc:
        return _stat_problem(Path(path), exc)
    if want == "folder":
        if stat.S_ISDIR(info.st_mode):
            return None
        return "is a file" if stat.S_ISREG(info.st_mode) else "is not a folder"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _stat_problem(path: Path, exc: OSError) -> str:
    """``os.stat``'s failure in words."""
    if exc.errno == errno.ELOOP:
        return "is a symlink loop"
    if exc.errno == errno.ENOENT and path.is_symlink():
        return f"is a broken symlink (to {os.readlink(path)}, which does not exist)"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "does not exist"
    if exc.errno == errno.EACCES:
        return "cannot be read (permission denied)"
    return f"cannot be read ({exc.strerror or exc})"


def require_path(path: str | Path, what: str, fix: str, want: str = "file") -> None:
    """Raise a one-line UserError ``"<what> <path> <problem>; <fix>"`` unless ``path`` can be
    read as a ``want`` ("file" or "folder")."""
    from quantmark.ground.errors import UserError

    problem = path_problem(path, want)
    if problem is not None:
        raise UserError(f"{what} {path} {problem}; {fix}")


#: what a name that becomes one folder or file name may not hold
_UNSAFE_CHARACTERS = frozenset("/\\\0")


def component_problem(name: str) -> str | None:
    """Why ``name`` cannot be used as ONE path component (a folder or file name) without
    escaping the folder it is joined to; None when it can."""
    if not name or not name.strip():
        return "is empty"
    if name in (".", ".."):
        return f"is '{name}', which names a folder relative to another"
    if any(c in _UNSAFE_CHARACTERS or ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a path separator or a control character"
    if name.startswith("."):
        return "starts with '.' (a hidden folder)"
    if name != name.strip():
        return "starts or ends with a blank"
    if len(name.encode()) > 255:
        return "is longer than 255 bytes"
    return None


def require_component(name: str, what: str) -> str:
    """``name`` when it is a safe single path component; otherwise a one-line UserError."""
    from quantmark.ground.errors import UserError

    problem = component_problem(name)
    if problem is not None:
        raise UserError(f"{what} {name!r} {problem}; it becomes a folder name: use letters, "
                        "digits, spaces, '.', '_' or '-' (no '/')")
    return name
