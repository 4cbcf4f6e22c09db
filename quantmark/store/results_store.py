"""The results store: every job's figure, interval, validity and environment, over time.

Embedded SQLite by default (``<cache>/store/results.sqlite``: no server to start), or any
SQLAlchemy URL: a shared PostgreSQL (``postgresql+psycopg://...``) for a team or a fleet, or
another SQLite file (``sqlite:///PATH``), from ``--store`` or ``$QUANTMARK_STORE``. One code
path for both; the dialect differences are three, all SQLite's, set on its connections
(``_sqlite_connection``): foreign keys on (SQLite's default is off), WAL (a reader does not
wait for a writer; fsync at checkpoints only, which a killed process cannot tear), and
``BEGIN IMMEDIATE`` for a transaction that writes (it takes the lock when it starts, so two
recording processes queue for the busy timeout instead of failing half-way).

Each job is written in one transaction: a process killed while recording leaves the job whole
or absent. Recording a record file that is already there (same sha256) adds nothing. A run
whose record disagrees with LoadGen's logs is refused (``job_facts``), and so is one that would
join a repeat set the store holds with other content under its identity (a changed copy of the
set: ``job_conflicts``), in one line naming what differs: never merged into the old job.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError

from quantmark.ground.errors import UserError
from quantmark.ground.paths import cache_dir
from quantmark.ground.version import VERSION
from quantmark.store import quality_jobs
from quantmark.store import store_schema as schema
from quantmark.store.job_conflicts import check_joins
from quantmark.store.job_facts import JobFacts, dumps, read_job
from quantmark.store.point_rows import figure_row, point_of
from quantmark.store.points import Point
from quantmark.store.quality_jobs import QualityPoint
from quantmark.store.record_walk import record_files
from quantmark.store.store_filters import epoch, matching
from quantmark.store.store_settings import (
    DEFAULT_FILE,
    OFF,
    STORE_VARIABLE,
    env_tags,
)

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 30.0
PG_CONNECT_TIMEOUT_S = 10
#: how many job ids go into one ``IN (...)`` of a query
CHUNK = 500
#: the execution option of a connection that only reads (SQLite: a deferred BEGIN)
READING = "quantmark_reading"


def store_url(url: str | None = None) -> URL:
    """The store's URL: ``url``, else ``$QUANTMARK_STORE``, else the default SQLite file. A
    plain path is a SQLite file; ``postgresql://`` means psycopg 3."""
    text = (url if url is not None else os.environ.get(STORE_VARIABLE, "")).strip()
    if text.lower() == OFF:
        raise UserError(f"the results store is off ({STORE_VARIABLE}=off); unset it or pass "
                        "--store URL")
    if not text:
        return URL.create("sqlite", database=str(cache_dir("store") / DEFAULT_FILE))
    if "://" not in text:
        return URL.create("sqlite", database=str(Path(text).expanduser().absolute()))
    try:
        parsed = make_url(text)
    except ArgumentError:
        raise UserError(f"--store {text!r} is not a database URL; give postgresql+psycopg://"
                        "USER@HOST/DB or sqlite:///PATH") from None
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            raise UserError("an in-memory SQLite store keeps nothing; give a file: "
                            "sqlite:///PATH")
        return parsed
    raise UserError(f"--store {parsed.render_as_string(hide_password=True)}: quantmark's "
                    "store is PostgreSQL (postgresql+psycopg://...) or SQLite (sqlite:///PATH)")


def open_store(url: str | None = None) -> Store:
    """The store at ``url`` (None: ``$QUANTMARK_STORE``, else the default SQLite), created or
    migrated to this quantmark's schema; one written by a newer one is refused (UserError)."""
    return Store(store_url(url))


def _sqlite_connection(engine: Engine) -> None:
    """SQLite's three differences (see the module's docstring)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite's own BEGIN off: ours below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # WAL: a killed process loses nothing
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        reading = connection.get_execution_options().get(READING, False)
        connection.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")


def _engine(url: URL) -> Engine:
    """The engine of ``url``; a missing driver is one line naming the extra to install."""
    try:
        if url.get_backend_name() == "sqlite":
            Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
            _sqlite_connection(engine)
            return engine
        return create_engine(url, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S})
    except (ImportError, NoSuchModuleError):
        raise UserError("a PostgreSQL store needs psycopg 3: pip install "
                        "'quantmark[store-pg]' (or use the default SQLite store)") from None


def where(url: URL) -> str:
    """The store in words: its file, or its URL without the password."""
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.render_as_string(hide_password=True)


class Store:
    """One store, open; a context manager (``with open_store() as store: ...``)."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.where = where(url)
        self.engine = _engine(url)
        self.created: set[int] = set()  # the jobs this store object created (an import's)
        try:
            self.schema = self._prepare()
        except BaseException:
            self.engine.dispose()
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def _reading(self) -> Connection:
        """A connection for queries only (on SQLite it never waits for a writer's lock)."""
        return self.engine.connect().execution_options(**{READING: True})

    def _failed(self, exc: DBAPIError) -> UserError:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        return UserError(f"cannot use the results store {self.where}: {reason}; check it (or "
                         f"--store / {STORE_VARIABLE}), or use another --store")

    def _prepare(self) -> int:
        """Create or migrate the schema (in one transaction), or refuse a newer one. Two
        processes creating one store at once: the loser's DDL fails, and it looks again."""
        for attempt in (1, 2):
            try:
                with self.engine.begin() as connection:
                    found = schema.stored_version(connection)
                    newest = schema.current_version()
                    if found > newest:
                        raise UserError(f"{self.where} was written by a newer quantmark (schema "
                                        f"{found} > {newest}); upgrade quantmark or use another "
                                        "--store")
                    if found < newest:
                        # a new store is no news (a run's output stays as it was); a migration is
                        log.log(logging.INFO if found else logging.DEBUG,
                                "results store %s: schema %d -> %d", self.where, found, newest)
                        return schema.migrate(connection, found, VERSION)
                    return found
            except IntegrityError:
                if attempt == 2:
                    raise
            except DBAPIError as exc:
                if attempt == 2 or exc.connection_invalidated or "exist" not in str(exc):
                    raise self._failed(exc) from None
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ writing
    def record(self, path: str | Path, tags: Iterable[str] = ()) -> int:
        """Record the record file ``path``, or every record under the folder ``path``; the
        number of jobs added. One already there adds nothing."""
        added = 0
        for file, cell in record_files(Path(path)):
            added += self.record_file(file, tags, cell) == "new job"
        return added

    def record_file(self, path: Path, tags: Iterable[str] = (), cell: str | None = None
                    ) -> str:
        """Record one record file, in one transaction: "new job", "added" (a run joined its
        repeat set's job, made by this store object), "joined" (a run joined a job the store
        held before), "there" (recorded before) or "skipped" (not a job's kind). A run whose
        record disagrees with LoadGen's logs is a LogMismatch, one that conflicts with the job
        it would join a StoreConflict: nothing is written."""
        facts = read_job(path, cell)
        if facts is None:
            return "skipped"
        tags = tuple(dict.fromkeys([*tags, *env_tags()]))
        for attempt in (1, 2):
            try:
                with self.engine.begin() as connection:
                    return self._write(connection, facts, tags)
            except IntegrityError:  # another process recorded the same job meanwhile
                if attempt == 2:
                    raise
            except DBAPIError as exc:
                raise self._failed(exc) from None
        raise AssertionError("unreachable")

    def _write(self, connection: Connection, facts: JobFacts, tags: tuple[str, ...]) -> str:
        jobs, records = schema.jobs, schema.records
        there = connection.execute(select(records.c.job_id, records.c.checked)
                                   .where(records.c.sha256 == facts.sha256)).first()
        if there is not None:
            if there.checked is None and facts.checked:  # recorded before checks: now checked
                connection.execute(update(records).where(records.c.sha256 == facts.sha256)
                                   .values(checked=True))
            self._add_tags(connection, there.job_id, tags)
            return "there"
        job_id = connection.execute(select(jobs.c.id)
                                    .where(jobs.c.job_key == facts.job_key)).scalar()
        new = job_id is None
        if new:
            job_id = self._insert_job(connection, facts)
            self.created.add(job_id)
        else:
            check_joins(connection, job_id, facts)
            if facts.started_at < connection.execute(
                    select(jobs.c.started_at).where(jobs.c.id == job_id)).scalar_one():
                connection.execute(update(jobs).where(jobs.c.id == job_id)
                                   .values(started_at=facts.started_at))
        self._add_tags(connection, job_id, tags)
        connection.execute(insert(records).values(
            job_id=job_id, sha256=facts.sha256, path=facts.path, kind=facts.kind,
            started_at=facts.started_at, value=facts.value, left_out=facts.left_out,
            disturbed=facts.disturbed, repeat_index=facts.repeat_index, checked=facts.checked))
        if facts.series is not None:
            self._refresh_figure(connection, job_id, facts)
        return "new job" if new else "added" if job_id in self.created else "joined"

    def _insert_job(self, connection: Connection, facts: JobFacts) -> int:
        job_id = connection.execute(insert(schema.jobs).values(
            job_key=facts.job_key, kind=facts.kind, folder=facts.folder,
            started_at=facts.started_at, recorded_at=time.time(), version=facts.version,
            machine=facts.machine, detail=dumps(facts.detail))).inserted_primary_key[0]
        if facts.environment:
            connection.execute(insert(schema.environment), [
                {"job_id": job_id, "key": key, "value": dumps(value)}
                for key, value in sorted(facts.environment.items())])
        return int(job_id)

    def _add_tags(self, connection: Connection, job_id: int, tags: tuple[str, ...]) -> None:
        if not tags:
            return
        have = set(connection.execute(select(schema.tags.c.tag)
                                      .where(schema.tags.c.job_id == job_id)).scalars())
        missing = [{"job_id": job_id, "tag": tag} for tag in tags if tag not in have]
        if missing:
            connection.execute(insert(schema.tags), missing)

    def _refresh_figure(self, connection: Connection, job_id: int, facts: JobFacts) -> None:
        """The job's figure from all its runs so far (a repeat set grows run by run)."""
        records = schema.records
        runs = connection.execute(
            select(records.c.value, records.c.left_out, records.c.disturbed)
            .where(records.c.job_id == job_id)
            .order_by(records.c.started_at, records.c.id)).all()
        connection.execute(delete(schema.figures).where(schema.figures.c.job_id == job_id))
        connection.execute(insert(schema.figures).values(
            job_id=job_id, **figure_row(facts.series, runs)))

    # ------------------------------------------------------------------ reading
    def points(self, model: str | None = None, sut: str | None = None,
               scenario: str | None = None, machine: str | None = None,
               version: str | None = None, since: str | date | datetime | None = None,
               until: str | date | datetime | None = None, tag: str | None = None
               ) -> list[Point]:
        """Every job's figure that matches, ordered by series, then time."""
        figures, jobs = schema.figures, schema.jobs
        query = matching(select(figures, jobs.c.job_key, jobs.c.started_at, jobs.c.folder,
                                jobs.c.version, jobs.c.machine),
                         model=model, sut=sut, scenario=scenario, machine=machine,
                         version=version, since=since, until=until, tag=tag)
        query = query.order_by(figures.c.model, figures.c.sut, figures.c.scenario,
                               figures.c.metric, jobs.c.started_at, jobs.c.id)
        try:
            with self._reading() as connection:
                rows = connection.execute(query).mappings().all()
                ids = [row["job_id"] for row in rows]
                facts = self._by_job(connection, schema.environment, ids)
                labels = self._by_job(connection, schema.tags, ids)
                unchecked = self._by_job(connection, select(schema.records.c.job_id).where(
                    schema.records.c.checked.is_(None)).subquery(), ids)
        except DBAPIError as exc:
            raise self._failed(exc) from None
        return [point_of(row, facts.get(row["job_id"], []), labels.get(row["job_id"], []),
                         len(unchecked.get(row["job_id"], []))) for row in rows]

    def quality_points(self, model: str | None = None, sut: str | None = None,
                       scenario: str | None = None, machine: str | None = None,
                       version: str | None = None, since: Any = None, until: Any = None,
                       tag: str | None = None) -> list[QualityPoint]:
        """Every accuracy run that matches ``points``' filters, in its task's metric."""
        query = quality_jobs.accuracy_query(machine, version, epoch(since),
                                            epoch(until, end=True), tag)
        try:
            with self._reading() as connection:
                rows = connection.execute(query).mappings().all()
        except DBAPIError as exc:
            raise self._failed(exc) from None
        return quality_jobs.matching(rows, model, sut, scenario)

    def count(self, **filters: Any) -> int:
        """How many figures ``points(**filters)`` would return."""
        query = matching(select(func.count()), **filters)
        try:
            with self._reading() as connection:
                return int(connection.execute(query).scalar_one())
        except DBAPIError as exc:
            raise self._failed(exc) from None

    @staticmethod
    def _by_job(connection: Connection, table: Any, ids: list[int]) -> dict[int, list[Any]]:
        """``table``'s rows of each job in ``ids``, by job id."""
        found: dict[int, list[Any]] = {}
        for start in range(0, len(ids), CHUNK):
            for row in connection.execute(select(table).where(
                    table.c.job_id.in_(ids[start:start + CHUNK]))).all():
                found.setdefault(row.job_id, []).append(row)
        return found

    def counts(self) -> dict[str, Any]:
        """What the store holds: jobs by kind, records, series, the first and last job."""
        jobs, figures = schema.jobs, schema.figures
        try:
            with self._reading() as connection:
                kinds = dict(connection.execute(select(jobs.c.kind, func.count())
                                                .group_by(jobs.c.kind)).all())
                first, last = connection.execute(select(func.min(jobs.c.started_at),
                                                        func.max(jobs.c.started_at))).one()
                series = connection.execute(select(func.count()).select_from(
                    select(figures.c.model, figures.c.sut, figures.c.scenario,
                           figures.c.metric).distinct().subquery())).scalar_one()
                records = connection.execute(select(func.count())
                                             .select_from(schema.records)).scalar_one()
        except DBAPIError as exc:
            raise self._failed(exc) from None
        return {"jobs": dict(sorted(kinds.items())), "records": records, "series": series,
                "first": first, "last": last}

    def jobs_without_figures(self) -> Iterator[dict[str, Any]]:
        """The diagnoses, profiles, recommendations, accuracy and audit runs, by time."""
        jobs = schema.jobs
        with self._reading() as connection:
            yield from connection.execute(
                select(jobs).where(jobs.c.id.not_in(select(schema.figures.c.job_id)))
                .order_by(jobs.c.started_at)).mappings()
