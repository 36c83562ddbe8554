"""Read a host's configuration facts once per run until something runs on that host.

Why: pyinfra 3 reads a fact again at every ``host.get_fact`` call, and runs each operation's
generator twice (prepare, then execute), so a no-op rerun of the bring-up asks every node the
same questions over SSH again and again: on 4 lab nodes each host answered 97 remote commands,
28 of them repeats of a read made moments before (docs/dev/benchmarks.md). On 2 shared
cores those round trips are the rerun's cost, and they grow with the number of hosts.

The rule that keeps this correct: a fact describes the node, and the node only changes when a
command of this run executes on it. So a value read is kept for that host until the host next
runs an operation's command, uploads or downloads a file (``Host.run_shell_command``,
``put_file``, ``get_file``, ``rsync`` outside a fact read); then the host's cache is dropped
and the next read goes to the node. While preparing nothing executes, so repeats are served
from the cache; while executing a no-op rerun, nothing executes either, so the second pass of
every generator is served from the cache too.

Two more steps make a no-op rerun nearly free of round trips. :func:`prefetch` reads many
facts in one SSH command: each part is the fact's own command and its output goes through the
fact's own ``process``, so a value kept is the value pyinfra would have read. And each host's
questions (fact names and arguments, never values) are kept between runs
(:func:`reads_dir`): on its first read of the next run a host is asked them all at once. On a
1-node lab rerun that took the remote reads from 88 to 3 (docs/dev/benchmarks.md).

Only facts that describe configuration state are kept (:data:`CACHEABLE`). Facts that must be
fresh at the moment they are read (GPU processes and the Slurm state before a reboot, the gate
and join commands, ad-hoc ``server.Command``) are never kept. Each caller gets its own copy.

Installed by :func:`nodegate.pyinfra_compat.install`, for the pyinfra versions whose fact and
host code was read (``CHECKED`` there: ``pyinfra/api/facts.py:get_fact``, ``Host.get_fact`` and
the Host methods above). The role tests' harness answers ``host.get_fact`` itself and is not
affected.
"""

from __future__ import annotations

import atexit
import copy
import functools
import importlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra.api.arguments import pop_global_arguments
from pyinfra.api.command import StringCommand
from pyinfra.api.facts import FactBase
from typing_extensions import override

from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text, read_text

#: Fact names (``FactBase.name``: module path under ``pyinfra.facts``, or the full dotted name
#: for ours) whose value only changes when a command runs on the node.
CACHEABLE: frozenset[str] = frozenset({
    "server.LinuxDistribution", "server.KernelVersion", "server.Kernel", "server.Os",
    "server.Arch", "server.Which",
    "files.File", "files.Directory", "files.Link", "files.Sha1File", "files.Sha256File",
    "files.Md5File", "files.FindInFile", "files.FileContents",
    "deb.DebPackages", "rpm.RpmPackages",
    "systemd.SystemdStatus", "systemd.SystemdEnabled",
    "nodegate.facts.packages.HeldPackages", "nodegate.facts.packages.VenvDistributions",
    "nodegate.facts.virt.Container",
    "nodegate.facts.kernel.LoadedModuleVersions", "nodegate.facts.kernel.InstalledModule",
    "nodegate.facts.storage.Blkid", "nodegate.facts.storage.MdArrays",
    "nodegate.facts.storage.MdSuperblocks", "nodegate.facts.pcie.AcsState",
})
#: Host methods that act on the node when called outside a fact read.
ACTING_METHODS = ("run_shell_command", "put_file", "get_file", "rsync")
#: Connector arguments that change who runs a read, where and how (pyinfra's
#: ``ConnectorArguments``): the rest (timeouts, exit codes, pty) do not change its answer.
IDENTITY_KEYS = ("_sudo", "_sudo_user", "_use_sudo_login", "_preserve_sudo_env", "_su_user",
                 "_use_su_login", "_preserve_su_env", "_su_shell", "_doas", "_doas_user",
                 "_dzdo", "_dzdo_user", "_shell_executable", "_chdir", "_env")
_MARK = "__nodegate_fact_cache__"


class _HostCache:
    """One host's kept values, and whether a fact read is in progress on it."""

    __slots__ = ("reading", "recalled", "values")

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], Any] = {}
        self.reading = 0
        self.recalled = False


logger = logging.getLogger(__name__)
_CACHES: WeakKeyDictionary[Any, _HostCache] = WeakKeyDictionary()
#: host name -> this run's cacheable reads, as JSON ``[fact name, kwargs]``
_LEARNED: dict[str, set[str]] = {}
STATS = {"served": 0, "read": 0, "dropped": 0, "prefetched": 0}


def _cache_of(host: Any) -> _HostCache:
    found = _CACHES.get(host)
    if found is None:
        found = _CACHES[host] = _HostCache()
    return found


def fact_name(cls: Any) -> str:
    """``FactBase.name`` (pyinfra's own facts: ``files.File``; ours: the dotted path)."""
    return str(getattr(cls, "name", "") or f"{cls.__module__}.{cls.__name__}")


def _who(host: Any) -> tuple[tuple[str, str], ...]:
    """The connector arguments a read runs under (sudo, su user, shell, chdir, env), resolved
    as pyinfra resolves them: an operation's own values, else its deploy's, the host's data,
    the config. Read outside an operation (a role's body) and inside one with the same
    defaults, the same fact is the same read."""
    state = getattr(host, "state", None)
    if state is None:
        return ()
    resolved, _ = pop_global_arguments(state, host, dict(host.current_op_global_arguments or {}))
    return tuple((k, repr(resolved.get(k))) for k in IDENTITY_KEYS)


def _key(host: Any, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    return (cls, repr(args), repr(sorted(kwargs.items())), _who(host))


def cached_get_fact(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``Host.get_fact``: answer a :data:`CACHEABLE` fact from this host's cache."""

    @functools.wraps(method)
    def get_fact(self: Any, cls: Any, *args: Any, **kwargs: Any) -> Any:
        cache = _cache_of(self)
        if fact_name(cls) not in CACHEABLE:
            cache.reading += 1
            try:
                return method(self, cls, *args, **kwargs)
            finally:
                cache.reading -= 1
        if not cache.recalled:
            cache.recalled = True
            _recall(self)
        if not args:
            _learn(self, cls, kwargs)
        key = _key(self, cls, args, kwargs)
        if key in cache.values:
            STATS["served"] += 1
            return copy.deepcopy(cache.values[key])
        cache.reading += 1
        try:
            value = method(self, cls, *args, **kwargs)
        finally:
            cache.reading -= 1
        STATS["read"] += 1
        cache.values[key] = copy.deepcopy(value)
        return value

    setattr(get_fact, _MARK, True)
    return get_fact


def drops_cache(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a Host method that acts on the node: outside a fact read, forget what was read."""

    @functools.wraps(method)
    def acting(self: Any, *args: Any, **kwargs: Any) -> Any:
        cache = _cache_of(self)
        if not cache.reading and cache.values:
            STATS["dropped"] += 1
            cache.values.clear()
        return method(self, *args, **kwargs)

    setattr(acting, _MARK, True)
    return acting


def install(host_class: type[Any] | None = None) -> None:
    """Patch ``host_class`` (default pyinfra's Host) once."""
    if host_class is None:
        from pyinfra.api.host import Host

        host_class = Host
    if not getattr(host_class.get_fact, _MARK, False):
        host_class.get_fact = cached_get_fact(host_class.get_fact)  # type: ignore[method-assign]
    for name in ACTING_METHODS:
        method = getattr(host_class, name, None)
        if method is not None and not getattr(method, _MARK, False):
            setattr(host_class, name, drops_cache(method))


def forget(host: Any) -> None:
    """Drop one host's kept values (tests; a caller that knows the node changed behind us)."""
    _CACHES.pop(host, None)


# --- many reads in one round trip ---------------------------------------------------------

_PART = "@@nodegate-fact-part"


class BatchRead(FactBase[list[str]]):
    """Several facts' own commands in one shell, each part framed by markers and its exit
    status; read through pyinfra like any fact (connection, logging, errors)."""

    @override
    def command(self, script: StringCommand) -> StringCommand:
        return script

    @override
    def process(self, output: list[str]) -> list[str]:
        return list(output)

    @override
    @staticmethod
    def default() -> list[str]:
        return []


def _script(parts: list[Any]) -> StringCommand:
    bits: list[Any] = []
    for i, command in enumerate(parts):
        bits += ["echo", f"{_PART}-{i};", "(", command, ")", "2>/dev/null;", "echo",
                 f"{_PART}-rc-{i}=$?;"]
    return StringCommand(*bits)


def _split(lines: list[str], n: int) -> dict[int, tuple[int, list[str]]]:
    """Part number -> (exit status, its stdout lines), for the parts that came back whole."""
    found: dict[int, tuple[int, list[str]]] = {}
    current: int | None = None
    body: list[str] = []
    for line in lines:
        if line.startswith(f"{_PART}-rc-") and current is not None:
            number, _, rc = line[len(_PART) + 4:].partition("=")
            if number == str(current) and rc.isdigit():
                found[current] = (int(rc), body)
            current, body = None, []
        elif line.startswith(f"{_PART}-") and line[len(_PART) + 1:].isdigit():
            current, body = int(line[len(_PART) + 1:]), []
        elif current is not None:
            body.append(line)
    return {i: v for i, v in found.items() if i < n}


def _part(fact: Any, kwargs: dict[str, Any]) -> Any:
    """The fact's own command, behind its own ``requires_command`` guard (a missing binary
    exits non-zero: not kept, so the ordinary read raises pyinfra's MissingCommandError)."""
    command = fact.command(**kwargs) if callable(fact.command) else fact.command
    required = fact.requires_command
    if callable(required):
        required = required(**kwargs)
    if not required:
        return command
    return StringCommand("command", "-v", required, ">/dev/null", "2>&1", "&&", "(", command,
                         ")")


def prefetch(host: Any, reads: list[tuple[Any, dict[str, Any]]]) -> int:
    """Read many :data:`CACHEABLE` facts in one SSH round trip and keep their values, as if
    each had been read on its own; returns how many were kept.

    Each part is the fact's own command, and its output goes through the fact's own
    ``process``, so a kept value is the value pyinfra would have read. A part that exits
    non-zero or whose output does not process is not kept: the ordinary read later does
    exactly what pyinfra does with it, errors included.
    """
    cache = _cache_of(host)
    todo: list[tuple[Any, tuple[Any, ...], Any]] = []
    keys: set[tuple[Any, ...]] = set()
    for cls, kwargs in reads:
        key = _key(host, cls, (), kwargs)
        if fact_name(cls) not in CACHEABLE or key in cache.values or key in keys:
            continue
        fact = cls()
        try:
            part = _part(fact, kwargs)
        except TypeError:  # arguments the fact does not take (a stale list): skip it
            continue
        keys.add(key)
        todo.append((fact, key, part))
    if len(todo) < 2:
        return 0
    lines = host.get_fact(BatchRead, script=_script([part for *_, part in todo]))
    kept = 0
    for i, (rc, body) in _split(lines, len(todo)).items():
        fact, key, _ = todo[i]
        if rc != 0:
            continue
        try:
            value = fact.process(body) if body else fact.default()
        except Exception:  # the ordinary read reports it pyinfra's way
            continue
        cache.values[key] = copy.deepcopy(value)
        kept += 1
    STATS["prefetched"] += kept
    return kept


# --- what a host was asked last time ------------------------------------------------------


def reads_dir() -> Path:
    """Where the list of each host's reads is kept between runs (only names and arguments,
    never values): ``$NODEGATE_FACT_READS_DIR``, else ``~/.cache/nodegate/fact-reads``."""
    found = os.environ.get("NODEGATE_FACT_READS_DIR")
    return Path(found) if found else Path.home() / ".cache" / "nodegate" / "fact-reads"


def _resolve(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    if not name.startswith("nodegate."):
        module = f"pyinfra.facts.{module}"
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None


def _learn(host: Any, cls: Any, kwargs: dict[str, Any]) -> None:
    try:
        entry = json.dumps([fact_name(cls), kwargs], sort_keys=True)
    except (TypeError, ValueError):
        return
    _LEARNED.setdefault(str(host.name), set()).add(entry)


def _recall(host: Any) -> None:
    """On a host's first read this run: read, in one round trip, what it was asked last time.

    The values are read now from the node; only the list of questions comes from the last
    run, so a stale list costs a wasted part, never a wrong answer."""
    path = reads_dir() / f"{host.name}.json"
    try:
        entries = json.loads(read_text(path, kind="cache"))
    except (OSError, ValueError, ConfigError):
        return
    reads = []
    for entry in entries if isinstance(entries, list) else ():
        if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict)
                and (cls := _resolve(str(entry[0]))) is not None):
            reads.append((cls, entry[1]))
    prefetch(host, reads)


@atexit.register
def remember() -> None:
    """Keep this run's questions per host for the next run's :func:`_recall`."""
    for name, entries in _LEARNED.items():
        path = reads_dir() / f"{name}.json"
        try:
            atomic_write_text(path, json.dumps([json.loads(e) for e in sorted(entries)]) + "\n")
        except (OSError, ConfigError) as e:  # a cache: the next run only reads one fact at a time
            logger.warning("nodegate.fact_cache: cannot keep %s's reads in %s: %s", name,
                           path, e)
