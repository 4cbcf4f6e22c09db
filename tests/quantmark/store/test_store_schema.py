"""The schema's version and its ordered migrations."""

from __future__ import annotations

from sqlalchemy import create_engine, inspect

from quantmark.store import store_schema as schema


def test_an_empty_database_is_schema_0_and_migrates_to_the_newest(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 's.sqlite'}")
    with engine.begin() as connection:
        assert schema.stored_version(connection) == 0
        assert schema.migrate(connection, 0, "test") == schema.current_version()
    with engine.connect() as connection:
        assert schema.stored_version(connection) == schema.current_version()
        assert set(inspect(connection).get_table_names()) == set(schema.metadata.tables)
    engine.dispose()


def test_the_version_is_the_number_of_steps():
    assert schema.current_version() == len(schema.MIGRATIONS) >= 1
