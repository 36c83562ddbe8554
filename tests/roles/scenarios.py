"""Shared scenario pieces for the role tests: profiles, site data, converged-node facts."""

from __future__ import annotations

from typing import Any

from nodegate.profiles import resolve_profile

DRIVER = "570.133.20"
NCCL = "2.26.2-1+cuda12.8"
OSES = ["ubuntu22", "ubuntu24", "debian12", "rhel9", "rocky9"]
DEVICES = [f"/dev/disk/by-id/nvme-Dell_Ent_NVMe_CM6_RI_3.84TB_S61ANE0R40100{i}" for i in (1, 2)]
ARRAY_UUID = "3f1c2a9e:5b7d4c10:9e8f7a6b:1c2d3e4f"
FS_UUID = "8d3c6f0e-2b1a-4f5e-9c7d-6a5b4c3d2e1f"


def host_data(profile: str = "xe9680-h100", **extra: Any) -> dict[str, Any]:
    """Host data as inventory.py hands it to pyinfra for one example-site node."""
    data: dict[str, Any] = {
        "nodegate_profile": profile,
        "nodegate_profile_data": resolve_profile(profile).data,
        "nodegate_nccl": {"socket_ifname": "bond0", "ib_hca": "mlx5_0,mlx5_1",
                          "ib_gid_index": 3},
        "nodegate_nvme": {"devices": list(DEVICES)},
        "nodegate_slurm": {"node_name": "gpu-b01"},
        "nodegate_bmc": {"url": "https://10.20.101.11", "model": "idrac9", "username": "monitor",
                         "password_env": "IDRAC_PASSWORD"},
        "nodegate_pdus": [{"name": "b01-pdu-a", "url": "snmp://10.20.201.1:161",
                           "model": "apc-rpdu2", "outlets": [1, 2],
                           "community_env": "PDU_COMMUNITY"}],
    }
    data.update(extra)
    return data


class AllInstalled(dict[str, Any]):
    """DebPackages/RpmPackages of a converged node: every package at the pinned version."""

    def __init__(self, rhel: bool = False, **versions: str) -> None:
        super().__init__()
        self.rhel = rhel
        self.versions = versions

    def __contains__(self, key: object) -> bool:
        return True

    def items(self) -> Any:  # type: ignore[override]
        """A sample of what a converged node lists: the driver's set at its version."""
        names = (("nvidia-driver", "libnvidia-ml", "nvidia-kmod-common", "nvidia-modprobe",
                  "libnccl") if self.rhel else
                 ("nvidia-driver-570-open", "libnvidia-compute-570", "libcuda1",
                  "firmware-nvidia-gsp", "libnccl2"))
        return [(name, self.get(name)) for name in names]

    def get(self, key: str, default: Any = None) -> Any:
        version = NCCL if "nccl" in key else self.versions.get(key, DRIVER)
        if "-" in version:
            return [version + (".el9" if self.rhel else "")]
        return [version + ("-1.el9" if self.rhel else "-0ubuntu1")]


class AllHeld(AllInstalled):
    def get(self, key: str, default: Any = None) -> Any:
        return NCCL.split("-", maxsplit=1)[0] if "nccl" in key else DRIVER


class AllTrue(dict[str, bool]):
    def get(self, key: str, default: Any = None) -> bool:
        return True


def converged_facts(os_name: str) -> dict[str, Any]:
    rhel = os_name.startswith(("rhel", "rocky"))
    return {
        "deb.DebPackages": AllInstalled(),
        "rpm.RpmPackages": AllInstalled(rhel=True) if rhel else {},
        "packages.HeldPackages": AllHeld(),
        "packages.DnfModuleState": {"name": "nvidia-driver", "stream": "570-open",
                                    "profiles": "", "state": "enabled"} if rhel else {},
        "systemd.SystemdStatus": AllTrue(),
        "systemd.SystemdEnabled": AllTrue(),
        "server.Sysctl": {"kernel.numa_balancing": 0},
        "server.Command": "ro quiet iommu=pt",
        "kernel.LoadedModuleVersions": {"nvidia": DRIVER},
        "kernel.InstalledModule": {"version": DRIVER, "license": "Dual MIT/GPL",
                                   "filename": "/lib/modules/nvidia.ko"},
        "gpu.GpuProcesses": [],
        "gpu.GpuPlacements": [{"minor": i, "bdf": f"0000:{0x18 + 0x20 * i:02x}:00.0",
                               "socket": i // 4, "cores": "0-55" if i < 4 else "56-111"}
                              for i in range(8)],
        "storage.MdArrays": {"/dev/md/nodegate0": {"uuid": ARRAY_UUID, "name": "gpu-b01:nodegate0",
                                                   "level": "raid0"}},
        "storage.MdSuperblocks": {d: ARRAY_UUID for d in DEVICES},
        "storage.Blkid": {"UUID": FS_UUID, "TYPE": "xfs"},
        "packages.VenvDistributions": {"nodegate": ["0.1.0"], "torch": ["2.13.0+cpu"],
                                       "pysnmp": ["7.1.22"]},
        # systemd is init: the agent's schedule is the timer, enabled, active and run once
        "schedule.SystemdBooted": True,
        "schedule.ScheduleState": {"nodegate-health.timer": "enabled active",
                                   "stamp": "systemd-timer"},
    }


def converged_files(os_name: str) -> dict[str, Any]:
    rhel = os_name.startswith(("rhel", "rocky"))
    conf = "/etc/mdadm.conf" if rhel else "/etc/mdadm/mdadm.conf"
    return {
        conf: f"ARRAY /dev/md/nodegate0 metadata=1.2 name=gpu-b01:nodegate0 UUID={ARRAY_UUID}\n",
        "/opt/nodegate/venv/pyvenv.cfg": "home = /usr/bin\n",
        "/etc/yum.repos.d/cuda-rhel9.repo": "[cuda-rhel9-x86_64]\n",
        "/etc/nodegate/power-verified.json": '{"bmcs": ["https://10.20.101.11"]}\n',
        "/etc/nodegate/power-poller.env": {"content": "IDRAC_PASSWORD=s3cret\n"
                                                      "PDU_COMMUNITY=c0mm\n", "mode": 600},
    }
