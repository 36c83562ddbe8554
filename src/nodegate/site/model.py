"""The site every entry point works from: hosts with their data and resolved profiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodegate.profiles import Profile

#: Group whose members are infrastructure (Slurm controller, mirror), not GPU nodes.
CONTROLLER_GROUP = "controllers"


@dataclass
class SiteHost:
    name: str
    address: str
    data: dict[str, Any]
    groups: list[str] = field(default_factory=list)
    profile: Profile | None = None

    @property
    def is_gpu_node(self) -> bool:
        return self.profile is not None

    def pyinfra_data(self, site_name: str) -> dict[str, Any]:
        """Host data as pyinfra sees it: connection keys plus ``nodegate_*`` knobs."""
        out: dict[str, Any] = {"ssh_hostname": self.address}
        for ours, theirs in (
            ("ssh_user", "ssh_user"),
            ("ssh_port", "ssh_port"),
            ("ssh_key", "ssh_key"),
            ("ssh_known_hosts_file", "ssh_known_hosts_file"),
            ("ssh_strict_host_key_checking", "ssh_strict_host_key_checking"),
        ):
            if ours in self.data:
                out[theirs] = self.data[ours]
        out["nodegate_site"] = site_name
        for key, value in self.data.items():
            if key.startswith("ssh_") or key in ("address", "profile_overrides", "data"):
                continue
            out[f"nodegate_{key}"] = value
        out.update(self.data.get("data", {}))
        if self.profile is not None:
            out["nodegate_profile"] = self.profile.name
            out["nodegate_profile_data"] = self.profile.data
        return out


@dataclass
class Site:
    name: str
    source: str
    hosts: dict[str, SiteHost]
    groups: dict[str, list[str]]
    slurm: dict[str, Any] = field(default_factory=dict)

    def gpu_nodes(self) -> list[SiteHost]:
        return [h for h in self.hosts.values() if h.is_gpu_node]
