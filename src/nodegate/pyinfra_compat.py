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

A link that goes silent (no RST: a cable, a switch port, a node hung in the kernel) is not an
EOF: without keepalives paramiko waits on the socket for TCP's own give-up, 15 minutes or more,
and pyinfra's waves hold every other host behind that one (240 s, then killed, in a fault test). So
``connect`` also turns on paramiko's keepalive every ``ssh_keepalive_s`` seconds and sets the
socket's ``TCP_USER_TIMEOUT`` to ``ssh_keepalive_s x ssh_keepalive_count``: unacknowledged data
(the keepalives themselves) older than that closes the socket, the transport dies, and the
command in flight ends; ``run_shell_command`` then finds the transport inactive and raises
:class:`SSHConnectionLost` ``connection to HOST lost during OPERATION`` (the operation's name,
from ``host.executing_op_hash``), a host error like the EOF above. The knobs are host data
(inventory.py fills in roles/defaults.py's values where the site sets none).

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
#: The keepalive knobs' values where a host's data has none (roles/defaults.py has the same).
KEEPALIVE_S = 15
KEEPALIVE_COUNT = 4


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


def operation_name(connector: Any, fallback: str) -> str:
    """The operation ``connector``'s host is executing (its names, as pyinfra prints them),
    else ``fallback`` (the connector method)."""
    host = getattr(connector, "host", None)
    op_hash = getattr(host, "executing_op_hash", None)
    state = getattr(connector, "state", None) or getattr(host, "state", None)
    try:
        names = state.get_op_meta(op_hash).names if op_hash and state else None
    except (AttributeError, KeyError):
        names = None
    return ", ".join(sorted(names)) if names else fallback


def transport_lost(connector: Any) -> bool:
    """True when the connector's SSH transport exists and is no longer active (a keepalive
    timed out, the peer went away): the command that just ended did not end on the node."""
    client = getattr(connector, "client", None)
    get_transport = getattr(client, "get_transport", None)
    if get_transport is None:
        return False
    transport = get_transport()
    return transport is not None and not transport.is_active()


def connection_lost_is_host_failure(method: Callable[..., Any],
                                    name: str | None = None) -> Callable[..., Any]:
    """Wrap a connector method so paramiko's ``EOFError`` (and, for the SFTP methods,
    pyinfra's ``ConnectError``), or a command that ended because the transport died, leaves
    it as SSHConnectionLost naming the host and the operation."""
    from pyinfra.api.exceptions import ConnectError

    name = name or method.__name__
    lost: tuple[type[BaseException], ...] = (EOFError,)
    if name in SFTP_METHODS:
        lost = (EOFError, ConnectError)

    def _lost(self: Any, why: str) -> SSHConnectionLost:
        host = getattr(getattr(self, "host", None), "name", "?")
        return SSHConnectionLost(f"connection to {host} lost during "
                                 f"{operation_name(self, name)} ({why})")

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except lost as e:
            raise _lost(self, "paramiko EOFError" if isinstance(e, EOFError) else str(e)) from e
        except (OSError, SSHException) as e:
            if transport_lost(self):
                raise _lost(self, f"{type(e).__name__}: {e}") from e
            raise
        if transport_lost(self):
            raise _lost(self, "the SSH transport closed: no keepalive answered within "
                        f"{bound_s(self)} s")
        return result

    setattr(wrapper, _MARK, True)
    return wrapper


def _data(connector: Any, key: str, default: int) -> int:
    data = getattr(getattr(connector, "host", None), "data", None)
    value = data.get(key) if data is not None else None
    return int(default if value is None else value)


def bound_s(connector: Any) -> int:
    """Seconds a silent link may last before the connection is given up."""
    return (_data(connector, "ssh_keepalive_s", KEEPALIVE_S)
            * _data(connector, "ssh_keepalive_count", KEEPALIVE_COUNT))


def set_keepalive(connector: Any) -> None:
    """paramiko keepalives every ``ssh_keepalive_s`` and, on Linux, ``TCP_USER_TIMEOUT`` of
    ``ssh_keepalive_s x ssh_keepalive_count`` on the socket (0 turns both off)."""
    import socket

    interval = _data(connector, "ssh_keepalive_s", KEEPALIVE_S)
    client = getattr(connector, "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None or interval <= 0:
        return
    transport.set_keepalive(interval)
    sock = getattr(transport, "sock", None)
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
    if isinstance(sock, socket.socket) and user_timeout is not None and \
            sock.family in (socket.AF_INET, socket.AF_INET6):  # a proxy command's is not TCP
        sock.setsockopt(socket.IPPROTO_TCP, user_timeout, bound_s(connector) * 1000)


def keepalive_on_connect(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``SSHConnector.connect`` so every new connection gets ``set_keepalive``."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        set_keepalive(self)
        return result

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
    connect = getattr(connector, "connect", None)
    if connect is not None and not getattr(connect, _MARK, False):
        connector.connect = keepalive_on_connect(connect)  # type: ignore[method-assign]
    return True


install()
