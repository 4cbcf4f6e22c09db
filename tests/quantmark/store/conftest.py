"""The store's tests: every one against SQLite and a real PostgreSQL server
(``tests.quantmark.store.backends``)."""

from tests.quantmark.store.backends import postgres, store_url  # noqa: F401 - fixtures
