"""Node reports (``nodegate.report/1``) and what is rendered from them.

``model`` builds, writes, loads and validates the JSON report; ``junit``, ``prometheus`` and
``summary`` render it; ``exitcodes`` maps its verdict to the process exit code. Everything here
is standard library at import time (jsonschema loads on first validation), so the cron health
check can import it freely.
"""

from __future__ import annotations

from nodegate.report.exitcodes import exit_code_for
from nodegate.report.junit import render_junit, write_junit
from nodegate.report.model import (
    SCHEMA_ID,
    NodeReport,
    build,
    load,
    schema,
    to_json,
    validate,
    write,
)
from nodegate.report.prometheus import render_prometheus, write_prometheus
from nodegate.report.summary import render_summary
from nodegate.vocabulary import Level

__all__ = [
    "SCHEMA_ID",
    "Level",
    "NodeReport",
    "build",
    "exit_code_for",
    "load",
    "render_junit",
    "render_prometheus",
    "render_summary",
    "schema",
    "to_json",
    "validate",
    "write",
    "write_junit",
    "write_prometheus",
]
