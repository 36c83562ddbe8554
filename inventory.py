"""pyinfra inventory for nodegate: ``pyinfra inventory.py deploy.py``.

Reads ``inventory/<site>.yaml`` for the site named by NODEGATE_SITE (default ``lab``), or the
Ansible inventory named by NODEGATE_ANSIBLE_INVENTORY. pyinfra takes every module-level list
of this file as a group of ``(hostname, data)`` pairs: ``_inventory`` puts them there (one per
site group, plus gpu_nodes and others), after refusing a group name that would collide with
pyinfra's or this module's own. Profiles are resolved and validated here, so a bad profile or
site file stops the run before any host is touched: one line naming the file, host and key,
exit 2 (3 when it cannot run), never a traceback. pyinfra loads this file
first, so nodegate.pyinfra_compat is installed for every deploy file, a single role included.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import nodegate.deploy_interrupt
import nodegate.pyinfra_compat  # (every run: a lost SSH connection fails that host only)
from nodegate.errors import CannotRunError, ConfigError, NodegateError
from nodegate.site import Site, load_site
from nodegate.site.ansible import load_ansible_inventory
from nodegate.yamlio import shorten

CHECKOUT = Path(__file__).resolve().parent


def _require_checkout() -> None:
    """roles/ and deploy/ are imported from the directory pyinfra runs in (pyinfra puts it on
    sys.path), and site files are found under its inventory/: elsewhere, stop with one line
    before any deploy file fails on an import."""
    spec = importlib.util.find_spec("roles")
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    if origin != CHECKOUT / "roles" / "__init__.py":
        raise CannotRunError(f"run pyinfra from the nodegate checkout: cd {CHECKOUT} "
                             f"(it imports roles/ and deploy/ from {Path.cwd()})")


def _source() -> str:
    """The file the inventory comes from, for a message about it."""
    ansible_source = os.environ.get("NODEGATE_ANSIBLE_INVENTORY")
    if ansible_source:
        return ansible_source
    from nodegate.site.loader import site_path

    return str(site_path(os.environ.get("NODEGATE_SITE", "lab")))


def _load() -> Site:
    ansible_source = os.environ.get("NODEGATE_ANSIBLE_INVENTORY")
    if ansible_source:  # site name: NODEGATE_SITE, else the inventory's file name
        return load_ansible_inventory(ansible_source, site_name=os.environ.get("NODEGATE_SITE"))
    return load_site(os.environ.get("NODEGATE_SITE", "lab"))


#: Group names pyinfra gives a meaning of its own: ``all`` (every host, with the global
#: data), the inventory file's stem (``inventory``: every host), and the keyword names of
#: ``pyinfra.api.inventory.Inventory(names_data, override_data=None, **groups)``.
PYINFRA_NAMES = frozenset({"all", Path(__file__).stem, "names_data", "override_data"})
#: The groups this file makes itself (``gpu_nodes`` may be listed by the site, see below).
OWN_GROUPS = frozenset({"gpu_nodes", "others"})


def _check_group_names(site: Site, module_names: set[str]) -> None:
    """pyinfra reads every module-level list here as a group and skips names starting with
    ``_``: a site group must not take one of those names, nor a name of this module (it would
    replace ``_site`` or ``_group`` and crash, or vanish), nor a group pyinfra or this file
    makes. ``gpu_nodes`` is allowed when it lists exactly the hosts with a hardware profile
    (the lab's site files do), since this file makes that group from them."""
    for name, members in site.groups.items():
        host = members[0] if members else None
        where = {"file": site.source, "host": host, "key": f"groups.{name}"}
        if name in PYINFRA_NAMES:
            raise ConfigError(f"group name {name!r} is pyinfra's own (all, the inventory "
                              "file's name, Inventory's arguments); rename the group", **where)
        if name.startswith("_") or (name in module_names | OWN_GROUPS and name != "gpu_nodes"):
            raise ConfigError(f"group name {name!r} is reserved by inventory.py (names "
                              "starting with _, its own names and groups gpu_nodes and "
                              "others); rename the group", **where)
        profiled = sorted(h.name for h in site.gpu_nodes())
        if name == "gpu_nodes" and sorted(members) != profiled:
            raise ConfigError("group gpu_nodes is made by inventory.py from the hosts with a "
                              f"hardware profile ({', '.join(profiled) or 'none'}); list "
                              "exactly those or rename the group", **where)


#: The connection's bounds (roles/defaults.py; a site's ``data:`` or ``--data`` may set them):
#: nodegate.pyinfra_compat reads the keepalive pair, pyinfra takes ``_timeout`` from host data
#: as every command's deadline. docs/reliability.md, "The bring-up under faults".
_CONNECTION_KNOBS = ("ssh_keepalive_s", "ssh_keepalive_count", "ssh_command_timeout_s")


def connection_data(data: dict[str, Any]) -> dict[str, Any]:
    """The connection knobs ``data`` lacks, from roles/defaults.py, and pyinfra's ``_timeout``
    (a deadline for each command) from ``ssh_command_timeout_s`` (0: none)."""
    from roles.defaults import DEFAULTS

    out = {k: DEFAULTS[k] for k in _CONNECTION_KNOBS if data.get(k) is None}
    deadline = int({**data, **out}["ssh_command_timeout_s"] or 0)
    if deadline > 0 and data.get("_timeout") is None:
        out["_timeout"] = deadline
    return out


def _groups(site: Site) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Every pyinfra group: gpu_nodes (every host with a hardware profile), one per site
    group, and others (the ungrouped hosts without a profile, when there are any)."""

    def group(members: list[str]) -> list[tuple[str, dict[str, Any]]]:
        # the site's slurm: section too: slurm_controller names the cluster and partition
        out = []
        for name in members:
            data = {**site.hosts[name].pyinfra_data(site.name),
                    "nodegate_site_slurm": dict(site.slurm)}
            out.append((name, {**data, **connection_data(data)}))
        return out

    groups = {"gpu_nodes": group([h.name for h in site.gpu_nodes()])}
    for name, members in site.groups.items():
        if name != "gpu_nodes":
            groups[name] = group(members)
    ungrouped = [n for n, h in site.hosts.items()
                 if not h.is_gpu_node and not any(n in m for m in site.groups.values())]
    if ungrouped:
        groups["others"] = group(ungrouped)
    return groups


def _inventory() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The groups, or one line naming the file (host, key) and exit 2 (3: cannot run) for
    anything the loaders raise: a traceback through pyinfra is never the answer."""
    module_names = set(globals())
    try:
        _require_checkout()
        site = _load()
        _check_group_names(site, module_names)
        return _groups(site)
    except NodegateError as exc:
        _exit(exc)
    except (RecursionError, MemoryError) as exc:
        _exit(ConfigError(f"nested too deeply or too large to load ({type(exc).__name__})",
                          file=_source()))
    except Exception as exc:  # a loader's own error type we did not foresee: still the file
        _exit(ConfigError(f"cannot load it: {type(exc).__name__}: {shorten(str(exc))}",
                          file=_source()))


def _exit(exc: NodegateError) -> NoReturn:
    sys.stderr.write(f"nodegate: error: {exc}\n")
    raise SystemExit(int(exc.exit_code)) from None


nodegate.deploy_interrupt.install()  # pyinfra's CLI only: Ctrl-C exits 3, saying what is left
globals().update(_inventory())
