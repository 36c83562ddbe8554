"""Alembic's environment for the ledger: always run by ``nodegate.ledger.engine`` on the
connection it holds, inside its transaction (and, on PostgreSQL, its advisory lock), so two
ingests that find a fresh ledger create it once."""

from __future__ import annotations

from alembic import context

from nodegate.ledger.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
