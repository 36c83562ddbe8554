"""Retention by age: metric rows of runs older than the age become one row per node, metric,
entity and UTC day (count, min, max, sum: the mean and range a long trend reads), in one
transaction. Runs, their non-PASS evidence, identities, placements and events are kept: they
are small, and an RMA or an escalation needs them years later. The fleet view
(``report --db``) reads each run's fleet summary, which is kept too.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from nodegate.ledger import schema as t
from nodegate.ledger.engine import Ledger
from nodegate.ledger.ingest import _insert


def prune(ledger: Ledger, *, older_than_days: int, now: float | None = None) -> tuple[int, int]:
    """(metric rows folded, daily rows written or widened)."""
    cutoff = (time.time() if now is None else now) - older_than_days * 86400.0
    old_runs = sa.select(t.runs.c.id).where(t.runs.c.finished < cutoff)
    with ledger.write() as conn:
        if conn.dialect.name == "postgresql":
            day = sa.func.to_char(sa.func.timezone("UTC", sa.func.to_timestamp(t.runs.c.finished)),
                                  "YYYY-MM-DD")
        else:
            day = sa.func.strftime("%Y-%m-%d", t.runs.c.finished, "unixepoch")
        grouped = (sa.select(t.runs.c.node_id, t.metrics.c.key, t.metrics.c.entity,
                             day.label("day"), sa.func.max(t.metrics.c.gpu_id),
                             sa.func.count(), sa.func.min(t.metrics.c.value),
                             sa.func.max(t.metrics.c.value), sa.func.sum(t.metrics.c.value))
                   .join(t.runs, t.runs.c.id == t.metrics.c.run_id)
                   .where(t.runs.c.finished < cutoff)
                   .group_by(t.runs.c.node_id, t.metrics.c.key, t.metrics.c.entity, day))
        daily = conn.execute(sa.select(sa.func.count()).select_from(grouped.subquery())).scalar()
        stmt = _insert(conn, t.metric_daily).from_select(
            ["node_id", "key", "entity", "day", "gpu_id", "n", "min", "max", "sum"], grouped)
        ex, d = stmt.excluded, t.metric_daily.c
        stmt = stmt.on_conflict_do_update(
            index_elements=["node_id", "key", "entity", "day"],
            set_={"n": d.n + ex.n, "sum": d.sum + ex.sum,
                  "min": sa.case((ex.min < d.min, ex.min), else_=d.min),
                  "max": sa.case((ex.max > d.max, ex.max), else_=d.max)})
        conn.execute(stmt)
        folded = conn.execute(sa.delete(t.metrics).where(t.metrics.c.run_id.in_(old_runs)))
    return int(folded.rowcount or 0), int(daily or 0)
