"""The store's tables, its schema version and the migrations that bring an older store up to it.

One job (a run, a repeat set, a sweep cell, a diagnosis, a profile, a recommendation) is one row
of ``jobs``; each record file it was made of is one row of ``records``, whose ``sha256`` (of
the file's bytes) is what makes recording idempotent. A job with a performance figure has one
row of ``figures``; what it ran on is flattened into ``environment`` (key, JSON value), so a
new fact needs no new column. ``schema_version`` holds one row: the schema the store is at.

Migrations are an ordered list: step ``i`` takes a store from schema ``i`` to ``i + 1``; all
steps a store needs are applied in one transaction, so a failed step leaves it as it was.
When schema 2 changes a table, step 1 must keep creating schema 1's tables (copy their
definitions into the step) and step 2 alter them: ``metadata`` is always the newest schema.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    insert,
    inspect,
    select,
    update,
)

metadata = MetaData()

schema_version = Table(
    "schema_version", metadata,
    Column("id", Integer, primary_key=True),  # always 1: one row
    Column("version", Integer, nullable=False),
    Column("written_by", String(64), nullable=False),  # quantmark's version that migrated it
)

jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # a single record's sha256, or "set:<id>" for a repeat set: stable across imports
    Column("job_key", String(128), nullable=False, unique=True),
    Column("kind", String(32), nullable=False),
    Column("folder", Text, nullable=False),
    Column("started_at", Float, nullable=False),  # epoch seconds, UTC
    Column("recorded_at", Float, nullable=False),
    Column("version", String(64), nullable=False),  # quantmark's, that measured it
    Column("machine", String(255), nullable=False),  # its fleet node name, else host name
    # JSON: what only this kind has (a cell; an accuracy run's figure under its metric's key,
    # with the metric, model and SUT where its record names its task: job_facts)
    Column("detail", Text, nullable=False),
    Index("jobs_started_at", "started_at"),
)


def _records_table(meta: MetaData, *added: Column) -> Table:
    """``records`` as schema 1 made it, with the columns later schemas ``added``."""
    return Table(
        "records", meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        Column("sha256", String(64), nullable=False, unique=True),  # the idempotency key
        Column("path", Text, nullable=False),
        Column("kind", String(32), nullable=False),
        Column("started_at", Float, nullable=False),
        Column("value", Float),  # its own figure; None: no performance figure
        Column("left_out", Text),  # why a figure may not use it (INVALID, incomplete); None: VALID
        Column("disturbed", Boolean, nullable=False),
        Column("repeat_index", Integer),
        *added,
        Index("records_job", "job_id"),
    )


#: schema 2: ``checked`` - True where its figure was checked against LoadGen's logs when it was
#: recorded; NULL for a record of a schema 1 store, recorded before quantmark checked them
#: (importing its folder again checks it)
CHECKED = Column("checked", Boolean)
records = _records_table(metadata, CHECKED)

figures = Table(
    "figures", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("model", String(255), nullable=False),
    Column("sut", String(255), nullable=False),
    Column("scenario", String(64), nullable=False),
    Column("metric", String(32), nullable=False),
    Column("value", Float),  # the median of the VALID runs; None: none VALID
    Column("low", Float),
    Column("high", Float),
    Column("method", String(32)),  # quantmark.report.stats' interval method
    Column("valid", Boolean, nullable=False),
    Column("disturbed", Boolean, nullable=False),
    Column("invalid_runs", Integer, nullable=False),
    Column("runs", Text, nullable=False),  # JSON list: every VALID run's own figure
    Column("left_out_runs", Text, nullable=False),  # JSON list: the others' own figures
    UniqueConstraint("job_id", name="figures_one_per_job"),
    Index("figures_series", "model", "sut", "scenario", "metric"),
)

environment = Table(
    "environment", metadata,
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("value", Text, nullable=False),  # JSON scalar: str, int, float or bool
)

tags = Table(
    "tags", metadata,
    Column("job_id", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("tag", String(255), primary_key=True),
    Index("tags_tag", "tag"),
)


def _create_schema_1(connection: Connection) -> None:
    """Schema 0 (an empty database) -> 1: every table, as schema 1 had it."""
    old = MetaData()
    tables = [jobs.to_metadata(old), _records_table(old),
              *(table.to_metadata(old) for table in (figures, environment, tags))]
    old.create_all(connection, tables=tables)


def _add_checked(connection: Connection) -> None:
    """Schema 1 -> 2: ``records.checked`` (NULL for every record already there)."""
    connection.exec_driver_sql(f"ALTER TABLE records ADD COLUMN {CHECKED.name} BOOLEAN")


#: step i takes a store from schema i to i + 1, in order
MIGRATIONS: list[Callable[[Connection], None]] = [_create_schema_1, _add_checked]


def current_version() -> int:
    """The schema this quantmark writes."""
    return len(MIGRATIONS)


def stored_version(connection: Connection) -> int:
    """The schema the database is at: 0 when it holds no store yet."""
    if not inspect(connection).has_table(schema_version.name):
        return 0
    found = connection.execute(select(schema_version.c.version)).scalar()
    return int(found or 0)


def migrate(connection: Connection, start: int, written_by: str) -> int:
    """Apply every step from schema ``start`` in the caller's transaction; the new version."""
    if start == 0:
        schema_version.create(connection, checkfirst=True)
    for step in MIGRATIONS[start:]:
        step(connection)
    version = current_version()
    if connection.execute(select(schema_version.c.id)).first() is None:
        connection.execute(insert(schema_version).values(id=1, version=version,
                                                         written_by=written_by))
    else:
        connection.execute(update(schema_version).values(version=version,
                                                         written_by=written_by))
    return version
