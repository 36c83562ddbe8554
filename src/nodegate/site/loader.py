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
from nodegate.site.ranges import expand_site
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


def _validate(data: Any, file: str, origins: dict[str, str] | None = None) -> None:
    """Schema and finiteness; a ranged host's key is named as the file writes it
    (``hosts.gpu-c[001-064].ssh_port``), the host as the one that failed."""
    origins = origins or {}

    def where(parts: list[Any]) -> tuple[str | None, str]:
        host = str(parts[1]) if len(parts) >= 2 and parts[0] == "hosts" else None
        if host in origins:
            parts = ["hosts", origins[host], *parts[2:]]
        return host, json_path(parts)

    bad = non_finite_path(data)
    if bad is not None:
        host, key = where(list(bad))
        raise ConfigError(NON_FINITE, file=file, host=host, key=key)
    problem = first_problem(SITE_SCHEMA, data)
    if problem is not None:
        host, key = where(list(problem.path))
        message = "unknown key" if problem.unknown_key else shorten(problem.message)
        raise ConfigError(message, file=file, host=host, key=key)


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
    data, origins = expand_site(data, file=file)
    _validate(data, file, origins)
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
    raw_groups: dict[str, Any] = data.get("groups", {})
    groups: dict[str, list[str]] = {
        k: list(v["hosts"] if isinstance(v, dict) else v) for k, v in raw_groups.items()}
    group_data = {k: {nested: dict(v.get(nested) or {}) for nested in NESTED_KEYS}
                  for k, v in raw_groups.items() if isinstance(v, dict)}
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
        member_of = [g for g, members in groups.items() if name in members]
        merged = _merged(defaults, _group_data(name, member_of, group_data, file=file),
                         entry or {})
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
    refuse_duplicates(hosts, file=file)
    return Site(name=str(data["name"]), source=file, hosts=hosts, groups=groups,
                slurm=dict(data.get("slurm", {})))


def _merged(defaults: dict[str, Any], shared: dict[str, Any], entry: dict[str, Any]
            ) -> dict[str, Any]:
    """A host's keys: the defaults, their data and profile overrides refined by its groups'
    (``shared``), then the host's own entry, which refines (not replaces) both."""
    layered = dict(defaults)
    for nested, values in shared.items():
        if values:
            layered[nested] = deep_merge(dict(defaults.get(nested) or {}), values)
    merged = copy.deepcopy(layered)
    merged.update(copy.deepcopy(entry))
    for nested in NESTED_KEYS:
        if isinstance(layered.get(nested), dict) and isinstance(entry.get(nested), dict):
            merged[nested] = deep_merge(layered[nested], entry[nested])
    return merged


def _group_data(host: str, member_of: list[str],
                group_data: dict[str, dict[str, dict[str, Any]]], *, file: str
                ) -> dict[str, dict[str, Any]]:
    """The data and profile overrides of every group ``host`` is in, merged; two of its
    groups giving one key different values is a ConfigError naming both (no order of groups
    decides silently)."""
    out: dict[str, dict[str, Any]] = {nested: {} for nested in NESTED_KEYS}
    source: dict[tuple[str, str], str] = {}
    for group in member_of:
        for nested, values in group_data.get(group, {}).items():
            for key, value in values.items():
                if key in out[nested] and out[nested][key] != value:
                    raise ConfigError(
                        f"groups {source[nested, key]} and {group} both hold this host and "
                        f"set {nested} key {key} differently; set it on the host or in one "
                        "group", file=file, host=host, key=f"groups.{group}.{nested}.{key}")
                out[nested][key], source[nested, key] = copy.deepcopy(value), group
    return out


def refuse_duplicates(hosts: dict[str, SiteHost], *, file: str) -> None:
    """Two hosts that are one machine: the same address (and SSH port), the same recorded
    machine id, or the same Slurm node name. Deploying both would give Slurm a phantom node
    and run every role twice on one machine: exit 2 naming both."""
    seen: dict[tuple[str, str], str] = {}
    for name, entry in hosts.items():
        slurm = entry.data.get("slurm")
        port = entry.data.get("ssh_port", 22)
        keys = [("address", f"{entry.address.lower()} (SSH port {port})", "address")]
        if entry.data.get("machine_id"):
            keys.append(("machine id", str(entry.data["machine_id"]), "machine_id"))
        if isinstance(slurm, dict) and slurm.get("node_name"):
            keys.append(("Slurm node name", str(slurm["node_name"]), "slurm.node_name"))
        for what, value, key in keys:
            other = seen.setdefault((what, value), name)
            if other != name:
                raise ConfigError(f"hosts {other} and {name} have one {what}, {value}: one "
                                  "machine listed twice?", file=file, host=name,
                                  key=f"hosts.{name}.{key}")
