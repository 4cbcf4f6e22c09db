"""A throwaway PostgreSQL server for the store's tests (and bench/store_cost.py's figures).

Debian's ``postgresql`` package (CI installs it in .ci/run) puts initdb and pg_ctl under
/usr/lib/postgresql/<version>/bin, not on PATH; some machines link them into PATH. PostgreSQL
refuses to run as root, and CI runs as root: then the cluster is made and run as ``nobody``
(``runuser``, else ``setpriv``) in a temp folder it owns. The server listens on a unix socket
in that folder only (no TCP port to collide with another test worker's server), with fsync off
(a test's database is thrown away). ``ServerUnavailable`` says in one line why none started.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "nobody"
PORT = 5432  # the socket's name (.s.PGSQL.5432) in the server's own folder: no TCP
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


class ServerUnavailable(Exception):
    """No server could be started here; the message says why, in one line."""


def find_binaries() -> Path | None:
    """The folder of initdb and pg_ctl: PATH's, else the newest of Debian's versions."""
    on_path = shutil.which("initdb")
    if on_path:
        folder = Path(on_path).resolve().parent
        if (folder / "pg_ctl").exists():
            return folder
    versions = sorted(Path("/").glob(DEBIAN_BINARIES.lstrip("/")),
                      key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.name)] or [0])
    found = [folder for folder in versions if (folder / "initdb").exists()]
    return found[-1] if found else None


def unprivileged_prefix() -> list[str]:
    """What runs a command as ``nobody`` when we are root ([] when we are not)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser"):
        return ["runuser", "-u", UNPRIVILEGED_USER, "--"]
    if shutil.which("setpriv"):
        user = pwd.getpwnam(UNPRIVILEGED_USER)
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                "--clear-groups"]
    raise ServerUnavailable("running as root (PostgreSQL refuses root) and neither runuser "
                            "nor setpriv is here to run it as nobody")


@dataclass
class Server:
    """A running cluster: its folder (data, log, socket) and how to reach it."""

    folder: Path
    binaries: Path
    prefix: list[str]
    databases: int = 0

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.folder}&port={PORT}"

    def new_database(self) -> str:
        """A fresh empty database's URL: each test gets its own."""
        import psycopg

        self.databases += 1
        name = f"quantmark_test_{self.databases}"
        with psycopg.connect(host=str(self.folder), port=PORT, user="postgres",
                             dbname="postgres", autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """``pg_ctl stop -m fast`` (with a time limit), then the folder goes."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run([*self.prefix, str(self.binaries / "pg_ctl"), "-D",
                            str(self.folder / "data"), "-m", "fast", "-t",
                            str(STOP_TIMEOUT_S), "stop"], cwd=self.folder,
                           capture_output=True, timeout=STOP_TIMEOUT_S + 15)
        shutil.rmtree(self.folder, ignore_errors=True)


def _run(command: list[str], folder: Path, what: str) -> None:
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S + 30)
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise ServerUnavailable(f"{what} did not finish: {exc}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise ServerUnavailable(f"{what} failed (exit {done.returncode}): {lines[-1]}")


def start() -> Server:
    """Make and start a cluster in a new temp folder; ServerUnavailable says why not."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ServerUnavailable("psycopg is not installed (pip install "
                                "'quantmark[store-pg]')") from None
    binaries = find_binaries()
    if binaries is None:
        raise ServerUnavailable(f"no initdb on PATH or in {DEBIAN_BINARIES} (Debian: apt-get "
                                "install postgresql)")
    prefix = unprivileged_prefix()
    folder = Path(tempfile.mkdtemp(prefix="qm-pg-"))
    if prefix:
        user = pwd.getpwnam(UNPRIVILEGED_USER)
        os.chown(folder, user.pw_uid, user.pw_gid)
    server = Server(folder, binaries, prefix)
    try:
        _run([*prefix, str(binaries / "initdb"), "-D", str(folder / "data"), "-U", "postgres",
              "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"], folder, "initdb")
        _run([*prefix, str(binaries / "pg_ctl"), "-D", str(folder / "data"), "-l",
              str(folder / "server.log"), "-w", "-t", str(START_TIMEOUT_S), "-o",
              f"-k {folder} -c listen_addresses='' -p {PORT} -F", "start"], folder, "pg_ctl start")
    except ServerUnavailable:
        server.stop()
        raise
    return server
