"""nodegate.fact_cache: a fact is read from the node once, until that node runs a command.

pyinfra's real State, operations and SSHConnector run against a fake paramiko client that
records every remote command, so the counts below are the SSH round trips a run would make.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api.command import StringCommand
from pyinfra.api.operation import add_op, operation
from pyinfra.api.operations import run_ops
from pyinfra.context import host
from pyinfra.facts.files import Directory, File, Sha1File
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


def test_each_caller_gets_its_own_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGATE_FACT_READS_DIR", str(tmp_path))
    class Host:
        name = "node9"
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


class LocalClient(FakeClient):
    """Runs each command in a real local shell: the batch script and the facts' own commands
    and parsers are exercised for real, only SSH is skipped."""

    def exec_command(self, command: str, get_pty: bool = False) -> tuple[Any, Any, Any]:
        self.commands.append(command)
        done = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)

        class Channel:
            def recv_exit_status(self) -> int:
                return done.returncode

        out, err = io.StringIO(done.stdout), io.StringIO(done.stderr)
        out.channel = err.channel = Channel()  # type: ignore[attr-defined]
        return io.StringIO(), out, err


@operation()
def reads_files(paths: list[str]) -> Generator[StringCommand, None, None]:
    for path in paths:
        SEEN.append((host.get_fact(File, path=path), host.get_fact(Directory, path=path),
                     host.get_fact(Sha1File, path=path), host.get_fact(Which, command="sh")))
    yield from ()


def _local_run(paths: list[str]) -> list[LocalClient]:
    state, _ = _state()
    local = []
    for h in state.inventory:
        h.connector.client = LocalClient()  # type: ignore[union-attr]
        local.append(h.connector.client)  # type: ignore[union-attr]
    add_op(state, reads_files, paths=paths)
    run_ops(state)
    return local  # type: ignore[return-value]


def test_the_next_run_asks_last_runs_questions_in_one_round_trip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEGATE_FACT_READS_DIR", str(tmp_path / "reads"))
    monkeypatch.setattr(fact_cache, "_LEARNED", {})
    files_ = [tmp_path / "a.conf", tmp_path / "b.conf", tmp_path / "missing"]
    files_[0].write_text("one\n")
    files_[1].write_text("two\n")
    paths = [str(p) for p in files_]

    first = _local_run(paths)
    assert all(len(c.commands) == 3 * 3 + 1 for c in first)  # 3 facts per path + Which once
    fact_cache.remember()
    assert sorted(p.name for p in (tmp_path / "reads").iterdir()) == ["good.json", "lost.json"]
    first_values, SEEN[:] = list(SEEN), []

    second = _local_run(paths)
    for client in second:
        assert len(client.commands) == 1, client.commands  # one batch, everything kept
        assert "@@nodegate-fact-part" in client.commands[0]
    # the same values pyinfra's own reads gave; but atime: the first run's sha1sum read the
    # files, which moves their atime (relatime) into the next second now and then
    assert _without_atime(first_values) == _without_atime(SEEN)


def _without_atime(seen: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple({k: v for k, v in value.items() if k != "atime"} if isinstance(value, dict)
                  else value for value in row) for row in seen]


def test_a_stale_or_broken_list_costs_reads_not_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = tmp_path / "reads"
    reads.mkdir()
    monkeypatch.setenv("NODEGATE_FACT_READS_DIR", str(reads))
    monkeypatch.setattr(fact_cache, "_LEARNED", {})
    target = tmp_path / "a.conf"
    target.write_text("one\n")
    (reads / "good.json").write_text(json.dumps([
        ["files.NoSuchFact", {"path": "/x"}], ["files.File", {"no_such_arg": 1}], "junk",
        ["files.Sha1File", {"path": str(target)}], ["files.File", {"path": str(tmp_path)}]]))
    (reads / "lost.json").write_text("{not json")
    SEEN.clear()
    clients = _local_run([str(target)])
    good, lost = clients
    assert _without_atime(SEEN[:1]) == _without_atime(SEEN[1:2])  # one host's sha1sum moves it
    assert SEEN[0][2] == hashlib.sha1(b"one\n").hexdigest()
    # good: one batch (the Sha1File and the directory's File were kept), then the rest read
    assert "@@nodegate-fact-part" in good.commands[0] and len(good.commands) == 1 + 3
    assert not any("@@nodegate-fact-part" in c for c in lost.commands)


def test_split_keeps_only_whole_parts() -> None:
    lines = ["@@nodegate-fact-part-0", "a", "@@nodegate-fact-part-rc-0=0",
             "@@nodegate-fact-part-1", "@@nodegate-fact-part-rc-1=1",
             "@@nodegate-fact-part-2", "cut short"]
    assert fact_cache._split(lines, 3) == {0: (0, ["a"]), 1: (1, [])}
