"""Retention: metrics past their age are kept as one row per node, metric, entity and day.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_daily",
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("entity", sa.Text, nullable=False),
        sa.Column("day", sa.Text, nullable=False),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("min", sa.Float, nullable=False),
        sa.Column("max", sa.Float, nullable=False),
        sa.Column("sum", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("node_id", "key", "entity", "day", name="pk_metric_daily"))
    op.create_index("ix_metric_daily_gpu_id", "metric_daily", ["gpu_id"])


def downgrade() -> None:
    raise NotImplementedError("the ledger migrates forward only (docs/ledger.md)")
