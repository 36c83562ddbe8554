"""Run snmpsim's command responder for the lab PDU, staying root.

snmpsim insists on dropping privileges when started as root, and the user it drops to cannot
read this interpreter when it lives under /root (pyenv). The agent binds one lab address
only, and ``lab down`` stops it by pid, so keeping root for its life is the smaller risk.

    python -m nodegate_lab.pdu_agent --data-dir=DIR --agent-udpv4-endpoint=10.77.7.200:1161
"""

from __future__ import annotations

import os
import sys
from types import TracebackType


class _KeepPrivileges:
    """Stands in for ``snmpsim.daemon.PrivilegesOf``: enter and leave change nothing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


def main() -> int:
    import importlib

    # imported by name: snmpsim ships no type information
    daemon = importlib.import_module("snmpsim.daemon")
    responder = importlib.import_module("snmpsim.commands.responder")
    if os.geteuid() == 0:
        setattr(daemon, "PrivilegesOf", _KeepPrivileges)  # noqa: B010
    sys.argv = ["snmpsim-command-responder", *sys.argv[1:]]
    return int(responder.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
