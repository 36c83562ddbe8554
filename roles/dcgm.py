"""dcgm: NVIDIA DCGM (host engine + diagnostics), optional per profile (``dcgm.enabled``)."""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.operations import systemd

from roles import _ops
from roles._common import is_deploy_file, knob, target_os
from roles.defaults import role_defaults


@deploy("nodegate dcgm: NVIDIA DCGM", data_defaults=role_defaults("dcgm"))
def dcgm() -> None:
    if not knob("dcgm_enabled", "dcgm.enabled"):
        host.noop("DCGM not enabled for this profile (dcgm_enabled)")
        return
    os_ = target_os()
    package = f"datacenter-gpu-manager-4-cuda{int(knob('dcgm_cuda_major'))}"
    version = knob("dcgm_version")
    if version:
        if os_.is_debian:
            _ops.put_template(name="dcgm: apt pin", dest="/etc/apt/preferences.d/nodegate-dcgm",
                              src="apt/preferences.j2", role="dcgm", label="DCGM",
                              version=version,
                              packages=[package, "datacenter-gpu-manager-4-core"],
                              pin_version=f"1:{version}*")
        _ops.pinned_packages(name=f"dcgm: {package} = {version}", packages=[package],
                             version=str(version), label="DCGM")
    else:
        _ops.os_packages(name=f"dcgm: {package}", packages=[package])
    systemd.service(name="dcgm: nvidia-dcgm enabled and running", service="nvidia-dcgm.service",
                    running=True, enabled=True)


if is_deploy_file(globals()):
    dcgm()
