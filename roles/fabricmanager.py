"""fabricmanager: NVIDIA Fabric Manager on NVSwitch boards, at exactly the driver's version.

A missing or mismatched fabric manager is the classic "CUDA error 802: system not yet
initialized". Only profiles with ``nvlink.nvswitch`` and ``driver.fabricmanager`` get it.

NVLink 5 boards (HGX B200/B300: profile ``nvlink.generation`` 5 and ``driver.nvlsm``, knob
``fabricmanager_nvlsm``) need more, and only they get it, before Fabric Manager starts:

- ``nvlsm``, NVIDIA's NVLink subnet manager, the same package name on apt and dnf in NVIDIA's
  CUDA repositories (``.../cuda/repos/rhel9/x86_64/nvlsm-<v>-1.x86_64.rpm``, as
  bottlerocket-os/bottlerocket-kernel-kit#142 fetches it; awslabs/amazon-eks-ami#2239 installs
  it on the same documented ground). Its versions run on their own line, not the driver's, so
  it is installed unpinned. The Fabric Manager guide ("Systems Using Fourth Generation
  NVSwitches", quoted in siderolabs/extensions#717): without NVLSM, FM fails with
  ``NV_WARN_NOTHING_TO_DO``, the GPUs stay fabric "In Progress" and CUDA returns
  ``cudaErrorSystemNotReady`` (802).
- No unit of its own: the FM package's ``nvidia-fabricmanager-start.sh`` (the
  ``nvidia-fabricmanager.service`` start script) finds the ConnectX bridge's limited functions
  (VPD ``SMDL=SW_MNG``) and starts NVLSM beside FM on that port; a second, separate NVLSM
  unit races it ("another instance of OpenSM is already running", seen by installers that
  added one). Enabling NVLSM is therefore enabling FM's service, and FM is restarted when
  nvlsm or the modules below arrive, since its start script only looks at start.
- ``ib_umad`` and ``mlx5_ib`` at every boot (/etc/modules-load.d) and now: FM reaches the
  NVSwitches through InfiniBand MADs, and from FM 570 its precheck needs them; an image
  without them leaves the fabric "In Progress" on all 8 GPUs while everything else looks up
  (NVIDIA/gpu-operator#2781 on HGX B200; spectrocloud/CanvOS#700 autoloads ib_umad for the
  same precheck). In a container they belong to the host's kernel and are not loaded.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from roles.defaults import role_defaults
from roles.nvidia_driver import desired, gpu_busy_reason
from roles.ops.common import (
    TargetOS,
    container,
    is_deploy_file,
    knob,
    profile,
    refuse,
    target_os,
    template,
)
from roles.ops.packages import ensure_packages, package_plan, stale_packages

#: Every branch's fabric manager and NSCQ names on apt (suffixed below 580, plain from 580).
STALE = r"(nvidia-fabricmanager|libnvidia-nscq)(-[0-9]+)?"
#: What an NVLink 5 board needs beside Fabric Manager (module docstring: the sources).
NVLSM_PACKAGES = ("nvlsm",)
NVLINK5_MODULES = ("ib_umad", "mlx5_ib")
NVLINK5_MODULES_CONF = "/etc/modules-load.d/nodegate-nvlink5.conf"


def fabricmanager_packages(os_: TargetOS, branch: str) -> list[str]:
    """Fabric manager and NSCQ: branch-suffixed names below 580 on apt; RHEL names one package."""
    if not os_.is_debian:
        return ["nvidia-fabric-manager", "libnvidia-nscq"]
    if int(branch) >= 580:
        return ["nvidia-fabricmanager", "libnvidia-nscq"]
    return [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]


def nvlink5(prof: dict[str, Any]) -> bool:
    """An NVLink 5 fabric that wants NVLSM: generation 5 or later and ``fabricmanager_nvlsm``
    (profile ``driver.nvlsm``). H100 and A100 boards also have 18 links: the generation
    decides, never the count."""
    generation = int((prof.get("nvlink") or {}).get("generation") or 0)
    return generation >= 5 and bool(knob("fabricmanager_nvlsm", "driver.nvlsm"))


def _nvlink5_prerequisites() -> list[Any]:
    """nvlsm installed, ib_umad and mlx5_ib loaded at boot and now; the operations whose
    change means Fabric Manager must start again."""
    nvlsm = ensure_packages("fabricmanager", list(NVLSM_PACKAGES),
                            name="fabricmanager: nvlsm (NVLink 5 subnet manager)")
    conf = files.put(name="fabricmanager: load ib_umad and mlx5_ib at boot (NVLink 5)",
                     src=template("fabricmanager", "nvlink5-modules.conf"),
                     dest=NVLINK5_MODULES_CONF, mode="644")
    changed = [nvlsm, conf]
    virt = container()
    if virt:
        host.noop(f"running in a {virt} container: ib_umad and mlx5_ib belong to the host's "
                  "kernel")
        return changed
    for module in NVLINK5_MODULES:
        changed.append(server.modprobe(name=f"fabricmanager: {module} loaded (NVLink 5)",
                                       module=module))
    return changed


@deploy("nodegate fabricmanager: NVSwitch fabric manager at the driver's version",
        data_defaults=role_defaults("fabricmanager"))
def fabricmanager() -> None:
    prof = profile()
    nvswitch = bool((prof.get("nvlink") or {}).get("nvswitch"))
    wanted = knob("fabricmanager_enabled", "driver.fabricmanager")
    if not (wanted and nvswitch):
        host.noop("no fabric manager: the profile has no NVSwitch fabric")
        return
    os_ = target_os()
    branch, version, _modules = desired()
    packages = fabricmanager_packages(os_, branch)
    wrong, _unheld = package_plan(os_, packages, version)
    if wrong:
        busy = gpu_busy_reason(str(knob("nvidia_driver_python")))
        if busy:
            refuse(f"fabric manager change to {version} refused: {busy}. Drain the node first")
            return
    prerequisites = _nvlink5_prerequisites() if nvlink5(prof) else []
    pkgs = ensure_packages("fabricmanager", packages, version, label="fabric manager",
                           replaces=stale_packages(os_, STALE, packages))
    systemd.service(name="fabricmanager: nvidia-fabricmanager enabled and running",
                    service="nvidia-fabricmanager.service", running=True, enabled=True)
    systemd.service(name="fabricmanager: restart after a version change",
                    service="nvidia-fabricmanager.service", restarted=True,
                    _if=any_changed(pkgs, *prerequisites))


if is_deploy_file(globals()):
    fabricmanager()
