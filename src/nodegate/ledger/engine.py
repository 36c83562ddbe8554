"""Opening a ledger: the ``--db`` target, its engine, and its schema version.

A target is a file path (SQLite, the embedded default) or a URL: ``sqlite:///PATH``,
``postgresql://...`` (psycopg 3). A target that is no database (an unknown scheme, an
in-memory SQLite, a folder, a FIFO, a file in a folder that does not exist) is bad input,
exit 2, named with any password masked; a server that does not answer is exit 3.

The schema is Alembic's: ``alembic_version`` holds the revision. A ledger at a revision this
code does not know was written by a newer nodegate (or is no ledger of ours): it is refused
before anything is written to it (exit 2). An older one is migrated forward in one
transaction, under a lock (SQLite: the write lock of ``BEGIN IMMEDIATE``; PostgreSQL: an
advisory lock), so two ingests that meet a fresh or old ledger migrate it once.

SQLite runs in WAL mode (readers never wait for the writer) and every write transaction
starts with ``BEGIN IMMEDIATE``: a second writer waits for the write lock (up to
``BUSY_TIMEOUT_S``) instead of failing half way when it upgrades a read lock.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from nodegate.errors import CannotRunError, ConfigError
from nodegate.ledger.schema import HEAD
from nodegate.redaction import mask_userinfo

__all__ = ["BUSY_TIMEOUT_S", "Ledger", "describe", "open_ledger", "parse_target"]

#: How long a SQLite writer waits for another one's transaction before giving up.
BUSY_TIMEOUT_S = 120.0
#: The PostgreSQL advisory lock key a migration holds (any constant shared by all writers).
MIGRATION_LOCK = 0x6E6F6465  # "node"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: Environment variable naming the ledger when ``--db`` is not given.
ENV = "NODEGATE_LEDGER_DB"


@dataclass
class Ledger:
    """An open ledger at the current schema: ``engine`` and what to call it in messages."""

    engine: sa.Engine
    name: str

    @property
    def dialect(self) -> str:
        return str(self.engine.dialect.name)

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """One write transaction (committed on success, rolled back on any error)."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """One read transaction (SQLite: deferred, so it never waits for a writer)."""
        with self.engine.connect() as conn:
            conn.execution_options(ledger_read=True)
            with conn.begin():
                yield conn

    def close(self) -> None:
        self.engine.dispose()


def describe(url: sa.URL) -> str:
    """The target as messages name it: a SQLite file's path, else the URL, password masked."""
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return mask_userinfo(url.render_as_string(hide_password=False))


def parse_target(target: str | None) -> sa.URL:
    """The URL of ``--db`` (or ``$NODEGATE_LEDGER_DB``); ConfigError (exit 2) naming it."""
    raw = target if target else os.environ.get(ENV, "")
    if not raw:
        raise ConfigError(f"no ledger given: --db PATH|URL or ${ENV}", key="--db")
    if "://" not in raw:
        return _sqlite_file(Path(raw).expanduser())
    try:
        url = sa.make_url(raw)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"not a database URL ({type(exc).__name__})",
                          key=f"--db {mask_userinfo(raw)}") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ConfigError("an in-memory SQLite ledger would be lost at exit: give a file",
                              key=f"--db {raw}")
        return _sqlite_file(Path(url.database).expanduser())
    if backend == "postgresql":
        if url.get_driver_name() not in ("psycopg", "postgresql", ""):
            raise ConfigError(f"PostgreSQL is reached through psycopg 3, not "
                              f"{url.get_driver_name()}", key=f"--db {describe(url)}")
        return url.set(drivername="postgresql+psycopg")
    raise ConfigError(f"unsupported database {backend!r}: a SQLite file or a postgresql:// URL",
                      key=f"--db {mask_userinfo(raw)}")


def _sqlite_file(path: Path) -> sa.URL:
    path = path.absolute()
    if not path.parent.is_dir():
        raise ConfigError("the ledger's folder does not exist", file=str(path), key="--db")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"cannot look at it: {exc.strerror}", file=str(path),
                          key="--db") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError("not a regular file (a ledger is a SQLite file)", file=str(path),
                          key="--db")
    return sa.URL.create("sqlite+pysqlite", database=str(path))


def open_ledger(target: str | None, *, create: bool = True) -> Ledger:
    """The ledger at ``target``, at the current schema (migrated forward where older).

    ``create``: make a new ledger where there is none (ingest); False: a missing one is
    exit 2 (the reads: nothing was ever ingested there)."""
    url = parse_target(target)
    name = describe(url)
    if url.get_backend_name() == "sqlite" and not create and \
            not Path(str(url.database)).exists():
        raise ConfigError("no ledger there (nothing was ingested)", file=name, key="--db")
    engine = _engine(url)
    ledger = Ledger(engine, name)
    try:
        _check_and_migrate(ledger, create)
    except BaseException:
        engine.dispose()
        raise
    return ledger


def _engine(url: sa.URL) -> sa.Engine:
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    return sa.create_engine(url, connect_args={"connect_timeout": 10}, pool_pre_ping=False)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    """The driver's own transaction handling off (``_sqlite_begin`` starts them), a writer
    waits for another one, foreign keys enforced."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    read = conn.get_execution_options().get("ledger_read", False)
    conn.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")


def _config(conn: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def known_revisions() -> set[str]:
    return {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}


def revision_of(conn: sa.Connection) -> str | None:
    """The ledger's schema revision; None for an empty database."""
    return MigrationContext.configure(conn).get_current_revision()


def _refuse_newer(ledger: Ledger, revision: str) -> None:
    if revision not in known_revisions():
        raise ConfigError(f"the ledger is at schema revision {revision!r}, which this nodegate "
                          f"does not know (it knows up to {HEAD}): written by a newer "
                          f"nodegate? Upgrade nodegate; nothing was written",
                          file=ledger.name, key="alembic_version")


def _check_and_migrate(ledger: Ledger, create: bool) -> None:
    try:
        with ledger.read() as conn:
            revision = revision_of(conn)
        if revision is not None:
            _refuse_newer(ledger, revision)
        if revision == HEAD:
            _wal(ledger)
            return
        if revision is None and not create:
            raise ConfigError("an empty database: nothing was ingested", file=ledger.name,
                              key="--db")
        with ledger.write() as conn:
            if ledger.dialect == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
            revision = revision_of(conn)  # another writer may have migrated meanwhile
            if revision is not None:
                _refuse_newer(ledger, revision)
            if revision != HEAD:
                command.upgrade(_config(conn), "head")
        _wal(ledger)
    except sa.exc.OperationalError as exc:
        raise CannotRunError(f"could not open the ledger: {_first_line(exc)}",
                             file=ledger.name) from None
    except sa.exc.DatabaseError as exc:  # a file that is no SQLite database, ...
        raise ConfigError(f"not a ledger: {_first_line(exc)}", file=ledger.name,
                          key="--db") from None


def _wal(ledger: Ledger) -> None:
    """SQLite: write-ahead logging (readers do not wait for the writer); set once, kept in
    the file. Never before the version check: a newer ledger is not written at all."""
    if ledger.dialect != "sqlite":
        return
    raw = ledger.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("PRAGMA journal_mode")
        mode = cursor.fetchone()
        if mode is None or mode[0] != "wal":
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()
    finally:
        raw.close()


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
