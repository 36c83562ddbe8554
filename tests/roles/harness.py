"""Run a role against facts, collect the commands it would run: pyinfra's own test shape.

A real pyinfra State and Host run the role's real operations; only ``host.get_fact`` is
answered from the scenario (facts by name and arguments, plus a fake file tree for pyinfra's
file facts). ``converged=True`` runs the role once, applies its uploads to the file tree, then
runs it again: that second plan is what a converged node would get. ``executing=True`` walks
the operations as pyinfra executes them: shell commands are only recorded, a download copies
``remote`` (what the node holds once those commands ran), and a Python command runs; one that
fails stops its operation and the host, as in pyinfra.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyinfra.api.command import (
    FileDownloadCommand,
    FileUploadCommand,
    FunctionCommand,
    StringCommand,
)
from pyinfra.api.config import Config
from pyinfra.api.exceptions import DeployError
from pyinfra.api.inventory import Inventory
from pyinfra.api.state import State
from pyinfra.context import ctx_host, ctx_state

OS_RELEASES: dict[str, dict[str, Any]] = {
    "ubuntu22": {"name": "Ubuntu", "major": 22, "minor": 4,
                 "release_meta": {"ID": "ubuntu", "VERSION_CODENAME": "jammy"}},
    "ubuntu24": {"name": "Ubuntu", "major": 24, "minor": 4,
                 "release_meta": {"ID": "ubuntu", "VERSION_CODENAME": "noble"}},
    "debian12": {"name": "Debian", "major": 12, "minor": None,
                 "release_meta": {"ID": "debian", "VERSION_CODENAME": "bookworm"}},
    "rhel9": {"name": "RedHat", "major": 9, "minor": 4, "release_meta": {"ID": "rhel"}},
    "rocky9": {"name": "Rocky Linux", "major": 9, "minor": 4, "release_meta": {"ID": "rocky"}},
}
FILE_FACTS = {"files.File", "files.Sha1File", "files.Md5File", "files.Sha256File",
              "files.Directory", "files.Link", "files.FileContents", "files.FindInFile"}


@dataclass
class Op:
    name: str
    conditional: bool
    commands: list[str]


@dataclass
class Result:
    ops: list[Op] = field(default_factory=list)
    uploads: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    noops: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # executing: operations that failed

    @property
    def commands(self) -> list[str]:
        return [c for op in self.ops for c in op.commands]

    def unconditional_changes(self) -> list[Op]:
        return [op for op in self.ops if op.commands and not op.conditional]

    def golden(self) -> list[list[Any]]:
        return [[op.name + (" [if changed]" if op.conditional else ""), op.commands]
                for op in self.ops if op.commands]


def _key(kwargs: dict[str, Any]) -> str:
    return ",".join(f"{k}={v if not isinstance(v, list) else ' '.join(map(str, v))}"
                    for k, v in sorted(kwargs.items()))


class FakeFacts:
    """Answers get_fact from a scenario: ``facts`` by fact name, then ``files``."""

    def __init__(self, os_name: str, facts: dict[str, Any], files: dict[str, Any]) -> None:
        self.facts = {"server.LinuxDistribution": OS_RELEASES[os_name],
                      "server.KernelVersion": "6.8.0-45-generic", "server.Kernel": "Linux",
                      **facts}
        self.files: dict[str, dict[str, Any]] = {}
        self.dirs: set[str] = {"/", "/etc", "/usr", "/usr/local", "/var", "/var/lib", "/run"}
        self.dir_owners: dict[str, dict[str, str]] = {}  # chown'ed directories
        for path, entry in files.items():
            self.add_file(path, entry if isinstance(entry, dict) else {"content": entry})

    def add_file(self, path: str, entry: dict[str, Any]) -> None:
        self.files[path] = {"mode": 644, "user": "root", "group": "root", **entry}
        parent = str(Path(path).parent)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = str(Path(parent).parent)

    def __call__(self, cls: Any, *args: Any, **kwargs: Any) -> Any:
        name = cls.name.removeprefix("nodegate.facts.")
        if args:
            import inspect

            params = list(inspect.signature(cls().command).parameters)
            kwargs = {**dict(zip(params, args, strict=False)), **kwargs}
        kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
        if name in self.facts:
            value = self.facts[name]
            if kwargs and isinstance(value, dict) and any("=" in k for k in value):
                return value.get(_key(kwargs), cls().default() if hasattr(cls, "default")
                                 else None)
            return value
        if name in FILE_FACTS:
            return self._file_fact(name, kwargs)
        default = cls.default if isinstance(cls.default, type) else cls().default
        return default()

    def _file_fact(self, name: str, kwargs: dict[str, Any]) -> Any:
        path = kwargs.get("path", "")
        entry = self.files.get(path)
        if name == "files.Directory":
            return {"mode": 755, "user": "root", "group": "root",
                    **self.dir_owners.get(path, {})} if path in self.dirs else None
        if name == "files.Link":
            return None
        if entry is None:
            return [] if name == "files.FindInFile" else None
        content = str(entry["content"])
        if name == "files.File":
            return {"mode": entry["mode"], "user": entry["user"], "group": entry["group"],
                    "size": len(content)}
        if name == "files.Sha1File":
            return hashlib.sha1(content.encode()).hexdigest()
        if name == "files.FileContents":
            return content.splitlines()
        if name == "files.FindInFile":
            return [line for line in content.splitlines() if re.search(kwargs["pattern"], line)]
        return None


def _render(command: Any, uploads: dict[str, str]) -> str:
    if isinstance(command, StringCommand):
        return str(command.get_raw_value())
    if isinstance(command, FileUploadCommand):
        src = command.src
        text = src.getvalue() if hasattr(src, "getvalue") else Path(str(src)).read_text()
        if isinstance(text, bytes):  # a key file: ASCII test data, kept as text here
            text = text.decode("latin-1")
        uploads[command.dest] = text
        return f"upload {command.dest}"
    if isinstance(command, FileDownloadCommand):
        return f"download {command.src} {command.dest}"
    if isinstance(command, FunctionCommand):
        return f"function {command.function.__name__}"
    return repr(command)


def _execute(command: Any, state: State, host: Any, remote: dict[str, str]) -> bool:
    """What executing ``command`` does here: download from ``remote``, run Python commands."""
    if isinstance(command, FileDownloadCommand):
        if command.src not in remote:
            return False  # as the real download of a missing file: the operation fails
        Path(str(command.dest)).write_text(remote[command.src], encoding="utf-8")
    elif isinstance(command, FunctionCommand):
        return command.execute(state, host, {}) is not False  # type: ignore[arg-type]
    return True


@dataclass
class Other:
    """Another inventory host the role reads (the controller reads its nodes): its data,
    facts and groups; it runs nothing."""

    data: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    groups: tuple[str, ...] = ("gpu_nodes",)


def run(role: Any, *, os: str = "ubuntu22", data: dict[str, Any] | None = None,
        facts: dict[str, Any] | None = None, files: dict[str, Any] | None = None,
        converged: bool = False, executing: bool = False,
        remote: dict[str, str] | None = None, others: dict[str, Other] | None = None) -> Result:
    fake = FakeFacts(os, facts or {}, files or {})
    if converged:
        first = _run_once(role, data or {}, fake, others=others)
        if first.error:
            return first
        _apply(fake, first)
    return _run_once(role, data or {}, fake, executing=executing, remote=remote or {},
                     others=others)


def os_of(fake: FakeFacts) -> str:
    """The OS name a FakeFacts answers for (its LinuxDistribution)."""
    release = fake.facts["server.LinuxDistribution"]
    return next(k for k, v in OS_RELEASES.items() if v is release)


def _apply(fake: FakeFacts, result: Result) -> None:
    """What a converged node looks like: uploads written, modes and directories applied."""
    for dest, text in result.uploads.items():
        fake.add_file(dest, {"content": text})
    for command in result.commands:
        for match in re.finditer(r"mkdir -p '?([^' ;]+)'?", command):
            fake.dirs.add(match.group(1))
        for match in re.finditer(r"chmod (\d+) '?([^' ;]+)'?", command):
            if match.group(2) in fake.files:
                fake.files[match.group(2)]["mode"] = int(match.group(1))
        for match in re.finditer(r"chown ([a-z_]+):([a-z_]+) '?([^' ;]+)'?", command):
            if match.group(3) in fake.files:
                fake.files[match.group(3)].update(user=match.group(1), group=match.group(2))
            elif match.group(3) in fake.dirs:
                fake.dir_owners[match.group(3)] = {"user": match.group(1),
                                                   "group": match.group(2)}


def _run_once(role: Any, data: dict[str, Any], fake: FakeFacts, *, executing: bool = False,
              remote: dict[str, str] | None = None,
              others: dict[str, Other] | None = None) -> Result:
    others = others or {}
    names = [("testhost", dict(data)), *((n, dict(o.data)) for n, o in others.items())]
    groups: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for name, other in others.items():
        for group in other.groups:
            groups.setdefault(group, ([], {}))[0].append(name)
    inventory = Inventory((names, {}), **groups)  # type: ignore[no-untyped-call]
    state = State(inventory, Config())  # type: ignore[no-untyped-call]
    for name, other in others.items():
        peer = inventory.get_host(name)
        peer.get_fact = FakeFacts(os_of(fake), other.facts, {})  # type: ignore[method-assign,assignment]
        peer.connected = True
    host = inventory.get_host("testhost")
    host.get_fact = fake  # type: ignore[method-assign,assignment]
    host.connected = True
    result = Result()
    host.noop = result.noops.append  # type: ignore[method-assign,assignment]
    with ctx_state.use(state), ctx_host.use(host):
        try:
            role()
        except DeployError as exc:
            result.error = str(exc)
        state.is_executing = executing
        if executing:
            result.noops.clear()  # from here on: what executing logs
        for op_hash in state.get_op_order():  # type: ignore[no-untyped-call]
            op_data = state.ops[host].get(op_hash)
            if op_data is None or result.failed:
                continue
            name = min(state.op_meta[op_hash].names, default=op_hash)
            conditional = op_data.global_arguments.get("_if") not in (None, [])
            commands = []
            with ctx_host.use(host):
                for command in op_data.command_generator():
                    commands.append(_render(command, result.uploads))
                    if executing and not _execute(command, state, host, remote or {}):
                        result.failed.append(name)
                        break
            result.ops.append(Op(name, conditional, commands))
    return result
