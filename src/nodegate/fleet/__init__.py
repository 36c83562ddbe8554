"""The fleet view: ``nodegate report DIR`` over many node reports.

``aggregate`` reduces each report to a cached summary and compares metrics across nodes,
``render`` prints text/JSON, ``html`` writes the self-contained HTML report, ``synthetic``
makes realistic reports for tests and the benchmark.
"""

from __future__ import annotations

from nodegate.fleet.aggregate import FleetView, MetricView, NodeView, Outlier, aggregate

__all__ = ["FleetView", "MetricView", "NodeView", "Outlier", "aggregate"]
