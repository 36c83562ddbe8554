"""Read an Ansible inventory with ansible-core in a clean child process; print JSON.

``python -m nodegate.site.ansible_load SOURCE`` is what ``nodegate.site.ansible`` runs: under
pyinfra the parent process is gevent-patched, and ansible-core's start-up there prints a
spurious ``OSError: Int or String expected`` traceback (a getaddrinfo call in gevent's thread
pool). A child also gets a fresh ``VaultSecretsContext``, which ansible-core lets a process
initialise only once. Only the variables nodegate imports leave this process: connection
variables and ``nodegate_*``; the rest (``ansible_become_pass``, vaulted or not) is never read.

Output: ``{"hosts": {name: {"vars": {...}, "groups": [...]}}}`` or ``{"error": {...}}`` (exit 2).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from nodegate.secret_refs import is_secret_key

#: Ansible connection variables nodegate imports (nodegate.site.ansible maps them).
CONNECTION_VARS = ("ansible_host", "ansible_user", "ansible_port", "ansible_ssh_private_key_file")
IGNORED_GROUPS = ("all", "ungrouped")
VAULT_HEADER = "$ANSIBLE_VAULT;"
PASSWORD_FILE_VAR = "ANSIBLE_VAULT_PASSWORD_FILE"


class LoadError(Exception):
    """Bad inventory content; becomes the ``error`` object (message, host, key)."""

    def __init__(self, message: str, *, host: str | None = None, key: str | None = None) -> None:
        super().__init__(message)
        self.host, self.key = host, key


def _is_vaulted(value: Any) -> bool:
    """ansible-core's vaulted value: EncryptedString (2.19+) or AnsibleVaultEncryptedUnicode."""
    return type(value).__name__ in ("EncryptedString", "AnsibleVaultEncryptedUnicode")


def _plain(value: Any, key: str, host: str, decrypt: Callable[[Any], str] | None) -> Any:
    """Plain JSON data from Ansible's wrapped values, decrypting vaulted ones if we can."""
    vaulted = _is_vaulted(value) or (isinstance(value, str) and value.startswith(VAULT_HEADER))
    if vaulted:
        if any(is_secret_key(part) for part in key.replace("[", ".").split(".")):
            raise LoadError("a vault-encrypted credential: nodegate takes credentials by "
                            "reference only (password_env: VAR / password_file: /path), so "
                            "they never enter the inventory pyinfra prints", host=host, key=key)
        if decrypt is None:
            raise LoadError(f"vault-encrypted value and no vault password source; set "
                            f"{PASSWORD_FILE_VAR} to resolve it", host=host, key=key)
        try:
            return decrypt(value)
        except Exception as exc:
            raise LoadError(f"cannot decrypt the vault value ({type(exc).__name__})",
                            host=host, key=key) from None
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{key}.{k}", host, decrypt) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{key}[{i}]", host, decrypt) for i, v in enumerate(value)]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _vault_decrypter(loader: Any) -> Callable[[Any], str] | None:
    """A decrypt function when a vault password file is configured, else None."""
    from ansible import constants

    path = os.environ.get(PASSWORD_FILE_VAR) or getattr(
        constants, "DEFAULT_VAULT_PASSWORD_FILE", None)
    if not path:
        return None
    from ansible.parsing import vault

    try:
        secret = vault.get_file_vault_secret(filename=str(path), vault_id="default",
                                             loader=loader)
        secret.load()
    except Exception as exc:
        raise LoadError(f"vault password source unusable: {' '.join(str(exc).split())[:200]}",
                        key=PASSWORD_FILE_VAR) from None
    secrets = [("default", secret)]
    loader.set_vault_secrets(secrets)
    context = getattr(vault, "VaultSecretsContext", None)
    if context is not None:  # ansible-core 2.19+: EncryptedString decrypts through it
        context.initialize(context(secrets))
    lib = vault.VaultLib(secrets)

    def decrypt(value: Any) -> str:
        if isinstance(value, str) and value.startswith(VAULT_HEADER) and not _is_vaulted(value):
            return str(lib.decrypt(value.encode()).decode())
        return str(value)

    return decrypt


def read_inventory(source: str) -> dict[str, Any]:
    """Hosts with the variables nodegate imports and the groups they belong to."""
    os.environ.setdefault("ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS", "ignore")  # keep real names
    if not os.environ.get(PASSWORD_FILE_VAR):  # set but empty: ansible-core would read the cwd
        os.environ.pop(PASSWORD_FILE_VAR, None)
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    decrypt = _vault_decrypter(loader)
    inventory = InventoryManager(loader=loader, sources=[source])
    variables = VariableManager(loader=loader, inventory=inventory)
    hosts: dict[str, Any] = {}
    for host in inventory.get_hosts():
        try:
            merged = variables.get_vars(host=host, include_hostvars=False)
        except Exception as exc:
            raise LoadError(f"ansible-core cannot read this host's variables: "
                            f"{' '.join(str(exc).split())[:300]}", host=host.name) from None
        wanted = {k: v for k, v in merged.items()
                  if k in CONNECTION_VARS or str(k).startswith("nodegate_")}
        hosts[host.name] = {
            "vars": {str(k): _plain(v, str(k), host.name, decrypt) for k, v in wanted.items()},
            "groups": sorted(g.name for g in host.get_groups() if g.name not in IGNORED_GROUPS),
        }
    return {"hosts": hosts}


def main(argv: list[str]) -> int:
    try:
        text, code = json.dumps(read_inventory(argv[0])), 0  # in here: json.dumps can fail too
    except LoadError as exc:
        error = {"message": str(exc), "host": exc.host, "key": exc.key}
        text, code = json.dumps({"error": error}), 2
    except Exception as exc:
        message = f"ansible-core could not read it: {type(exc).__name__}: {exc}"
        text, code = json.dumps({"error": {"message": " ".join(message.split())[:400]}}), 2
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
