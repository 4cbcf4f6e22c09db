"""Model artifacts and their on-disk cache.

Layout: ``cache_dir("models")/<model>/<key>/{<file>, artifact.json}``. ``artifact.json`` is
written last, so a folder without it is an interrupted build and is rebuilt. A build happens
in a private temp folder that is renamed into place, so two processes racing on the same key
never see each other's half-written files: the loser discards its copy and uses the winner's.

Verified, not trusted: at build time the manifest records the sha256 of every file of the
folder (``meta["files"]``: an OpenVINO .xml and its .bin, a SavedModel's variables, not just
the file ``path`` names). Every load hashes them again and a mismatch (zeroed bytes, a truncated
file, a missing one) is logged on one line and rebuilt. Whole-file sha256 is cheap here: it runs
at ~2 GB/s per core with SHA extensions (0.3-0.5 GB/s without), and artifacts are 5-100 MB, so
a load pays 5-50 ms. ``meta["verified_sha256"]`` is the digest checked on this load (of the
file, or of the file list for a folder artifact), which results.json then carries.

The manifest is verified too: the backends read ``label_offset``, the layout and the input names
from it, so ``"label_offset": 0`` edited to ``1`` would score 0 % with nothing pointing at the
cache. It carries ``manifest_sha256``, the hash of all its other fields, and a manifest whose
fields no longer hash to it (or that lacks it, is unreadable or is missing from a built folder)
is rebuilt with the same one warning line as a damaged model file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quantmark.ground.hashing import atomic_write_json, hash_file, hash_json
from quantmark.ground.paths import cache_dir

log = logging.getLogger(__name__)


def progress(msg: str) -> None:
    """One progress line for a slow, one-off build step (export, convert, quantize)."""
    log.info(msg)


MANIFEST = "artifact.json"
SCHEMA = 1
MANIFEST_HASH = "manifest_sha256"  # the manifest's own field: hash_json of all its others


@dataclass
class Artifact:
    """A runnable model file plus where it came from and what it cost to make."""

    path: Path
    format: str  # "onnx"
    precision: str  # "fp32" | "int8"
    key: str  # cache key (hash of everything that determines the file)
    weights: str  # human description of the weights
    source_hash: str  # hash of the input it was made from (weights, fp32 file, user file)
    times: dict[str, float] = field(default_factory=dict)  # seconds: export_s, quantize_s ...
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = self.path.name  # relative: the cache folder may move
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], folder: Path) -> Artifact:
        fields = {k: v for k, v in data.items() if k not in ("schema", MANIFEST_HASH)}
        fields["path"] = folder / data["path"]
        return cls(**fields)


def artifact_size_bytes(artifact: Artifact) -> int:
    """Bytes on disk of what the SUT loads: every file of the artifact's cache folder (an
    OpenVINO .xml has its .bin, a SavedModel is a folder) but the manifest; for a file outside
    the cache (the user's model) the file itself, with an OpenVINO .bin beside it."""
    path = Path(artifact.path)
    folder = path if path.is_dir() else path.parent
    if (folder / MANIFEST).is_file():
        return sum(f.stat().st_size for f in folder.rglob("*")
                   if f.is_file() and f.name != MANIFEST)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    size = path.stat().st_size if path.is_file() else 0
    weights = path.with_suffix(".bin")
    if path.suffix == ".xml" and weights.is_file():
        size += weights.stat().st_size
    return size


def artifact_record(artifact: Artifact) -> dict[str, Any]:
    """The model file a run loaded, as its record (results.json) holds it: the run's own and
    each ensemble member's alike."""
    return {"artifact": str(artifact.path), "size_bytes": artifact_size_bytes(artifact),
            "format": artifact.format,
            "precision": artifact.precision, "key": artifact.key, "weights": artifact.weights,
            "source_hash": artifact.source_hash, "meta": artifact.meta}


# A build function fills ``folder`` (a temp dir) and returns the artifact describing it.
BuildFn = Callable[[Path], Artifact]


def artifact_dir(model: str, key: str) -> Path:
    return cache_dir("models") / model / key


def load_cached(model: str, key: str) -> Artifact | None:
    """The cached artifact for (model, key), its files verified against the hashes recorded at
    build time; None if absent, or (logged on one line) if its manifest or any recorded file
    is missing, unreadable or changed."""
    return _load_verified(artifact_dir(model, key), warn=True)


def _load_verified(folder: Path, warn: bool) -> Artifact | None:
    """Read the manifest, check its own hash, hash every recorded file, and return the artifact
    if all match; otherwise None, with one warning line when ``warn`` (a folder that exists is
    a built artifact, so whatever is wrong with it is damage, not an unfinished build)."""
    if not folder.is_dir():
        return None
    art, problem = _read_manifest(folder)
    files: dict[str, dict[str, Any]] = {}
    if art is not None:
        try:
            files, problem = verify_files(folder, art.meta.get("files"))
        except OSError as exc:  # unreadable file: as good as corrupted
            problem = f"cannot be read ({exc.strerror or exc})"
        if problem is None and not art.path.is_file():
            problem = f"{art.path.name} is missing"  # not among the recorded files
    if art is None or problem is not None:
        if warn:
            log.warning("cached artifact %s failed verification: %s; rebuilding it",
                        folder, problem)
        return None
    art.meta = {**art.meta, "cached": True, **_verified(art, folder, files)}
    return art


def _read_manifest(folder: Path) -> tuple[Artifact | None, str | None]:
    """The artifact its manifest describes once the manifest matches its own hash, or what is
    wrong with the manifest."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return None, f"{MANIFEST} is missing"
    except (OSError, ValueError) as exc:
        return None, f"{MANIFEST} cannot be read ({' '.join(str(exc).split())[:80]})"
    if not isinstance(data, dict) or MANIFEST_HASH not in data:
        return None, f"{MANIFEST} records no hash of itself (built by an older quantmark)"
    digest = manifest_hash(data)
    if digest != data[MANIFEST_HASH]:
        return None, (f"{MANIFEST} has hash {digest[:12]}..., {str(data[MANIFEST_HASH])[:12]}"
                      "... when built (edited in place)")
    if data.get("schema") != SCHEMA:
        return None, f"{MANIFEST} has schema {data.get('schema')}, not {SCHEMA}"
    try:
        return Artifact.from_json(data, folder), None
    except (KeyError, TypeError) as exc:
        return None, f"{MANIFEST} does not describe an artifact ({exc})"


def manifest_hash(data: dict[str, Any]) -> str:
    """sha256 of every field of a manifest but its own hash (key order and layout aside)."""
    return hash_json({k: v for k, v in data.items() if k != MANIFEST_HASH}, 64)


def _sealed_manifest(art: Artifact) -> dict[str, Any]:
    """The manifest as it will read back from disk, with its own hash added."""
    data = json.loads(json.dumps(art.to_json(), default=str))
    return {**data, MANIFEST_HASH: manifest_hash(data)}


def hash_folder(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and full sha256 of every file under ``folder`` but the manifest, by relative path."""
    return {f.relative_to(folder).as_posix(): {"bytes": f.stat().st_size,
                                               "sha256": hash_file(f, 64)}
            for f in sorted(folder.rglob("*")) if f.is_file() and f.name != MANIFEST}


def verify_files(folder: Path, recorded: Any) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Hash the recorded files again: (what was found, None) or (..., what does not match).

    Files the build did not record are ignored: they are not part of the artifact."""
    if not isinstance(recorded, dict) or not recorded:
        return {}, "no content hashes recorded (built by an older quantmark)"
    found: dict[str, dict[str, Any]] = {}
    for rel, want in sorted(recorded.items()):
        path = folder / rel
        if not path.is_file():
            return found, f"{rel} is missing"
        size = path.stat().st_size
        if size != want.get("bytes"):
            return found, f"{rel} has {size} bytes, {want.get('bytes')} when built (truncated?)"
        digest = hash_file(path, 64)
        if digest != want.get("sha256"):
            return found, (f"{rel} has sha256 {digest[:12]}..., {str(want.get('sha256'))[:12]}"
                           "... when built (changed in place)")
        found[rel] = {"bytes": size, "sha256": digest}
    return found, None


def _verified(art: Artifact, folder: Path, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The meta entries that say what was hashed: every file, and the digest of ``path`` (of
    the whole file list when the artifact is more than that one file)."""
    rel = art.path.relative_to(folder).as_posix()
    single = list(files) == [rel]
    return {"files": files,
            "verified_sha256": files[rel]["sha256"] if single else hash_json(files, 64)}


def cached_build(model: str, key: str, build: BuildFn) -> Artifact:
    """Return the cached artifact for (model, key), building it first if needed (or if the
    cached files no longer match their hashes)."""
    hit = load_cached(model, key)
    if hit is not None:
        return hit
    final = artifact_dir(model, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=final.parent))
    try:
        art = build(tmp)
        if art.path.parent != tmp:
            raise RuntimeError(f"build for {model} wrote {art.path} outside {tmp}")
        art.key = key
        art.meta = {**art.meta, "cached": False, **_verified(art, tmp, hash_folder(tmp))}
        atomic_write_json(tmp / MANIFEST, _sealed_manifest(art))  # last: folder complete
        if final.exists() and _load_verified(final, warn=False) is None:
            shutil.rmtree(final, ignore_errors=True)  # interrupted, unreadable or corrupted
        try:
            os.rename(tmp, final)
        except OSError:
            # another process finished first (target exists and is non-empty): use theirs
            hit = load_cached(model, key)
            if hit is None:
                raise
            return hit
        art.path = final / art.path.name
        return art
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
