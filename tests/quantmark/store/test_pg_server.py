"""The test server's helper says in one line why no PostgreSQL server could start, which is
what the PostgreSQL cases skip with."""

from __future__ import annotations

import pytest

from tests.quantmark.store import backends, pg_server


def test_no_binaries_is_one_line(monkeypatch):
    monkeypatch.setattr(pg_server, "find_binaries", lambda: None)
    with pytest.raises(pg_server.ServerUnavailable) as why:
        pg_server.start()
    assert str(why.value) == ("no initdb on PATH or in /usr/lib/postgresql/*/bin (Debian: "
                              "apt-get install postgresql)")


def test_a_missing_server_skips_the_postgresql_case_with_its_reason(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL server: no initdb"):
        backends.backend_url("postgresql", tmp_path, "no PostgreSQL server: no initdb ...")
    assert backends.backend_url("sqlite", tmp_path, "").startswith("sqlite:///")
