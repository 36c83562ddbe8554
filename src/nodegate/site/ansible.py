"""Import an existing Ansible inventory (ini or yaml, group_vars/host_vars) through ansible-core.

Shops that already keep their fleet in Ansible reuse it as is: connection variables map to
pyinfra's, ``nodegate_*`` variables map to site keys, group names stay Ansible's own
(``slurm-master``, ``k8s_cluster``), and the result goes through the same schema, secret and
profile checks as a site file. ansible-core runs in a child process (nodegate.site.ansible_load
says why); vaulted values resolve there when ANSIBLE_VAULT_PASSWORD_FILE is set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nodegate
from nodegate.bounds import ascii_int
from nodegate.errors import CannotRunError, ConfigError
from nodegate.fileio import read_bytes
from nodegate.secret_refs import reject_literal_secrets
from nodegate.site.ansible_load import PASSWORD_FILE_VAR
from nodegate.site.loader import _validate, build_site
from nodegate.site.model import Site
from nodegate.site.schema import GROUP_NAME, HOST_PROPERTIES

#: Ansible connection variables and the site keys they become.
CONNECTION_VARS = {
    "ansible_host": "address",
    "ansible_user": "ssh_user",
    "ansible_port": "ssh_port",
    "ansible_ssh_private_key_file": "ssh_key",
}
LOAD_TIMEOUT_S = 120


def site_name_for(source: str, override: str | None = None) -> str:
    """``NODEGATE_SITE`` when set, else the inventory's file (or folder) name stem."""
    if override:
        return override
    stem = Path(source).resolve().stem
    return re.sub(r"[^A-Za-z0-9._-]", "-", stem).lstrip("._-") or "ansible"


def _read(source: str) -> dict[str, Any]:
    """Run nodegate.site.ansible_load in a child and return its JSON."""
    package_root = str(Path(nodegate.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nodegate.site.ansible_load", source], env=env,
            capture_output=True, text=True, timeout=LOAD_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        raise CannotRunError(f"ansible-core took over {LOAD_TIMEOUT_S} s to read the inventory",
                             file=source) from None
    except OSError as exc:
        raise CannotRunError(f"cannot start {sys.executable}: {exc.strerror}",
                             file=source) from None
    for line in done.stderr.splitlines():  # ansible-core's own warnings, passed on as they are
        if line.strip():
            sys.stderr.write(line + "\n")
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise CannotRunError(f"reading the Ansible inventory failed (exit {done.returncode})",
                             file=source) from None
    error = result.get("error")
    if error:
        raise ConfigError(str(error["message"]), file=source, host=error.get("host"),
                          key=error.get("key"))
    return result


def _entry(source: str, name: str, merged: dict[str, Any]) -> dict[str, Any]:
    """Site host keys from one host's imported Ansible variables."""
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
            entry["ssh_port"] = ascii_int(str(entry["ssh_port"]))
        except (TypeError, ValueError):
            raise ConfigError("ansible_port is not a number", file=source,
                              host=name, key="ansible_port") from None
    reject_literal_secrets(entry, file=source, host=name)
    return entry


def check_inputs(path: Path) -> None:
    """ansible-core opens the inventory, its group_vars/host_vars and the vault password
    file itself: each must be a regular file within its cap before it does (a FIFO there
    hangs it, ``/dev/zero`` fills its memory); ConfigError naming the first that is not."""
    roots = [path] if path.is_dir() else [path.parent / "group_vars", path.parent / "host_vars"]
    if not path.is_dir():
        read_bytes(path, kind="ansible")
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                read_bytes(Path(folder) / name, kind="ansible")
    password_file = os.environ.get(PASSWORD_FILE_VAR)
    if password_file:
        read_bytes(password_file, kind="credential")


def load_ansible_inventory(source: str, *, site_name: str | None = None) -> Site:
    path = Path(source)
    if not path.exists():
        raise ConfigError(
            "Ansible inventory not found", file=source, key="NODEGATE_ANSIBLE_INVENTORY"
        )
    check_inputs(path)
    result = _read(str(path))
    hosts: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[str]] = {}
    for name, item in result.get("hosts", {}).items():
        hosts[name] = _entry(source, name, item["vars"])
        for group in item["groups"]:
            if not re.match(GROUP_NAME, group):
                raise ConfigError("group name nodegate cannot carry (letters, digits, _ . - "
                                  "only)", file=source, host=name, key=f"groups.{group}")
            groups.setdefault(group, []).append(name)
    if not hosts:
        raise ConfigError("the Ansible inventory has no hosts", file=source)
    data = {"schema": "nodegate.site/1", "name": site_name_for(source, site_name),
            "hosts": hosts, "groups": groups}
    _validate(data, source)
    return build_site(data, file=source)
