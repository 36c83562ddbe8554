"""nodegate.fact_cache: a fact is read from the node once, until that node runs a command.

pyinfra's real State, operations and SSHConnector run against a fake paramiko client that
records every remote command, so the counts below are the SSH round trips a run would make.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from pyinfra.api.command import StringCommand
from pyinfra.api.operation import add_op, operation
from pyinfra.api.operations import run_ops
from pyinfra.context import host
from pyinfra.facts.server import Command, Which
from pyinfra.operations import server

from nodegate import fact_cache, pyinfra_compat
from tests.roles.test_pyinfra_compat import FakeClient, _state

SEEN: list[Any] = []


@operation()
def reads(twice: bool = False) -> Generator[StringCommand, None, None]:
    """Reads a configuration fact (kept) and, optionally, the same again; changes nothing."""
    SEEN.append(host.get_fact(Which, command="nvidia-smi"))
    if twice:
        SEEN.append(host.get_fact(Which, command="nvidia-smi"))
    yield from ()


@operation()
def reads_fresh() -> Generator[StringCommand, None, None]:
    """Reads a fact that must never be kept (server.Command: anything, e.g. GPU processes)."""
    SEEN.append(host.get_fact(Command, command="nvidia-smi --query-compute-apps=pid"))
    yield from ()


def _count(client: FakeClient, needle: str) -> int:
    return sum(needle in c for c in client.commands)


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert pyinfra_compat.install()
    SEEN.clear()


def test_a_noop_run_asks_each_node_once() -> None:
    """Prepare and execute both run every generator: without the cache that is 6 reads."""
    state, clients = _state()
    for _ in range(2):
        add_op(state, reads, twice=True)
    run_ops(state)
    for client in clients.values():
        assert _count(client, "nvidia-smi") == 1, client.commands
    assert len(SEEN) == 2 * 2 * 2 * 2  # hosts x ops x phases x reads


def test_a_command_run_on_the_node_makes_the_next_read_go_to_the_node() -> None:
    state, clients = _state()
    add_op(state, reads)
    add_op(state, server.shell, commands=["touch /etc/changed"])
    add_op(state, reads)
    run_ops(state)
    for client in clients.values():
        # prepare: 1 read (the second is kept); execute: the first op's read is kept, the
        # shell command drops it, the third op reads again
        assert _count(client, "command -v nvidia-smi") == 2, client.commands
        assert _count(client, "touch /etc/changed") == 1


def test_facts_that_must_be_fresh_are_always_read() -> None:
    state, clients = _state()
    add_op(state, reads_fresh)
    add_op(state, reads_fresh)
    run_ops(state)
    for client in clients.values():
        assert _count(client, "query-compute-apps") == 4, client.commands


def test_each_caller_gets_its_own_copy() -> None:
    class Host:
        current_op_global_arguments: dict[str, Any] = {}
        calls = 0

        def get_fact(self, cls: Any, *args: Any, **kwargs: Any) -> Any:
            Host.calls += 1
            return {"nvidia": ["570.133.20"]}

        def run_shell_command(self, *args: Any, **kwargs: Any) -> None:
            return None

        put_file = get_file = rsync = run_shell_command

    fact_cache.install(Host)
    node = Host()
    first = node.get_fact(Which, command="x")
    first["nvidia"].append("mutated by a caller")
    assert node.get_fact(Which, command="x") == {"nvidia": ["570.133.20"]}
    assert node.get_fact(Which, command="y") == {"nvidia": ["570.133.20"]}
    assert Host.calls == 2  # x once, y once
    node.run_shell_command("apt-get install -y nvidia-driver")
    node.get_fact(Which, command="x")
    assert Host.calls == 3
    fact_cache.install(Host)  # idempotent: one wrapper, not two
    assert Host.get_fact.__wrapped__.__name__ == "get_fact"
    assert not hasattr(Host.get_fact.__wrapped__, "__wrapped__")
