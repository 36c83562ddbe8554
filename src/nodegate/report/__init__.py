"""Node reports (``nodegate.report/1``) and what is rendered from them.

``model`` builds, writes, loads and validates the JSON report; ``junit``, ``prometheus`` and
``summary`` render it; ``exitcodes`` maps its verdict to the process exit code. Everything here
is standard library at import time (jsonschema loads on first validation), so the cron health
check can import it freely.

The names below are loaded on first use (PEP 562), not with the package: a submodule
(``report.outputs``, ``report.history``) imports without the renderers, so the cron health
check checks its output folders before the battery, and loads the renderers while the board
is read in its child process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    "exit_code_for": "nodegate.report.exitcodes",
    "render_junit": "nodegate.report.junit",
    "write_junit": "nodegate.report.junit",
    **dict.fromkeys(("SCHEMA_ID", "NodeReport", "build", "load", "schema", "to_json",
                     "validate", "write"), "nodegate.report.model"),
    "render_prometheus": "nodegate.report.prometheus",
    "write_prometheus": "nodegate.report.prometheus",
    "render_summary": "nodegate.report.summary",
    "Level": "nodegate.vocabulary",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:  # a submodule not imported yet: the import system imports it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
