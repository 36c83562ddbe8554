"""dcgm: NVIDIA DCGM (host engine + diagnostics), optional per profile (``dcgm.enabled``)."""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import systemd

from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, knob
from roles.ops.packages import AptPin, ensure_packages


@deploy("nodegate dcgm: NVIDIA DCGM", data_defaults=role_defaults("dcgm"))
def dcgm() -> None:
    if not knob("dcgm_enabled", "dcgm.enabled"):
        host.noop("DCGM not enabled for this profile (dcgm_enabled)")
        return
    package = f"datacenter-gpu-manager-4-cuda{int(knob('dcgm_cuda_major'))}"
    version = knob("dcgm_version")
    ensure_packages("dcgm", [package], str(version) if version else None, label="DCGM",
                    apt_pin=AptPin([package, "datacenter-gpu-manager-4-core"], f"1:{version}*"))
    systemd.service(name="dcgm: nvidia-dcgm enabled and running", service="nvidia-dcgm.service",
                    running=True, enabled=True)


if is_deploy_file(globals()):
    dcgm()
