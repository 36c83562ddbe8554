"""Every role knob's default, in one place. Knobs are prefixed by their role.

A knob set to None is resolved from the host's resolved profile (``nodegate_profile_data``) or
its site data (``nodegate_nccl``, ``nodegate_nvme``, ``nodegate_bmc``, ``nodegate_pdus``) by the
role; a value set in the inventory, group data or ``--data`` always wins.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    # every role's apt calls (roles/ops/packages.py: apt): seconds to wait for the dpkg lock
    # (unattended-upgrades holds it for a while) before the host fails; 0: fail at once
    "apt_lock_timeout_s": 300,
    # pyinfra's SSH connection (inventory.py applies them to every host; docs/reliability.md):
    "ssh_keepalive_s": 15,                # SSH keepalive interval: a silent link drop is seen
    "ssh_keepalive_count": 4,             # after this many unanswered keepalives
    "ssh_command_timeout_s": 3600,        # no single command runs longer (a driver build
                                          # included); then that host fails, the others go on
    # base
    "base_blacklist_nouveau": True,
    "base_kernel_args": None,             # None: ["iommu=pt"] when the profile wants iommu: pt
    "base_disable_acs": None,             # None: profile host.acs_disabled
    "base_acs_bridge_vendors": ["10b5", "1000"],  # Broadcom/PLX PCIe switches above HGX GPUs
    "base_numa_balancing": False,
    "base_memlock_unlimited": True,
    "base_packages": ["pciutils", "kmod"],
    # nvidia_driver
    "nvidia_driver_source": "cuda-repo",  # cuda-repo | distro | mirror
    "nvidia_driver_branch": None,         # profile driver.branch
    "nvidia_driver_version": None,        # profile driver.version (exact, pinned and held)
    "nvidia_driver_kernel_modules": None,  # profile driver.kernel_modules: open | proprietary
    "nvidia_driver_persistenced": None,   # profile driver.persistenced
    "nvidia_driver_packages": None,       # None: chosen from OS, source, branch and modules
    "nvidia_driver_cuda_repo_url": "https://developer.download.nvidia.com/compute/cuda/repos",
    "nvidia_driver_cuda_keyring_version": "1.1-1",
    "nvidia_driver_mirror_url": None,     # air-gapped: an apt/dnf repository URL
    "nvidia_driver_mirror_keyring_url": None,  # None: the mirror is trusted (lab only)
    # source=distro on Debian: the archive components the driver needs (contrib, non-free,
    # non-free-firmware) from these; components None: the node's own sources already have them
    "nvidia_driver_debian_url": "http://deb.debian.org/debian",
    "nvidia_driver_debian_security_url": "http://deb.debian.org/debian-security",
    "nvidia_driver_debian_components": ["contrib", "non-free", "non-free-firmware"],
    "nvidia_driver_allow_reboot": False,  # reboot when the loaded module is not the installed one
    "nvidia_driver_reboot_timeout": 900,  # seconds for the node to come back with a new boot id
    "nvidia_driver_drained": False,       # the operator (deploy/drain.py) says the node is drained
    "nvidia_driver_python": "/opt/nodegate/venv/bin/python",  # NVML fallback for GPU processes
    "nvidia_driver_kernel_headers": True,  # headers for DKMS (off where the kernel is the host's)
    "nvidia_driver_dnf_stream": None,     # EL9 stream; None: <branch>-open/-dkms (cuda-repo)
    "nvidia_driver_gpudirect": None,      # profile host.gpudirect.mode: dmabuf | peermem | none
    # fabricmanager
    "fabricmanager_enabled": None,        # profile driver.fabricmanager (NVSwitch boards)
    "fabricmanager_nvlsm": None,          # profile driver.nvlsm (NVLink5 boards)
    # nccl
    "nccl_version": None,                 # profile nccl.version, e.g. 2.26.2-1+cuda12.8
    "nccl_install_dev": True,
    "nccl_socket_ifname": None,           # site nccl.socket_ifname
    "nccl_ib_hca": None,                  # site nccl.ib_hca; none: the node's discovered rails
    "nccl_ib_gid_index": None,            # site nccl.ib_gid_index (RoCE)
    "nccl_ib_tc": None,                   # set by the network role: RoCE ToS (DSCP << 2)
    # network (RDMA rails; before nccl, which renders what it hands over)
    "network_enabled": None,              # None: when the profile declares network.rails
    "network_stack": None,                # site network.stack: distro | doca-ofed | mlnx-ofed
    "network_packages": None,             # None: chosen from the stack and OS family
    "network_ofed_mirror_url": None,      # site network.ofed_mirror_url (DOCA/MLNX_OFED repo)
    "network_ofed_keyring_url": None,     # site network.ofed_keyring_url; None: trusted (lab)
    "network_gpudirect": None,            # profile host.gpudirect.mode: dmabuf | peermem | none
    "network_mtu": None,                  # profile network.rails.mtu (RoCE netdevs)
    "network_devices": None,              # profile network.rails.devices (HCA name globs)
    "network_dscp": None,                 # site network.dscp: RoCE ToS = DSCP << 2, NCCL_IB_TC
    "network_pfc_priority": None,         # site network.pfc_priority: PFC on it, DSCP trust
    "network_ecn": None,                  # site network.ecn: ECN (mlx5 sysfs) on that priority
    "network_nccl_ib": True,              # hand NCCL_IB_TC to the nccl role
    # dcgm
    "dcgm_enabled": None,                 # profile dcgm.enabled, else off
    "dcgm_version": None,                 # None: not pinned
    "dcgm_cuda_major": 12,
    # nvme
    "nvme_devices": None,                 # site nvme.devices (/dev/disk/by-id names)
    "nvme_array": "/dev/md/nodegate0",
    "nvme_raid_level": None,              # profile nvme.raid_level
    "nvme_chunk_kib": 512,
    "nvme_mountpoint": None,              # profile nvme.mountpoint
    "nvme_filesystem": None,              # profile nvme.filesystem (xfs)
    "nvme_mount_options": None,           # profile nvme.mount_options
    "nvme_fstrim": True,
    "nvme_require_by_id": True,       # stable /dev/disk/by-id names only (the lab may relax)
    # pdu_monitor
    "pdu_monitor_enabled": None,          # None: when the host has PDUs or a BMC
    "pdu_monitor_config": "/etc/nodegate/power-poller.yaml",
    "pdu_monitor_env_file": "/etc/nodegate/power-poller.env",  # also loaded by agent's health
    "pdu_monitor_node_file": "/etc/nodegate/node.json",  # the battery's power wiring
    "pdu_monitor_user": "root",
    "pdu_monitor_interval_s": 30,
    "pdu_monitor_timeout_s": 2,
    "pdu_monitor_retries": 1,
    "pdu_monitor_textfile": "/var/lib/node_exporter/textfile_collector/nodegate_power.prom",
    "pdu_monitor_listen": None,
    "pdu_monitor_push_env_secrets": True,  # copy *_env secrets from the operator's env (0600)
    "pdu_monitor_verify": True,           # bring-up: each BMC/PDU answers, names this host
    "pdu_monitor_bmc_serial": None,       # the host's serial its BMC's Systems must carry
    # agent
    "agent_venv": "/opt/nodegate/venv",
    "agent_python": "python3",
    "agent_package": "nodegate",          # a requirement: nodegate, nodegate==0.1.0, a wheel path
    "agent_extras": None,                 # None: ["power"] where the power poller runs
    "agent_wheelhouse_url": None,         # pip --find-links (air-gapped)
    "agent_index_url": None,              # pip --index-url
    "agent_pip_compile": True,            # false: pip --no-compile (modules compile on first
                                          # import; torch's ~14,000 files halve the install)
    "agent_profile_path": "/etc/nodegate/profile.json",
    "agent_report_dir": "/var/lib/nodegate/reports",
    "agent_textfile_dir": "/var/lib/node_exporter/textfile_collector",
    "agent_schedule": None,               # cron | systemd-timer; None: the timer where
                                          # systemd is init, else cron (installed, enabled)
    "agent_first_run_timeout_s": 900,     # the deploy runs the schedule once and waits this
    "agent_interval_min": 5,
    "agent_health_args": [],              # extra args for `nodegate health` (schedule and gate)
    "agent_schedule_gate": True,          # run `nodegate gate` after each scheduled health check
    "agent_schedule_health_args": None,   # None: agent_health_args; the scheduled check only
    # slurm_node
    "slurm_node_controller": None,        # slurmctld's host; None: the role does nothing
    "slurm_node_controller_port": 6817,   # slurmctld's port (configless --conf-server)
    "slurm_node_munge_key_file": None,    # path on the pyinfra machine; never the key itself
    # read by slurm_controller from each node's data for slurm.conf/gres.conf:
    "slurm_node_gres_autodetect": False,  # AutoDetect=nvml (slurmd built with NVML; Debian
                                          # 12's is not: it has gpu_generic only)
    "slurm_node_gpu_count": None,         # profile gpu.count (gres.conf without a driver)
    "slurm_node_gpu_type": None,          # gres Type= (e.g. h100); None: untyped
    "slurm_node_cpus": None,              # slurm.conf CPUs=; None: the node's CPU count
    "slurm_node_real_memory": None,       # slurm.conf RealMemory= (MiB); None: 95 % of its RAM
    "slurm_node_nodegate": "/opt/nodegate/venv/bin/nodegate",
    "slurm_node_prolog_checks": "gpu,log",  # `nodegate health --checks` in prolog/epilog
    # seconds the prolog/epilog wait for another nodegate run's lock, then skip (exit 0): a
    # non-zero exit drains the node "Prolog error", and the lock's holder judges the node
    "slurm_node_prolog_lock_wait": 60,
    # NAME=value lines the hooks (prolog, epilog, HealthCheckProgram) load first: slurmd runs
    # them with an environment of its own making (SLURM_* only); None: nothing loaded
    "slurm_node_hook_env_file": None,
    # slurm_controller
    "slurm_controller_enabled": False,    # opt-in on the slurmctld host (site host data)
    "slurm_controller_munge_key_file": None,  # path on the pyinfra machine; never the key
    "slurm_controller_nodes_group": "gpu_nodes",  # inventory group: one NodeName line each
    "slurm_controller_cluster_name": None,  # None: the site's slurm.cluster_name, else "nodegate"
    "slurm_controller_partition": None,   # None: the site's slurm.partition, else "gpu"
    "slurm_controller_port": 6817,        # SlurmctldPort (the nodes' --conf-server port)
    "slurm_controller_proctrack": "proctrack/cgroup",
    "slurm_controller_task_plugin": "task/cgroup,task/affinity",
    "slurm_controller_health_check": True,  # HealthCheckProgram = slurm_node's gate wrapper
    "slurm_controller_health_check_interval": 300,
    "slurm_controller_prolog_epilog": True,  # Prolog/Epilog = slurm_node's quick check
    "slurm_controller_return_to_service": 2,
    "slurm_controller_extra_lines": [],   # more slurm.conf lines, verbatim (site policy)
    "slurm_controller_remove_nodes": [],  # Slurm names slurm.conf may lose (a rename, a node
                                          # retired): drained first, removed when idle; any
                                          # other node the inventory lacks is kept
    # the rolling upgrade (deploy/rolling_upgrade.py)
    "rolling_batch": 1,                   # nodes upgraded at once
    "rolling_max_unavailable": None,      # per partition: an int, or {partition: n, default: n};
                                          # None: rolling_batch
    "rolling_job_timeout_s": 3600,        # wait this long for running jobs, then skip the node
    "rolling_gate_level": "standard",     # the validation each node must pass to rejoin
    # remediation (deploy/remediate.py, docs/remediation.md)
    "remediate_enabled": None,            # None: the profile's remediation.enabled; true: the
                                          # site's (or a group's: a partition's) opt-in
    "remediate_dry_run": False,           # the nodes say what they would do, change nothing
    "remediate_duration_scale": 1.0,      # the standard re-qualification's load phases
    # the gate (deploy.py)
    "gate_enabled": True,
    "gate_fetch_dir": "reports",          # operator side: reports/<host>/<level>-latest.json
    "gate_level": "standard",             # quick | standard | acceptance: what must pass to join
    "gate_duration_scale": 1.0,           # shrink the load phases (the lab uses small values)
    "gate_join": True,                    # resume/drain in Slurm after validation
    "gate_max_age": "24h",                # a report older than this does not join
    "gate_multinode_peer": None,          # a known-good node (inventory name): every other GPU
                                          # host runs the collectives with it, must pass to join
    "gate_multinode_group_size": 0,       # nodes per run, the peer included (2: pairs; 0: all)
    "gate_multinode_port": 29400,         # its rendezvous port (+ the group's index)
    "gate_multinode_timeout_s": 120,      # how long one side waits for the other
    "gate_history_keep": 1000,            # deploy/fetch_reports.py: newest dated reports per node
                                          # copied to <gate_fetch_dir>/<host>/history/
}


def role_defaults(role: str) -> dict[str, Any]:
    """The knobs of one role, for ``@deploy(..., data_defaults=role_defaults("nccl"))``."""
    prefix = f"{role}_"
    return {k: v for k, v in DEFAULTS.items() if k.startswith(prefix)}
