"""nccl: libnccl2/libnccl-dev pinned to the profile, and /etc/nccl.conf with system settings.

/etc/nccl.conf carries what this node's network is (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, the RoCE
GID index); debugging variables never go there, they belong to a job's environment.

``NCCL_IB_HCA`` comes from the node's discovered rails (``facts.rdma``: the HCA ports behind
the GPUs' switches, limited to the profile's ``network.rails.devices``), written with NCCL's
``=`` prefix so ``mlx5_1`` cannot also match ``mlx5_10`` (NCCL's environment-variable docs:
a leading ``=`` asks for an exact match). A site ``nccl.ib_hca`` (or ``nccl_ib_hca``) still
wins, for a rail an operator takes out by hand.
"""

from __future__ import annotations

import re

from pyinfra import logger
from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host

from nodegate.facts.rdma import RdmaRails, rails
from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, knob, profile, target_os
from roles.ops.files import put_template
from roles.ops.packages import AptPin, ensure_packages

#: the only keys nccl.conf gets, and the knob each comes from
SETTINGS = (("NCCL_SOCKET_IFNAME", "nccl_socket_ifname", "nccl.socket_ifname"),
            ("NCCL_IB_HCA", "nccl_ib_hca", "nccl.ib_hca"),
            ("NCCL_IB_GID_INDEX", "nccl_ib_gid_index", "nccl.ib_gid_index"),
            # the RoCE traffic class the network role set (DSCP << 2), handed over in host data
            ("NCCL_IB_TC", "nccl_ib_tc", "nccl.ib_tc"))
_VALUE = re.compile(r"^[A-Za-z0-9_.,:^=+-]+$")


def discovered_ib_hca() -> str | None:
    """``=mlx5_0:1,...`` from the rails the node shows, None when it shows none (NCCL then
    picks its own); a count other than the profile's is said, the battery judges it."""
    declared = (profile().get("network") or {}).get("rails") or {}
    found = rails(host.get_fact(RdmaRails), list(declared.get("devices") or []) or None)
    count = declared.get("count")
    if count is not None and len(found.hca_ports) != int(count):
        logger.warning(f"{host.name}: {len(found.hca_ports)} rail port(s) behind the GPUs' "
                       f"switches, the profile declares {count} (network.rails.count); "
                       f"NCCL_IB_HCA names what was found")
    if found.unpaired:
        logger.warning(f"{host.name}: HCA(s) behind no GPU's switch left out of NCCL_IB_HCA: "
                       f"{', '.join(found.unpaired)}")
    return "=" + ",".join(found.hca_ports) if found.hca_ports else None


def nccl_settings() -> list[tuple[str, str]]:
    """(key, value) pairs for nccl.conf; a value that is not one plain token is refused."""
    out = []
    for key, name, site in SETTINGS:
        value = knob(name, site=site)
        if (value is None or value == "") and key == "NCCL_IB_HCA":
            value = discovered_ib_hca()
        if value is None or value == "":
            continue
        text = str(value)
        if not _VALUE.match(text):
            raise DeployError(f"{host.name}: {name} {text!r} is not a plain NCCL value "
                              "(no spaces, quotes, ';' or newlines)")
        out.append((key, text))
    return out


@deploy("nodegate nccl: NCCL pinned, /etc/nccl.conf", data_defaults=role_defaults("nccl"))
def nccl() -> None:
    os_ = target_os()
    version = knob("nccl_version", "nccl.version")
    if not version:
        raise DeployError(f"{host.name}: no NCCL version (profile nccl.version or nccl_version)")
    version = str(version)
    if os_.is_debian:
        packages = ["libnccl2"] + (["libnccl-dev"] if knob("nccl_install_dev") else [])
    else:
        packages = ["libnccl"] + (["libnccl-devel"] if knob("nccl_install_dev") else [])
    ensure_packages("nccl", packages, version, label="NCCL", apt_pin=AptPin(packages, version))
    settings = nccl_settings()
    wanted = (profile().get("host") or {}).get("nccl_conf_keys") or []
    missing = sorted(set(wanted) - {k for k, _ in settings})
    if missing:
        logger.warning(f"{host.name}: the profile expects {', '.join(missing)} in "
                       "/etc/nccl.conf; set them in the site's nccl: section")
    put_template(name="nccl: /etc/nccl.conf", dest="/etc/nccl.conf",
                 src="nccl/nccl.conf.j2", settings=settings)


if is_deploy_file(globals()):
    nccl()
