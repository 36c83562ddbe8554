"""Load ``inventory/<site>.yaml`` into a Site, resolving every GPU host's profile up front.

A bad profile, unknown group member or literal secret fails here, before pyinfra connects
to anything.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from nodegate import paths
from nodegate.errors import ConfigError
from nodegate.mapping import deep_merge
from nodegate.profiles import resolve_profile
from nodegate.schema_check import NON_FINITE, first_problem, non_finite_path
from nodegate.secret_refs import reject_literal_secrets
from nodegate.site.model import CONTROLLER_GROUP, Site, SiteHost
from nodegate.site.schema import SITE_SCHEMA
from nodegate.yamlio import json_path, load_yaml, shorten

NO_PROFILE = "none"
#: Host keys that refine the defaults' mapping instead of replacing it.
NESTED_KEYS = ("data", "profile_overrides")


def site_path(name: str) -> Path:
    """``NODEGATE_SITE`` may be a site name (inventory/<name>.yaml) or a path to a file."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name:
        return candidate
    for folder in (Path.cwd() / "inventory", paths.data_dir("inventory")):
        if (folder / f"{name}.yaml").is_file():
            return folder / f"{name}.yaml"
    return Path.cwd() / "inventory" / f"{name}.yaml"


def _validate(data: Any, file: str) -> None:
    bad = non_finite_path(data)
    if bad is not None:
        host = str(bad[1]) if len(bad) >= 2 and bad[0] == "hosts" else None
        raise ConfigError(NON_FINITE, file=file, host=host, key=json_path(list(bad)))
    problem = first_problem(SITE_SCHEMA, data)
    if problem is not None:
        parts = problem.path
        host = str(parts[1]) if len(parts) >= 2 and parts[0] == "hosts" else None
        message = "unknown key" if problem.unknown_key else shorten(problem.message)
        raise ConfigError(message, file=file, host=host, key=json_path(parts))


def load_site(name: str) -> Site:
    path = site_path(name)
    if not os.path.lexists(path):  # anything else there is the reader's to refuse, by name
        hint = " (`nodegate-lab up` writes it)" if name == "lab" else ""
        raise ConfigError(f"site file not found{hint}; NODEGATE_SITE names a site in "
                          "inventory/ or a path to a site file", file=str(path),
                          key="NODEGATE_SITE")
    data = load_yaml(path, kind="site")
    file = str(path)
    if not isinstance(data, dict):
        raise ConfigError("a site file must be a mapping", file=file)
    reject_literal_secrets(data, file=file)
    _validate(data, file)
    return build_site(data, file=file)


def _site_slurm_to_host(data: dict[str, Any], merged: dict[str, Any], *,
                        gpu_node: bool) -> None:
    """The site's ``slurm.drain_budget`` goes to each Slurm node's gate (``nodegate_slurm``).

    Every GPU node gets it, with or without a ``slurm:`` section of its own: deploy.py and
    deploy/slurm.py run slurm_node on each host with a hardware profile, and one without the
    section is still a Slurm node, named by its host name (roles/ops/slurm.slurm_node_name, the
    controller's NodeName line), whose HealthCheckProgram gate takes the budget
    (roles/ops/slurm.drain_budget_args). A host with neither a profile nor a section (the
    controller, a mirror) gets none: it runs no gate."""
    budget = (data.get("slurm") or {}).get("drain_budget")
    if budget is None:
        return
    if gpu_node and not isinstance(merged.get("slurm"), dict):
        merged["slurm"] = {}
    if isinstance(merged.get("slurm"), dict):
        merged["slurm"].setdefault("drain_budget", budget)


def build_site(data: dict[str, Any], *, file: str) -> Site:
    """Site from already-validated mapping data (the YAML file or an Ansible import)."""
    defaults = data.get("defaults", {})
    groups: dict[str, list[str]] = {k: list(v) for k, v in data.get("groups", {}).items()}
    host_entries: dict[str, dict[str, Any]] = data["hosts"]
    for group, members in groups.items():
        for member in members:
            if member not in host_entries:
                raise ConfigError(
                    f"group {group!r} lists {member!r}, which is not under hosts",
                    file=file, key=f"groups.{group}",
                )
    site_overrides = data.get("profile_overrides") or None
    hosts: dict[str, SiteHost] = {}
    for name, entry in host_entries.items():
        merged = copy.deepcopy(defaults)
        merged.update(copy.deepcopy(entry or {}))
        for nested in NESTED_KEYS:  # a host refines the defaults' role knobs and overrides
            if isinstance(defaults.get(nested), dict) and isinstance((entry or {}).get(nested),
                                                                     dict):
                merged[nested] = deep_merge(defaults[nested], entry[nested])
        member_of = [g for g, members in groups.items() if name in members]
        if "pdu" in merged:
            merged.setdefault("pdus", []).insert(0, merged.pop("pdu"))
        address = merged.get("address", name)
        profile_name = merged.get("profile")
        if CONTROLLER_GROUP in member_of and "profile" not in (entry or {}):
            profile_name = None
        profile = None
        if profile_name and profile_name != NO_PROFILE:
            profile = resolve_profile(
                profile_name,
                site_overrides=site_overrides,
                host_overrides=merged.get("profile_overrides") or None,
                site_file=file,
                host=name,
            )
        _site_slurm_to_host(data, merged, gpu_node=profile is not None)
        hosts[name] = SiteHost(name=name, address=str(address), data=merged,
                               groups=member_of, profile=profile)
    return Site(name=str(data["name"]), source=file, hosts=hosts, groups=groups,
                slurm=dict(data.get("slurm", {})))
