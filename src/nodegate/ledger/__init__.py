"""The fleet ledger: every node's history and every GPU's lifetime in a SQL database.

Control side only (the ``ledger`` extra: SQLAlchemy, Alembic, psycopg); a node never installs
it. SQLite (a file) by default, PostgreSQL through a URL; one SQL layer (SQLAlchemy Core)
for both, versioned by Alembic migrations (docs/ledger.md). ``cli`` and ``report_cli`` import
only argparse at module level: the command line starts without the extra.
"""
