"""The first ledger schema: identities, boots, runs, cards and placements, non-PASS results,
metrics, events and unreadable reports. Frozen: a later change is a new revision.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("machine", sa.Text, nullable=False),
        sa.UniqueConstraint("machine", name="uq_nodes_machine"))
    op.create_table(
        "node_names",
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("node_id", "name", name="pk_node_names"))
    op.create_index("ix_node_names_name", "node_names", ["name"])
    op.create_table(
        "boots",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("boot_id", sa.Text, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.UniqueConstraint("node_id", "boot_id", name="uq_boots_node_id_boot_id"))
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("identity", sa.Text, nullable=False),
        sa.Column("report_id", sa.Text, nullable=False),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("boot", sa.Integer, sa.ForeignKey("boots.id"), nullable=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("profile", sa.Text, nullable=False),
        sa.Column("level", sa.Text, nullable=False),
        sa.Column("verdict", sa.Text, nullable=False),
        sa.Column("sequence", sa.BigInteger, nullable=True),
        sa.Column("boottime_s", sa.Float, nullable=True),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("finished_at", sa.Text, nullable=False),
        sa.Column("finished", sa.Float, nullable=False),
        sa.Column("driver", sa.Text, nullable=True),
        sa.Column("fabric_manager", sa.Text, nullable=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("ingested", sa.Float, nullable=False),
        sa.UniqueConstraint("identity", name="uq_runs_identity"))
    op.create_index("ix_runs_node_id_finished", "runs", ["node_id", "finished"])
    op.create_index("ix_runs_finished", "runs", ["finished"])
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("serial", sa.Text, nullable=False),
        sa.Column("uuid", sa.Text, nullable=True),
        sa.Column("board_part_number", sa.Text, nullable=True),
        sa.UniqueConstraint("serial", name="uq_gpus_serial"))
    op.create_table(
        "run_gpus",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("slot", sa.Text, nullable=False),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "slot", name="pk_run_gpus"))
    op.create_index("ix_run_gpus_gpu_id", "run_gpus", ["gpu_id"])
    op.create_table(
        "placements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
        sa.Column("host", sa.Text, nullable=False),
        sa.Column("slot", sa.Text, nullable=False),
        sa.Column("bus_id", sa.Text, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.UniqueConstraint("gpu_id", "node_id", "host", "slot", "bus_id",
                            name="uq_placements_gpu_id_node_id_host_slot_bus_id"))
    op.create_table(
        "results",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True),
        sa.Column("check_name", sa.Text, nullable=False),
        sa.Column("entity", sa.Text, nullable=False),
        sa.Column("verdict", sa.Text, nullable=False),
        sa.Column("severity", sa.Text, nullable=False),
        sa.Column("measured", sa.Text, nullable=False),
        sa.Column("threshold", sa.Text, nullable=False),
        sa.Column("unit", sa.Text, nullable=False),
        sa.Column("evidence", sa.Text, nullable=False))
    op.create_index("ix_results_run_id", "results", ["run_id"])
    op.create_index("ix_results_gpu_id", "results", ["gpu_id"])
    op.create_table(
        "metrics",
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("entity", sa.Text, nullable=False),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True),
        sa.Column("value", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key", "entity", name="pk_metrics"))
    op.create_index("ix_metrics_gpu_id", "metrics", ["gpu_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("identity", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=True),
        sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("at_text", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.UniqueConstraint("identity", name="uq_events_identity"))
    op.create_index("ix_events_node_id", "events", ["node_id"])
    op.create_index("ix_events_gpu_id", "events", ["gpu_id"])
    op.create_index("ix_events_run_id", "events", ["run_id"])
    op.create_table(
        "unreadable",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("identity", sa.Text, nullable=False),
        sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("seen", sa.Float, nullable=False),
        sa.UniqueConstraint("identity", name="uq_unreadable_identity"))
    op.create_index("ix_unreadable_node_id", "unreadable", ["node_id"])


def downgrade() -> None:
    raise NotImplementedError("the ledger migrates forward only (docs/ledger.md)")
