"""A lost SSH connection fails that host only, not the whole pyinfra run.

Why (pyinfra 3.1 .. 3.10.0, paramiko 4.0): when a node's sshd goes away while operations
execute (the node powers off, reboots, crashes), paramiko's transport thread reads EOF and
stores ``EOFError``; the next ``Transport.open_channel`` (``SSHClient.exec_command``, SFTP)
re-raises that ``EOFError``. pyinfra's per-host handlers only catch ``(TimeoutError, OSError,
SSHException)``: ``pyinfra/api/facts.py:_get_fact`` around ``host.run_shell_command`` (a fact
read by an operation at execute time, e.g. ``files.put``'s remote checksum) and
``pyinfra/api/operations.py:_run_host_op`` around ``command.execute``. ``EOFError`` is
neither, so it escapes ``_run_host_op`` (the operation's command generator is not guarded at
all), the host's greenlet dies and ``_run_single_op``'s ``greenlet.get()`` re-raises it: the CLI
aborts every host mid-run. Upstream: pyinfra-dev/pyinfra#1220 (same traceback, open).

Fix: ``SSHConnector.run_shell_command``, ``put_file`` and ``get_file`` re-raise paramiko's
``EOFError`` as :class:`SSHConnectionLost`, an ``OSError`` *and* an ``SSHException``, so
every one of pyinfra's existing handlers treats it as that host's command error: pyinfra logs
``Command socket/SSH error``, marks the host failed and carries on with the others.

The same install keeps configuration facts per host until the host next runs a command
(:mod:`nodegate.fact_cache`): pyinfra 3 would read them again at every call.

Installed on import (deploy.py and deploy/*.py import this module), idempotent, and only for
the pyinfra minor versions whose handlers were read: :data:`CHECKED` (pyproject's ``deploy``
extra pins the same). Elsewhere nothing is patched and a warning says so: re-read the handlers
named above, update ``tests/roles/test_pyinfra_compat.py``'s snapshot of them, then add the
minor to :data:`CHECKED`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from paramiko import SSHException

logger = logging.getLogger(__name__)

#: (major, minor) of the pyinfra releases whose exception handlers were read: 3.1 (source) and
#: 3.10 (source and the lab, tests/roles/test_lab_e2e.py::test_node_stopped_mid_deploy_...).
#: The releases between were not read, so they are not patched.
CHECKED: frozenset[tuple[int, int]] = frozenset({(3, 1), (3, 10)})
PATCHED_METHODS = ("run_shell_command", "put_file", "get_file")
_MARK = "__nodegate_connection_lost__"


class SSHConnectionLost(ConnectionResetError, SSHException):
    """The SSH connection to a host dropped (paramiko raised ``EOFError``).

    Both an ``OSError`` and an ``SSHException``: pyinfra catches one or both at every
    per-host call site, never ``EOFError``.
    """


def pyinfra_version() -> tuple[int, ...] | None:
    """The installed pyinfra's leading numeric version parts, or None when unknown."""
    try:
        text = version("pyinfra")
    except PackageNotFoundError:
        return None
    match = re.match(r"(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def is_checked(found: tuple[int, ...] | None) -> bool:
    """Whether ``found`` is a minor version in :data:`CHECKED`."""
    return found is not None and tuple(found[:2]) in CHECKED


#: Methods that open an SFTP channel: on a dead transport pyinfra's
#: ``get_file_transfer_connection`` turns paramiko's "SSH session not active" into a
#: ``ConnectError``, which no per-host handler catches either (seen on the lab, CI run of
#: 2026-12-02: the first file upload after the node went down aborted every host).
SFTP_METHODS = ("put_file", "get_file")


def connection_lost_is_host_failure(method: Callable[..., Any],
                                    name: str | None = None) -> Callable[..., Any]:
    """Wrap a connector method so paramiko's ``EOFError`` (and, for the SFTP methods,
    pyinfra's ``ConnectError``) leaves it as SSHConnectionLost."""
    from pyinfra.api.exceptions import ConnectError

    name = name or method.__name__
    lost: tuple[type[BaseException], ...] = (EOFError,)
    if name in SFTP_METHODS:
        lost = (EOFError, ConnectError)

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except lost as e:
            host = getattr(getattr(self, "host", None), "name", "?")
            raise SSHConnectionLost(
                f"SSH connection to {host} lost during {name} "
                f"({'paramiko EOFError' if isinstance(e, EOFError) else e})"
            ) from e

    setattr(wrapper, _MARK, True)
    return wrapper


def install(connector: type[Any] | None = None) -> bool:
    """Patch ``connector`` (default pyinfra's SSHConnector) once; True when it is patched."""
    found = pyinfra_version()
    if not is_checked(found):
        logger.warning(
            "nodegate.pyinfra_compat: pyinfra %s is not a checked version (%s); a lost "
            "SSH connection may abort every host", found,
            ", ".join(f"{major}.{minor}" for major, minor in sorted(CHECKED)),
        )
        return False
    if connector is None:
        from pyinfra.connectors.ssh import SSHConnector

        from nodegate import fact_cache

        connector = SSHConnector
        fact_cache.install()
    for name in PATCHED_METHODS:
        method = getattr(connector, name)
        if not getattr(method, _MARK, False):
            setattr(connector, name, connection_lost_is_host_failure(method, name))
    return True


install()
