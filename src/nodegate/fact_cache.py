"""Read a host's configuration facts once per run until something runs on that host.

Why: pyinfra 3 reads a fact again at every ``host.get_fact`` call, and runs each operation's
generator twice (prepare, then execute), so a no-op rerun of the bring-up asks every node the
same questions over SSH again and again: on 4 lab nodes each host answered 97 remote commands,
28 of them repeats of a read made moments before (docs/benchmarks.md, issue 22). On 2 shared
cores those round trips are the rerun's cost, and they grow with the number of hosts.

The rule that keeps this correct: a fact describes the node, and the node only changes when a
command of this run executes on it. So a value read is kept for that host until the host next
runs an operation's command, uploads or downloads a file (``Host.run_shell_command``,
``put_file``, ``get_file``, ``rsync`` outside a fact read); then the host's cache is dropped
and the next read goes to the node. While preparing nothing executes, so repeats are served
from the cache; while executing a no-op rerun, nothing executes either, so the second pass of
every generator is served from the cache too.

Only facts that describe configuration state are kept (:data:`CACHEABLE`). Facts that must be
fresh at the moment they are read (GPU processes and the Slurm state before a reboot, the gate
and join commands, ad-hoc ``server.Command``) are never kept. Each caller gets its own copy.

Installed by :func:`nodegate.pyinfra_compat.install`, for the pyinfra versions whose fact and
host code was read (``CHECKED`` there: ``pyinfra/api/facts.py:get_fact``, ``Host.get_fact`` and
the Host methods above). The role tests' harness answers ``host.get_fact`` itself and is not
affected.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

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

    __slots__ = ("reading", "values")

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], Any] = {}
        self.reading = 0


_CACHES: WeakKeyDictionary[Any, _HostCache] = WeakKeyDictionary()
STATS = {"served": 0, "read": 0, "dropped": 0}


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
    from pyinfra.api.arguments import pop_global_arguments

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
