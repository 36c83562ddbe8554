"""Quick-level host checks: the operating system a GPU node needs around its driver."""

from __future__ import annotations

from typing import Any

from nodegate.judge.common import expect, make
from nodegate.probes.host import ACS_P2P_BREAKING_BITS, AcsUnreadable, HostProbe
from nodegate.probes.nvml import normalize_bus_id
from nodegate.profiles import Profile
from nodegate.profiles.gpudirect import gpudirect
from nodegate.results import CheckResult, Severity, Verdict
from nodegate.versions import Version

CRIT = Severity.CRITICAL
#: Mount options that never show in /proc/mounts (mount(8)/systemd read them, not the kernel).
USERSPACE_MOUNT_OPTIONS = {"nofail", "auto", "noauto", "defaults", "_netdev", "user", "nouser"}


def judge_host(probe: HostProbe, profile: Profile, gpu_bus_ids: list[str]) -> list[CheckResult]:
    data = profile.data
    modules = probe.loaded_modules()
    pin = data["driver"]["version"]
    out = [
        make("nouveau_absent", "node",
             Verdict.FAIL if "nouveau" in modules else Verdict.PASS,
             measured="loaded" if "nouveau" in modules else "not loaded",
             threshold="not loaded", severity=CRIT),
        _nvidia_module(probe, modules, pin),
        _service("persistenced_service", probe, "nvidia-persistenced", None, pin),
    ]
    if data["driver"]["fabricmanager"]:
        out.append(_service("fabricmanager_service", probe, "nvidia-fabricmanager",
                            _fabricmanager_package(data["driver"]["branch"]), pin))
    out.append(_gpudirect(probe, modules, data))
    out.append(_iommu(probe, data["host"]["iommu"]))
    if data["host"]["acs_disabled"]:
        out += _acs(probe, gpu_bus_ids)
    out.append(_nccl_conf(probe, data["host"].get("nccl_conf_keys", [])))
    if data["nvme"]["devices"]:
        out += _nvme(probe, profile)
    return out


def _fabricmanager_package(branch: str) -> str:
    # the unsuffixed package name is used from branch 580 on
    return "nvidia-fabricmanager" if int(branch) >= 580 else f"nvidia-fabricmanager-{branch}"


def _nvidia_module(probe: HostProbe, modules: set[str], pin: str) -> CheckResult:
    container = probe.container()
    if container is not None and "nvidia" not in modules:
        return make("nvidia_module", "node", Verdict.SKIP, threshold=pin,
                    reason=f"in a {container} container the kernel module is the host's; "
                           "NVML's driver version is checked instead")
    if "nvidia" not in modules:
        return make("nvidia_module", "node", Verdict.FAIL, measured="not loaded", threshold=pin,
                    severity=CRIT)
    loaded = probe.module_version("nvidia")
    same = loaded is not None and Version(loaded) == Version(pin)
    return make("nvidia_module", "node", Verdict.PASS if same else Verdict.FAIL,
                measured=loaded, threshold=pin, severity=CRIT,
                hint=None if same else "loaded module differs from the pin: reboot or reload")


def _service(check: str, probe: HostProbe, unit: str, package: str | None,
             pin: str) -> CheckResult:
    state = probe.service_state(unit)
    if state is None:
        return make(check, "node", Verdict.ERROR, threshold="active", severity=CRIT,
                    reason="systemctl not available", unit_name=unit)
    if state != "active":
        return make(check, "node", Verdict.FAIL, measured=state, threshold="active",
                    severity=CRIT, unit_name=unit)
    if package is None:
        return make(check, "node", Verdict.PASS, measured=state, threshold="active",
                    unit_name=unit)
    version = probe.package_version(package)
    same = version is not None and Version(version) == Version(pin)
    return make(check, "node", Verdict.PASS if same else Verdict.FAIL,
                measured=f"{state} {version}", threshold=f"active {pin}", severity=CRIT,
                unit_name=unit, package=package,
                hint=None if same else "fabric manager must match the driver exactly")


def _gpudirect(probe: HostProbe, modules: set[str], data: dict[str, object]) -> CheckResult:
    """GPUDirect RDMA as the profile declares it: the peermem module loaded, or what DMA-BUF
    needs (the open kernel modules and a kernel built with DMA-BUF)."""
    declared = gpudirect(data)
    extra: dict[str, Any] = {"mode": declared.mode, "mode_source": declared.source}
    if declared.mode == "none":
        return make("gpudirect_rdma", "node", Verdict.SKIP, threshold="none",
                    reason="the profile declares no GPUDirect RDMA (host.gpudirect.mode: none)",
                    **extra)
    if declared.mode == "peermem":
        loaded = "nvidia_peermem" in modules
        return make("gpudirect_rdma", "node", Verdict.PASS if loaded else Verdict.FAIL,
                    measured="nvidia_peermem loaded" if loaded else "nvidia_peermem not loaded",
                    threshold="nvidia_peermem loaded", severity=CRIT,
                    hint=None if loaded else "modprobe nvidia-peermem, and list it in "
                    "/etc/modules-load.d (the nvidia_driver role does both)", **extra)
    threshold = "open kernel modules, CONFIG_DMA_SHARED_BUFFER"
    flavour = probe.nvidia_module_flavour()
    config = probe.kernel_config()
    unknown = []
    if flavour is None:
        unknown.append("nvidia module flavour (no /proc/driver/nvidia/version, no modinfo)")
    if config is None:
        unknown.append(f"kernel config (no /boot/config-{probe.kernel_release() or '?'}, "
                       "no /proc/config.gz)")
    dma_buf = config.options.get("CONFIG_DMA_SHARED_BUFFER") if config else None
    measured = f"{flavour or '?'} modules, CONFIG_DMA_SHARED_BUFFER=" \
               f"{dma_buf or ('unset' if config else '?')}"
    if flavour == "proprietary" or (config is not None and dma_buf not in ("y", "m")):
        why = ("the proprietary kernel modules do not export DMA-BUF: install the open ones "
               "or declare peermem" if flavour == "proprietary"
               else f"the kernel has no DMA-BUF ({config.path if config else '?'})")
        return make("gpudirect_rdma", "node", Verdict.FAIL, measured=measured,
                    threshold=threshold, severity=CRIT, hint=why,
                    kernel_config=config.path if config else None, **extra)
    if unknown:
        return make("gpudirect_rdma", "node", Verdict.ERROR, measured=measured,
                    threshold=threshold, severity=CRIT,
                    reason="could not read " + "; ".join(unknown), **extra)
    return make("gpudirect_rdma", "node", Verdict.PASS, measured=measured, threshold=threshold,
                kernel_config=config.path if config else None, **extra)


def iommu_mode(cmdline: list[str]) -> str:
    """The IOMMU mode the kernel command line asks for: pt, on, off or default.

    As the kernel parses it: each parameter is its own switch (``intel_iommu=on`` or
    ``amd_iommu=on`` turns translation on, ``iommu=pt`` / ``iommu.passthrough=1`` makes it
    passthrough, ``iommu=off`` turns it off), so their order does not matter; only a later
    occurrence of the same parameter overrides an earlier one."""
    last: dict[str, str] = {}
    for arg in cmdline:
        key, sep, value = arg.partition("=")
        if sep and key in ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough"):
            last[key] = value
    vendor = [set(last[k].split(",")) for k in ("intel_iommu", "amd_iommu") if k in last]
    vendor_on = any(v & {"on", "force_enable"} for v in vendor)
    vendor_off = any("off" in v for v in vendor) and not vendor_on
    generic = last.get("iommu", "")
    if generic == "off" or vendor_off:
        return "off"
    passthrough = {"pt": True, "nopt": False}.get(generic)
    if "iommu.passthrough" in last:
        passthrough = last["iommu.passthrough"] in ("1", "y", "Y", "on")
    if passthrough:
        return "pt"
    if vendor_on or generic in ("on", "force"):
        return "on"
    return "default"


def _iommu(probe: HostProbe, expected: str) -> CheckResult:
    mode = iommu_mode(probe.kernel_cmdline())
    if expected == "any":
        return make("iommu_mode", "node", Verdict.PASS, measured=mode, threshold="any")
    return expect("iommu_mode", "node", mode, expected, severity=Severity.WARNING,
                  fail=Verdict.FAIL)


def _acs(probe: HostProbe, gpu_bus_ids: list[str]) -> list[CheckResult]:
    out = []
    seen: set[str] = set()
    for bus in gpu_bus_ids:
        function = f"{normalize_bus_id(bus)}.0"
        bridges = probe.pci_bridges_above(function)
        if not bridges:
            out.append(make("pcie_acs", function, Verdict.ERROR, threshold="0x0000 (disabled)",
                            severity=CRIT, reason=f"GPU {function} not found in "
                            "/sys/bus/pci/devices: the bridges above it are unknown"))
        for bridge in bridges:
            if bridge in seen:
                continue
            seen.add(bridge)
            try:
                control = probe.acs_control(bridge)
            except AcsUnreadable as exc:
                out.append(make("pcie_acs", bridge, Verdict.ERROR,
                                threshold="0x0000 (disabled)", severity=CRIT,
                                reason=f"ACS control unreadable: {exc} (run as root)"))
                continue
            if control is None:
                continue  # no ACS capability on this bridge: nothing to disable
            bad = control & ACS_P2P_BREAKING_BITS
            out.append(make("pcie_acs", bridge, Verdict.FAIL if bad else Verdict.PASS,
                            measured=f"0x{control:04x}", threshold="0x0000 (disabled)",
                            severity=CRIT))
    return out


def _nccl_conf(probe: HostProbe, keys: list[str]) -> CheckResult:
    conf = probe.nccl_conf()
    if conf is None:
        return make("nccl_conf", "node", Verdict.FAIL, measured="missing",
                    threshold=keys, severity=Severity.WARNING)
    missing = [k for k in keys if k not in conf]
    return make("nccl_conf", "node", Verdict.FAIL if missing else Verdict.PASS,
                measured=sorted(conf), threshold=keys, severity=Severity.WARNING,
                missing=missing or None)


def _nvme(probe: HostProbe, profile: Profile) -> list[CheckResult]:
    nvme = profile.data["nvme"]
    mount = next((m for m in probe.mounts() if m.mountpoint == nvme["mountpoint"]), None)
    arrays = probe.md_arrays()
    array = None
    if mount is not None:
        array = next((a for a in arrays if mount.device.endswith(a.name)), None)
    if array is None and arrays:
        array = arrays[0]
    results = []
    if nvme["devices"] == 1:
        pass  # one disk: a filesystem straight on it, no md array to judge
    elif array is None:
        results.append(make("nvme_array", "node", Verdict.FAIL, measured="no md array",
                            threshold=f"raid{nvme['raid_level']} x{nvme['devices']}",
                            severity=CRIT))
    else:
        ok = array.healthy and len(array.devices) == nvme["devices"]
        results.append(make("nvme_array", array.name, Verdict.PASS if ok else Verdict.FAIL,
                            measured=f"{array.state} {array.level} x{len(array.devices)}",
                            threshold=f"active raid{nvme['raid_level']} x{nvme['devices']}",
                            severity=CRIT, devices=array.devices))
    if mount is None:
        results.append(make("nvme_mount", nvme["mountpoint"], Verdict.FAIL,
                            measured="not mounted", threshold=nvme["filesystem"], severity=CRIT))
    else:
        kernel_visible = [o for o in nvme["mount_options"]
                          if o not in USERSPACE_MOUNT_OPTIONS and not o.startswith("x-")]
        missing = [o for o in kernel_visible if o not in mount.options]
        ok = mount.fstype == nvme["filesystem"] and not missing
        results.append(make("nvme_mount", nvme["mountpoint"],
                            Verdict.PASS if ok else Verdict.FAIL,
                            measured=f"{mount.fstype} {','.join(mount.options)}",
                            threshold=f"{nvme['filesystem']} {','.join(nvme['mount_options'])}",
                            severity=CRIT, missing_options=missing or None))
    return results
