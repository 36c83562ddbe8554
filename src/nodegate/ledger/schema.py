"""The ledger's tables as the code of this version writes them (Alembic head).

Times are kept twice where they are read: ``*_at`` the report's own ISO text (shown as
written), the float seconds since the epoch beside it (``finished``, ``first_seen``,
``last_seen``, ``at``) for ordering and retention. JSON values are stored as text (the same
on both engines). A node is its machine id (``nodes.machine``; ``name:<node>`` for reports
written before machine ids), a card its serial (``gpus.serial``; ``uuid:<uuid>`` for a
board that gives none).
"""

from __future__ import annotations

import sqlalchemy as sa

#: The Alembic revision this code writes; a ledger at a revision this code does not know is
#: newer (or foreign) and is refused, never written (``engine.open_ledger``).
HEAD = "0002"

metadata = sa.MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})

nodes = sa.Table(
    "nodes", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("machine", sa.Text, nullable=False, unique=True),
)

node_names = sa.Table(
    "node_names", metadata,
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), primary_key=True),
    sa.Column("name", sa.Text, primary_key=True, index=True),
    sa.Column("first_seen", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
)

boots = sa.Table(
    "boots", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
    sa.Column("boot_id", sa.Text, nullable=False),
    sa.Column("first_seen", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.UniqueConstraint("node_id", "boot_id"),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    # machine id/boot id/sequence, or report:<report id> for a report without them
    sa.Column("identity", sa.Text, nullable=False, unique=True),
    sa.Column("report_id", sa.Text, nullable=False),
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
    sa.Column("boot", sa.Integer, sa.ForeignKey("boots.id"), nullable=True),
    sa.Column("name", sa.Text, nullable=False),  # the scheduler's name (slurm_node) or host
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
    sa.Column("path", sa.Text, nullable=False),  # below the ingested folder
    sa.Column("summary", sa.Text, nullable=False),  # the fleet summary (fleet_summary)
    sa.Column("ingested", sa.Float, nullable=False),
    sa.Index(None, "node_id", "finished"),
    sa.Index(None, "finished"),
)

gpus = sa.Table(
    "gpus", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("serial", sa.Text, nullable=False, unique=True),
    sa.Column("uuid", sa.Text, nullable=True),
    sa.Column("board_part_number", sa.Text, nullable=True),
)

run_gpus = sa.Table(
    "run_gpus", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("slot", sa.Text, primary_key=True),  # the entity (gpu3)
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False, index=True),
)

placements = sa.Table(
    "placements", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=False),
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("slot", sa.Text, nullable=False),
    sa.Column("bus_id", sa.Text, nullable=False),  # '' where the report gave none
    sa.Column("first_seen", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.UniqueConstraint("gpu_id", "node_id", "host", "slot", "bus_id"),
)

results = sa.Table(
    "results", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False, index=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True, index=True),
    sa.Column("check_name", sa.Text, nullable=False),
    sa.Column("entity", sa.Text, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("severity", sa.Text, nullable=False),
    sa.Column("measured", sa.Text, nullable=False),  # JSON
    sa.Column("threshold", sa.Text, nullable=False),  # JSON
    sa.Column("unit", sa.Text, nullable=False),
    sa.Column("evidence", sa.Text, nullable=False),  # JSON
)

metrics = sa.Table(
    "metrics", metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),  # check[entity kind], as the trends key it
    sa.Column("entity", sa.Text, primary_key=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True, index=True),
    sa.Column("value", sa.Float, nullable=False),
)

events = sa.Table(
    "events", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("identity", sa.Text, nullable=False, unique=True),
    # drain, resume, remediation, rma, sweep, cluster-check-pair, localisation
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=True, index=True),
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True, index=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=True, index=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("at_text", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),  # JSON
)

unreadable = sa.Table(
    "unreadable", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("identity", sa.Text, nullable=False, unique=True),  # path and content digest
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), nullable=True, index=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("seen", sa.Float, nullable=False),
)

# revision 0002: retention keeps metrics past their age as one row per day
metric_daily = sa.Table(
    "metric_daily", metadata,
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id"), primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("entity", sa.Text, primary_key=True),
    sa.Column("day", sa.Text, primary_key=True),  # YYYY-MM-DD, UTC
    sa.Column("gpu_id", sa.Integer, sa.ForeignKey("gpus.id"), nullable=True, index=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("min", sa.Float, nullable=False),
    sa.Column("max", sa.Float, nullable=False),
    sa.Column("sum", sa.Float, nullable=False),
)
