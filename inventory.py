"""pyinfra inventory for nodegate: ``pyinfra inventory.py deploy.py``.

Reads ``inventory/<site>.yaml`` for the site named by NODEGATE_SITE (default ``lab``), or the
Ansible inventory named by NODEGATE_ANSIBLE_INVENTORY. Every module-level list below is a
pyinfra group of ``(hostname, data)`` pairs. Profiles are resolved and validated here, so a
bad profile or site file stops the run before any host is touched. pyinfra loads this file
first, so nodegate.pyinfra_compat is installed for every deploy file, a single role included.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import nodegate.pyinfra_compat  # noqa: F401  (every run: a lost SSH connection fails that host only)
from nodegate.errors import CannotRunError, NodegateError
from nodegate.site import Site, load_site
from nodegate.site.ansible import load_ansible_inventory

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


def _load() -> Site:
    ansible_source = os.environ.get("NODEGATE_ANSIBLE_INVENTORY")
    if ansible_source:  # site name: NODEGATE_SITE, else the inventory's file name
        return load_ansible_inventory(ansible_source, site_name=os.environ.get("NODEGATE_SITE"))
    return load_site(os.environ.get("NODEGATE_SITE", "lab"))


try:
    _require_checkout()
    _site = _load()
except NodegateError as _exc:
    sys.stderr.write(f"nodegate: error: {_exc}\n")
    raise SystemExit(int(_exc.exit_code)) from None


def _group(members: list[str]) -> list[tuple[str, dict[str, Any]]]:
    # the site's slurm: section too: slurm_controller names the cluster and partition from it
    return [(name, {**_site.hosts[name].pyinfra_data(_site.name),
                    "nodegate_site_slurm": dict(_site.slurm)}) for name in members]


# Every GPU node (a host with a hardware profile), then one list per site group.
gpu_nodes = _group([h.name for h in _site.gpu_nodes()])
for _group_name, _members in _site.groups.items():
    if _group_name != "gpu_nodes":
        globals()[_group_name] = _group(_members)
_ungrouped = [n for n in _site.hosts if not any(n in m for m in _site.groups.values())]
_ungrouped = [n for n in _ungrouped if not _site.hosts[n].is_gpu_node]
if _ungrouped:
    others = _group(_ungrouped)
