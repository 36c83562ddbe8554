"""fabricmanager: NVIDIA Fabric Manager on NVSwitch boards, at exactly the driver's version.

A missing or mismatched fabric manager is the classic "CUDA error 802: system not yet
initialized". Only profiles with ``nvlink.nvswitch`` and ``driver.fabricmanager`` get it; nvlsm
(the NVLink subnet manager) only on NVLink5 boards.
"""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import systemd

from roles.defaults import role_defaults
from roles.nvidia_driver import desired, gpu_busy_reason
from roles.ops.common import TargetOS, is_deploy_file, knob, profile, refuse, target_os
from roles.ops.packages import ensure_packages, package_plan, stale_packages

#: Every branch's fabric manager and NSCQ names on apt (suffixed below 580, plain from 580).
STALE = r"(nvidia-fabricmanager|libnvidia-nscq)(-[0-9]+)?"


def fabricmanager_packages(os_: TargetOS, branch: str) -> list[str]:
    """Fabric manager and NSCQ: branch-suffixed names below 580 on apt; RHEL names one package."""
    if not os_.is_debian:
        return ["nvidia-fabric-manager", "libnvidia-nscq"]
    if int(branch) >= 580:
        return ["nvidia-fabricmanager", "libnvidia-nscq"]
    return [f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"]


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
    pkgs = ensure_packages("fabricmanager", packages, version, label="fabric manager",
                           replaces=stale_packages(os_, STALE, packages))
    systemd.service(name="fabricmanager: nvidia-fabricmanager enabled and running",
                    service="nvidia-fabricmanager.service", running=True, enabled=True)
    systemd.service(name="fabricmanager: restart after a version change",
                    service="nvidia-fabricmanager.service", restarted=True, _if=pkgs.did_change)
    generation = int((prof.get("nvlink") or {}).get("generation") or 0)
    if knob("fabricmanager_nvlsm", "driver.nvlsm") and generation >= 5:
        ensure_packages("fabricmanager", ["nvlsm"],
                        name="fabricmanager: nvlsm (NVLink5 subnet manager)")


if is_deploy_file(globals()):
    fabricmanager()
