"""Write the lab's site file (``inventory/lab.yaml``) so ``NODEGATE_SITE=lab`` finds the lab.

Only references to secrets go in it (``*_env``); the lab key is a path, not key material.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodegate import paths
from nodegate_lab import config, controller
from nodegate_lab.config import Member

PROFILE = "sim-h100-hgx"
PDU_NAME = "lab-pdu"


def site_path() -> Path:
    """inventory/lab.yaml of the checkout (or the current directory's inventory/).

    A second lab instance (NODEGATE_LAB_INSTANCE) writes ``lab_dir()/lab.yaml`` instead
    (``NODEGATE_SITE=<that path>``), leaving the default lab's site file alone.
    """
    if config.INSTANCE:
        return config.lab_dir() / "lab.yaml"
    root = paths.project_root()
    return (root if root is not None else Path.cwd()) / "inventory" / "lab.yaml"


def site_data(nodes: list[Member], specs: dict[str, str], disk_ids: dict[str, list[str]],
              key: Path, known_hosts: Path, *, with_pdu: bool = True,
              with_mirror: bool = True, nodegate_version: str | None = None) -> dict[str, Any]:
    """The site mapping (schema nodegate.site/1) for the lab as it now is.

    ``nodegate_version``: the build the mirror's wheelhouse serves (``0.1.0+src.<digest>``),
    pinned as ``agent_package`` so the agent role replaces a node's nodegate exactly when the
    lab's source changed."""
    from nodegate_lab import services

    hosts: dict[str, Any] = {}
    for member in nodes:
        entry: dict[str, Any] = {
            "address": member.address,
            "sim_scenario": specs[member.name],
            "slurm": {"node_name": member.name},
            "nvme": {"devices": disk_ids[member.name]},
            "bmc": {"url": f"https://{member.bmc_address}:{config.BMC_PORT}", "model": "lab",
                    "username_env": services.BMC_USER_ENV,
                    "password_env": services.BMC_PASSWORD_ENV,
                    "ca_bundle": str(services.bmc_ca_path()), "verify_tls": True},
        }
        if with_pdu:
            entry["pdu"] = {"name": PDU_NAME,
                            "url": f"snmp://{config.PDU_ADDRESS}:{config.PDU_PORT}",
                            "model": "apc-rpdu2", "outlets": [member.index],
                            "community_env": services.PDU_COMMUNITY_ENV}
        hosts[member.name] = entry
    hosts[config.CONTROLLER.name] = {"address": config.CONTROLLER.address}
    if with_mirror:  # the Slurm packages come from the mirror's layers (controller.py)
        # the lab owns its cluster: a node `up --nodes N` no longer runs is retired from
        # slurm.conf on purpose (the role keeps any node it is not told to remove)
        present = {m.name for m in nodes}
        retired = [config.node(i).name for i in range(1, config.MAX_NODES + 1)
                   if config.node(i).name not in present]
        hosts[config.CONTROLLER.name]["data"] = {**controller.controller_data(),
                                                 "slurm_controller_remove_nodes": retired}
    defaults: dict[str, Any] = {
        "ssh_user": "root", "ssh_key": str(key), "profile": PROFILE,
        "ssh_known_hosts_file": str(known_hosts), "ssh_strict_host_key_checking": "yes"}
    if with_mirror:
        from nodegate_lab import mirror

        # role knobs (roles/defaults.py): install from the lab mirror, never the internet
        defaults["data"] = {"nvidia_driver_source": "mirror",
                            "nvidia_driver_mirror_url": mirror.URL,
                            "nvidia_driver_kernel_headers": False,
                            "agent_wheelhouse_url": f"{mirror.URL}/wheels/",
                            # a test run installs torch on up to 8 lab nodes on 2 cores:
                            # byte-compiling it was half of each install's CPU (16 s of 8)
                            "agent_pip_compile": False,
                            "nccl_socket_ifname": "eth0",
                            # quick: the load levels on 8 simulated GPUs per node would take
                            # minutes on 2 cores; the agent installs torch (from the
                            # wheelhouse) only where the gate needs it: gate_multinode_peer
                            "gate_level": "quick",
                            # the gate (SSH, no poller EnvironmentFile) and the scheduled
                            # check, which loads it: power = the node's BMC and PDU outlet
                            "agent_health_args": ["--checks", "gpu,log,host,network"],
                            "agent_schedule_health_args": ["--checks",
                                                           "gpu,log,host,network,power"],
                            "gate_join": True,
                            # the agent's timer (systemd runs in the lab) fires every 12 h,
                            # not 5 min: the tests run the check and gate themselves, and a
                            # timed gate would race them; the deploy still runs it once
                            "agent_interval_min": 720,
                            **controller.node_data()}
        if nodegate_version:
            defaults["data"]["agent_package"] = f"nodegate=={nodegate_version}"
        # this kernel has no md (CONFIG_BLK_DEV_MD): xfs on one disk, not RAID0
        defaults["profile_overrides"] = {"nvme": {"devices": 1}}
    return {
        "schema": "nodegate.site/1",
        "name": "lab",
        "description": "the embedded lab (generated by `nodegate-lab up`; do not edit); "
                       f"credentials: set -a; . {services.env_file()}",
        "defaults": defaults,
        "groups": {"gpu_nodes": [m.name for m in nodes],
                   "controllers": [config.CONTROLLER.name]},
        "slurm": {"controller": config.CONTROLLER.name, "partition": "gpu",
                  "cluster_name": "lab"},
        "hosts": hosts,
    }


def write(data: dict[str, Any]) -> Path:
    """Write atomically and check it loads exactly as pyinfra will load it."""
    import yaml

    from nodegate.site import load_site

    path = site_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# generated by `nodegate-lab up`; removed by `nodegate-lab down`\n"
                   + yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)
    load_site(str(path))
    return path
