"""Fixtures: the store's tests run against both back ends, a SQLite file and a real
PostgreSQL server.

``store_url`` is parametrized: ``sqlite`` (a fresh file per test) and ``postgresql`` (a fresh
database per test on one server per test session, started by ``pg_server`` and stopped with a
time limit at the end). Where no server can be started, the PostgreSQL cases skip with one line
saying why. The store's conftest and the store verbs' tests import them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.quantmark.store import pg_server

BACKENDS = ("sqlite", "postgresql")


#: one server per test process, however many modules import the fixture: the server (or why
#: there is none) and how many session fixtures hold it; the last one out stops it
_SHARED: dict[str, Any] = {}


@pytest.fixture(scope="session")
def postgres() -> Iterator[pg_server.Server | str]:
    """A running server, or the one line that says why there is none."""
    if "server" not in _SHARED:
        try:
            _SHARED["server"] = pg_server.start()
        except pg_server.ServerUnavailable as exc:
            _SHARED["server"] = f"no PostgreSQL server: {exc}"
        _SHARED["holders"] = 0
    _SHARED["holders"] += 1
    try:
        yield _SHARED["server"]
    finally:
        _SHARED["holders"] -= 1
        if not _SHARED["holders"]:
            server = _SHARED.pop("server")
            if isinstance(server, pg_server.Server):
                server.stop()


def backend_url(backend: str, tmp_path: Path, postgres: pg_server.Server | str) -> str:
    """A fresh, empty store of ``backend``."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'results.sqlite'}"
    if isinstance(postgres, str):
        pytest.skip(postgres)
    return postgres.new_database()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store: a SQLite file, then a PostgreSQL database."""
    postgres = request.getfixturevalue("postgres") if request.param == "postgresql" else ""
    return backend_url(request.param, tmp_path, postgres)
