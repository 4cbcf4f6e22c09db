"""Stable hashes for cache keys and fingerprints, and atomic writes for results."""

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def hash_json(obj: Any, length: int = 16) -> str:
    """Hash of a JSON-serialisable object, independent of dict order."""
    data = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()[:length]


def hash_file(path: str | os.PathLike, length: int = 16) -> str:
    """SHA-256 of a file's bytes (streamed)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]


def _default_file_mode() -> int:
    """What open() would give a new file under this process's umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_FILE_MODE = _default_file_mode()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write via a temp file in the same folder and rename: readers never see half a file.
    The file gets the usual permissions, so results and submission trees can be shared."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
