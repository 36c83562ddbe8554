"""nodegate.pyinfra_compat: a host whose SSH connection drops fails alone (no lab, no SSH).

pyinfra's real SSHConnector and run_ops drive a fake paramiko client per host; the "lost"
host's client raises paramiko's EOFError once the run executes, as a powered-off node does.
"""

from __future__ import annotations

import io
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from paramiko import SSHException
from pyinfra.api.command import StringCommand
from pyinfra.api.config import Config
from pyinfra.api.inventory import Inventory
from pyinfra.api.operation import add_op, operation
from pyinfra.api.operations import run_ops
from pyinfra.api.state import State
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.context import host
from pyinfra.facts.server import Command
from pyinfra.operations import server

from nodegate import pyinfra_compat
from nodegate.pyinfra_compat import PATCHED_METHODS, SSHConnectionLost


class _Channel:
    def recv_exit_status(self) -> int:
        return 0


class _Out(io.StringIO):
    channel = _Channel()


class FakeClient:
    """paramiko.SSHClient stand-in: records commands; once ``lost``, raises EOFError the way
    ``Transport.open_channel`` re-raises the transport thread's EOF."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.lost = False

    def exec_command(self, command: str, get_pty: bool = False) -> tuple[Any, Any, Any]:
        if self.lost:
            raise EOFError()
        self.commands.append(command)
        return io.StringIO(), _Out("out\n"), _Out("")


@operation()
def probe() -> Generator[StringCommand, None, None]:
    """Reads a fact while the run executes (files.put's remote checksum does, on the lab)."""
    value = host.get_fact(Command, command="echo probe")
    yield StringCommand("echo", value)


def _state() -> tuple[State, dict[str, FakeClient]]:
    inventory = Inventory((["good", "lost"], {}))  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    clients: dict[str, FakeClient] = {}
    for h in inventory:
        assert isinstance(h.connector, SSHConnector)
        clients[h.name] = FakeClient()
        h.connector.client = clients[h.name]  # type: ignore[assignment]
        h.connected = True
        state.activate_host(h)
    return state, clients


@pytest.mark.parametrize("first", ["fact", "command"])
def test_lost_connection_fails_that_host_only(first: str) -> None:
    state, clients = _state()
    ops = [(probe, {}), (server.shell, {"commands": ["echo two"]})]
    if first == "command":
        ops.reverse()
    for op, kwargs in [*ops, (server.shell, {"commands": ["echo last"]})]:
        add_op(state, op, **kwargs)
    clients["lost"].lost = True

    run_ops(state)

    assert {h.name for h in state.failed_hosts} == {"lost"}
    assert any("echo last" in c for c in clients["good"].commands)
    good, lost = (state.get_results_for_host(state.inventory.get_host(n))
                  for n in ("good", "lost"))
    assert (good.error_ops, good.success_ops) == (0, 3)
    assert lost.error_ops == 1 and lost.success_ops == 0


@pytest.mark.parametrize("method", PATCHED_METHODS)
def test_eof_becomes_an_error_pyinfra_handles(method: str) -> None:
    class Fake:
        host = type("H", (), {"name": "node2"})()

        def _raise(self, *args: Any, **kwargs: Any) -> Any:
            raise EOFError()

        run_shell_command = put_file = get_file = _raise

    assert pyinfra_compat.install(Fake)
    with pytest.raises(SSHConnectionLost, match="node2 lost") as info:
        getattr(Fake(), method)("x")
    assert isinstance(info.value, OSError) and isinstance(info.value, SSHException)
    assert isinstance(info.value.__cause__, EOFError)


@pytest.mark.parametrize("method", ["put_file", "get_file"])
def test_sftp_on_a_dead_session_becomes_a_host_error(method: str) -> None:
    from pyinfra.api.exceptions import ConnectError

    class Fake:
        host = type("H", (), {"name": "node2"})()

        def _raise(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectError("Unable to establish SFTP connection.")

        run_shell_command = put_file = get_file = _raise

    assert pyinfra_compat.install(Fake)
    with pytest.raises(SSHConnectionLost, match="node2 lost during") as info:
        getattr(Fake(), method)("x")
    assert isinstance(info.value.__cause__, ConnectError)


def test_install_is_idempotent_and_other_errors_pass_through() -> None:
    def depth(name: str) -> int:
        method, n = getattr(SSHConnector, name), 0
        while hasattr(method, "__wrapped__"):
            method, n = method.__wrapped__, n + 1
        return n

    assert [depth(n) for n in PATCHED_METHODS] == [1, 1, 1]  # installed on import
    assert pyinfra_compat.install()
    assert [depth(n) for n in PATCHED_METHODS] == [1, 1, 1]

    class Fake:
        def run_shell_command(self) -> None:
            raise SSHException("SSH session not active")

        put_file = get_file = run_shell_command

    pyinfra_compat.install(Fake)
    with pytest.raises(SSHException) as info:
        Fake().run_shell_command()
    assert type(info.value) is SSHException


def test_unpatched_pyinfra_still_aborts_every_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the compat layer exists. When this fails, pyinfra handles the lost connection
    itself: drop nodegate.pyinfra_compat and its imports."""
    for name in PATCHED_METHODS:
        monkeypatch.setattr(SSHConnector, name, getattr(SSHConnector, name).__wrapped__)
    state, clients = _state()
    add_op(state, probe)
    clients["lost"].lost = True
    with pytest.raises(EOFError):
        run_ops(state)


def test_installed_pyinfra_is_a_checked_version() -> None:
    """A pyinfra outside CHECKED (see pyproject's bounds) leaves SSHConnector unpatched."""
    assert pyinfra_compat.is_checked(pyinfra_compat.pyinfra_version())
    assert pyinfra_compat.is_checked((3, 10, 2)) and pyinfra_compat.is_checked((3, 1, 0))
    assert not pyinfra_compat.is_checked((4, 0, 0))
    assert not pyinfra_compat.is_checked((3, 0, 9))
    assert not pyinfra_compat.is_checked((3, 5, 0))  # never read
    assert not pyinfra_compat.is_checked(None)


def test_outside_checked_versions_nothing_is_patched(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    class Fake:
        def run_shell_command(self) -> None:
            raise EOFError()

        put_file = get_file = run_shell_command

    monkeypatch.setattr(pyinfra_compat, "pyinfra_version", lambda: (4, 0, 0))
    assert not pyinfra_compat.install(Fake)
    assert "is not a checked version (3.1, 3.10)" in caplog.text
    with pytest.raises(EOFError):
        Fake().run_shell_command()


#: What the patch was read against, in the installed pyinfra: function -> the exception types
#: of its except clauses, in order. The patch turns paramiko's EOFError into an error the
#: per-host ``(TimeoutError, OSError, SSHException)`` handlers catch; if pyinfra changes them,
#: this fails: re-read the handlers (pyinfra_compat's docstring) before updating it.
HANDLERS_READ = {
    ("api/operations.py", "_run_host_op"): [
        ["TimeoutError"], ["NestedOperationError"], ["Exception"],
        ["TimeoutError", "OSError", "SSHException"],
        ["TimeoutError", "OSError", "SSHException"], ["Exception"]],
    ("api/facts.py", "_get_fact"): [
        ["TimeoutError", "OSError", "SSHException"], ["FactProcessError"]],
}


def _handlers(source: str, function: str) -> list[list[str]]:
    import ast

    tree = ast.parse(source)
    found = next(node for node in ast.walk(tree)
                 if isinstance(node, ast.FunctionDef) and node.name == function)
    out: list[list[str]] = []
    for node in ast.walk(found):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            out.append([ast.unparse(t) for t in types])
    return out


@pytest.mark.parametrize(("path", "function"), sorted(HANDLERS_READ))
def test_pyinfra_handlers_are_the_ones_read(path: str, function: str) -> None:
    import pyinfra

    source = (Path(pyinfra.__file__).parent / path).read_text()
    assert _handlers(source, function) == HANDLERS_READ[(path, function)]


class _Transport:
    def __init__(self, client: SilentClient) -> None:
        self.client = client
        self.keepalive: int | None = None

    def is_active(self) -> bool:
        return not self.client.silent

    def set_keepalive(self, interval: int) -> None:
        self.keepalive = interval


class SilentClient(FakeClient):
    """A link that goes silent (no RST): the command's channel ends when the keepalive's
    TCP_USER_TIMEOUT closes the socket, and the transport is no longer active."""

    def __init__(self) -> None:
        super().__init__()
        self.silent = False
        self.transport = _Transport(self)

    def get_transport(self) -> _Transport:
        return self.transport

    def exec_command(self, command: str, get_pty: bool = False) -> tuple[Any, Any, Any]:
        if "driver" in command:
            self.silent = True  # the link drops while this command runs
        return super().exec_command(command, get_pty)


def test_a_silent_link_fails_that_host_naming_the_operation(
        caplog: pytest.LogCaptureFixture) -> None:
    """A silent link: the lost host fails with 'connection to HOST lost during OPERATION' and the
    others finish their waves."""
    state, clients = _state()
    for h in state.inventory:
        clients[h.name] = SilentClient() if h.name == "lost" else clients[h.name]
        h.connector.client = clients[h.name]  # type: ignore[union-attr,assignment]
    add_op(state, server.shell, name="nvidia_driver: install the driver",
           commands=["echo install driver"], _if=None)
    add_op(state, server.shell, name="after", commands=["echo last"])
    run_ops(state)
    assert {h.name for h in state.failed_hosts} == {"lost"}
    assert any("echo last" in c for c in clients["good"].commands)
    assert any("connection to lost lost during nvidia_driver: install the driver (the SSH "
               "transport closed: no keepalive answered within 60 s)" in m
               for m in caplog.messages), caplog.messages


def test_keepalive_and_the_socket_bound_are_set_on_connect() -> None:
    import socket

    server_sock = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(server_sock.getsockname())
    b, _ = server_sock.accept()
    try:
        client = SilentClient()
        client.transport.sock = a  # type: ignore[attr-defined]

        class Conn:
            def __init__(self) -> None:
                self.client = client
                self.host = type("H", (), {"name": "n1", "data": {"ssh_keepalive_s": 5,
                                                                  "ssh_keepalive_count": 3}})()

        pyinfra_compat.set_keepalive(Conn())
        assert client.transport.keepalive == 5
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
            assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 15000
        assert pyinfra_compat.bound_s(Conn()) == 15
    finally:
        for s in (a, b, server_sock):
            s.close()


def test_connect_is_wrapped_once() -> None:
    assert getattr(SSHConnector.connect, "__wrapped__", None) is not None
    assert not hasattr(SSHConnector.connect.__wrapped__, "__wrapped__")
