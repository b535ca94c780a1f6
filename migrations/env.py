"""Alembic environment: online migrations only, against the URL or connection given by migrate()."""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from crawler.sink.sql import create_sink_engine, engine_url
from crawler.sink.tables import Base

# Any constant works, as long as every migrating process uses the same one.
_MIGRATION_LOCK_ID = 0x637261776C6572  # "crawler"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things; batch mode recreates the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    # The caller's transaction is open, so this lock (and SQLite's BEGIN IMMEDIATE, see
    # crawler.sink) is held until commit: a concurrent migrator waits, then finds head.
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_ID})")
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    given = context.config.attributes.get("connection")
    if given is not None:
        _run(given)  # from crawler.sink.migrate(), already inside a transaction
        return
    # The alembic CLI: CRAWLER_DATABASE_URL wins over sqlalchemy.url in alembic.ini.
    if context.config.config_file_name:
        fileConfig(context.config.config_file_name, disable_existing_loggers=False)
    url = os.environ.get("CRAWLER_DATABASE_URL") or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set CRAWLER_DATABASE_URL (or sqlalchemy.url in alembic.ini)")
    engine = create_sink_engine(engine_url(url))
    try:
        with engine.connect() as connection, connection.begin():
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
_run_online()
