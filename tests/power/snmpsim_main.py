"""Run snmpsim's command responder; as root, skip its privilege drop.

snmpsim refuses to run as root unless it drops to another user, and after the drop that user
cannot import the rest of Python from a root-only interpreter prefix (pyenv under /root).
The tests bind to 127.0.0.1 only, so staying root for the length of a test is harmless.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any


class _StayPut(contextlib.AbstractContextManager[None]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> int:
    from snmpsim import daemon
    from snmpsim.commands import responder

    if os.geteuid() == 0:
        daemon.PrivilegesOf = _StayPut  # type: ignore[misc,assignment]
    sys.argv = ["snmpsim-command-responder", *sys.argv[1:]]
    return int(responder.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
