"""Ship every node's report history to the operator: ``pyinfra inventory.py
deploy/fetch_reports.py [--limit HOST]``, then ``nodegate report reports/ --html fleet.html``.

The agent keeps the last 1,000 dated reports of each level on the node
(``<agent_report_dir>/<level>-<stamp>.json``, each with ``<stem>.summary.json`` beside it).
This copies the newest ``gate_history_keep`` of them with their summaries to
``<gate_fetch_dir>/<host>/history/``, only those not there yet: a dated report never changes,
so an hourly run moves only what the cron health check wrote since. The fleet view reads the
summaries (``nodegate report``: trends and the degrading list); a report that is also
``<level>-latest.json`` (deploy/validate.py) is counted once. Nothing is deleted on either
side. For fleets where copying files is the wrong shape, the Prometheus textfile metrics are
the path (docs/monitoring.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.facts.files import FindFiles
from pyinfra.operations import files

import nodegate.pyinfra_compat  # noqa: F401  (a lost SSH connection fails that host only)
from nodegate.report.fleet_summary import name_for
from nodegate.report.history import DATED_RE
from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file


def to_fetch(remote: Iterable[str], local_dir: Path, keep: int) -> list[tuple[str, Path]]:
    """(remote path, local path) of at most ``keep`` dated reports that ``local_dir`` lacks,
    those named latest first, each followed by its summary when the node has one.

    Chosen among the missing ones, not among all: after a clock step older reports carry
    names from the future, and a "newest ``keep`` by name, then the missing ones" choice
    would never fetch a report written after the clock was fixed. The name only decides
    which missing reports come in this run; the fleet view orders what it holds by each
    report's own sequence (``nodegate.report.order``)."""
    names = {os.path.basename(path): path for path in remote}

    def lacking(name: str) -> list[str]:
        """The report and its summary (where the node has one) the bastion does not have."""
        return [wanted for wanted in (name, name_for(name))
                if wanted in names and not (local_dir / wanted).exists()]

    dated = sorted(((m.group("stamp"), name) for name in names
                    if (m := DATED_RE.match(name)) and lacking(name)), reverse=True)[:keep]
    return [(names[wanted], local_dir / wanted)
            for _, name in sorted(dated, key=lambda item: item[1]) for wanted in lacking(name)]


@deploy("nodegate fetch reports (history)",
        data_defaults={**role_defaults("gate"), **role_defaults("agent")})
def fetch_reports() -> None:
    if not host.data.get("nodegate_profile"):
        host.noop("not a GPU node (no profile): no reports to fetch")
        return
    report_dir = str(host.data.get("agent_report_dir"))
    keep = int(host.data.get("gate_history_keep"))
    local_dir = Path(str(host.data.get("gate_fetch_dir"))) / host.name / "history"
    remote = host.get_fact(FindFiles, path=report_dir, maxdepth=1, fname="*.json") or []
    plan = to_fetch(remote, local_dir, keep)
    if not plan:
        host.noop(f"history in {local_dir} is up to date ({len(remote)} files on the node)")
        return
    for src, dest in plan:
        # force: the local copy is missing (checked above), so pyinfra need not stat it first
        files.get(name=f"fetch {os.path.basename(src)}", src=src, dest=str(dest),
                  create_local_dir=True, force=True)


if is_deploy_file(globals()):
    fetch_reports()
