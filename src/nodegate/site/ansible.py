"""Import an existing Ansible inventory (ini or yaml, group_vars/host_vars) through ansible-core.

Shops that already keep their fleet in Ansible reuse it as is: connection variables map to
pyinfra's, ``nodegate_*`` variables map to site keys, and the result goes through the same
schema, secret and profile checks as a site file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.site.loader import _validate, build_site
from nodegate.site.model import Site
from nodegate.site.schema import HOST_PROPERTIES
from nodegate.site.secrets import reject_literal_secrets

#: Ansible connection variables and the site keys they become.
CONNECTION_VARS = {
    "ansible_host": "address",
    "ansible_user": "ssh_user",
    "ansible_port": "ssh_port",
    "ansible_ssh_private_key_file": "ssh_key",
}
IGNORED_GROUPS = ("all", "ungrouped")


def _plain(value: Any) -> Any:
    """Ansible wraps strings (AnsibleUnicode, tagged values); turn them into plain data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def load_ansible_inventory(source: str, *, site_name: str = "ansible") -> Site:
    path = Path(source)
    if not path.exists():
        raise ConfigError(
            "Ansible inventory not found", file=source, key="NODEGATE_ANSIBLE_INVENTORY"
        )
    try:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager
    except ImportError as exc:  # pragma: no cover - ansible-core is a dependency
        raise ConfigError(f"ansible-core is not importable: {exc}", file=source) from None

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory)
    hosts: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[str]] = {}
    for host in inventory.get_hosts():
        merged = _plain(variables.get_vars(host=host, include_hostvars=False))
        entry: dict[str, Any] = {}
        for ansible_key, ours in CONNECTION_VARS.items():
            if ansible_key in merged:
                entry[ours] = merged[ansible_key]
        for key, value in merged.items():
            if key.startswith("nodegate_"):
                ours = key.removeprefix("nodegate_")
                if ours in HOST_PROPERTIES:
                    entry[ours] = value
                else:
                    entry.setdefault("data", {})[key] = value
        if "ssh_port" in entry:
            try:
                entry["ssh_port"] = int(entry["ssh_port"])
            except (TypeError, ValueError):
                raise ConfigError("ansible_port is not a number", file=source,
                                  host=host.name, key="ansible_port") from None
        reject_literal_secrets(entry, file=source, host=host.name)
        hosts[host.name] = entry
        for group in host.get_groups():
            if group.name not in IGNORED_GROUPS:
                groups.setdefault(group.name, []).append(host.name)
    if not hosts:
        raise ConfigError("the Ansible inventory has no hosts", file=source)
    data = {"schema": "nodegate.site/1", "name": site_name, "hosts": hosts, "groups": groups}
    _validate(data, source)
    return build_site(data, file=source)
