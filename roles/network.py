"""network: the RDMA userspace, GPUDirect RDMA's kernel side, and the rails' RoCE settings.

- Packages: rdma-core, the verbs utilities, infiniband-diags and perftest from the
  distribution, or NVIDIA's DOCA-OFED / MLNX_OFED from a site mirror (``network_stack``).
- GPUDirect RDMA in the profile's mode (``host.gpudirect.mode``, as nvidia_driver reads it):
  ``peermem`` needs nvidia-peermem loaded (its boot entry is nvidia_driver's; it is loaded here
  too because an OFED install replaces ib_core, and peermem must load against the stack in
  use); ``dmabuf`` loads nothing (the open kernel modules and kernel >= 5.12 provide it).
- RoCE (profile ``network.rails.link_layer: Ethernet``): the rails' netdevs at the profile's
  MTU; where the site declares them, the RoCE type of service (DSCP) for rdma_cm, PFC on one
  priority with DSCP trust, and ECN on it. One script applies them, at every boot through a
  oneshot unit and now when the node's MTU or ToS differs (or the script changed).
- NVLink 5 boards (HGX B200/B300): the ConnectX bridge's NVSwitch management functions
  (VPD ``SMDL=SW_MNG``, read by ``facts.rdma.RdmaRails``; sources in ``probes.rail_map``) are
  RDMA devices too, Fabric Manager's and NVLSM's; they are never rails, so no RoCE setting
  touches them, as ``NCCL_IB_HCA`` (the nccl role) never names them.
- NCCL's IB settings: NCCL reads one file, /etc/nccl.conf, which the nccl role renders; this
  role hands its values (``NCCL_IB_TC`` from the DSCP) to that role through host data, so two
  roles never rewrite one file. It runs before nccl in deploy.py.
"""

from __future__ import annotations

import re
from fnmatch import fnmatch
from typing import Any

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.facts.server import KernelVersion
from pyinfra.operations import files, server, systemd

from nodegate.facts.rdma import RdmaRails
from nodegate.facts.roce import RdmaPortInfo, RocePorts
from nodegate.profiles.gpudirect import MODES as GPUDIRECT_MODES
from nodegate.profiles.gpudirect import gpudirect
from roles.defaults import role_defaults
from roles.ops.common import (
    TargetOS,
    cmd,
    container,
    is_deploy_file,
    knob,
    profile,
    target_os,
    template,
)
from roles.ops.files import put_template, put_text
from roles.ops.packages import ensure_packages
from roles.ops.repos import fetch_keyring
from roles.ops.server import module_loaded, run_when

SCRIPT = "/usr/local/sbin/nodegate-roce"
UNIT = "/etc/systemd/system/nodegate-roce.service"
STACKS = ("distro", "doca-ofed", "mlnx-ofed")
#: The distribution's RDMA userspace, per OS family (RHEL names the verbs tools differently).
DISTRO_PACKAGES = {"debian": ["rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"],
                   "rhel": ["rdma-core", "libibverbs-utils", "infiniband-diags", "perftest"]}
#: NVIDIA's meta packages: DOCA-Host's "doca-ofed" profile, MLNX_OFED's full install. perftest
#: is named too: the battery's load checks run ib_write_bw.
OFED_PACKAGES = {"doca-ofed": ["doca-ofed", "perftest"],
                 "mlnx-ofed": ["mlnx-ofed-all", "perftest"]}
_NAME = re.compile(r"^[A-Za-z0-9_.@-]+$")
#: Linux gained DMA-BUF import for RDMA memory registration (ib_umem_dmabuf) in 5.12.
DMABUF_MIN_KERNEL = (5, 12)


def rails_spec() -> dict[str, Any]:
    rails = (profile().get("network") or {}).get("rails")
    return dict(rails) if isinstance(rails, dict) else {}


def nvswitch_management() -> list[str]:
    """The node's NVSwitch management functions (VPD ``SMDL=SW_MNG``): NVLink 5 boards only."""
    hcas = (host.get_fact(RdmaRails) or {}).get("hcas") or {}
    return sorted(name for name, h in hcas.items() if h.get("sw_mng"))


def rail_ports(ports: list[RdmaPortInfo], globs: list[str],
               managing: list[str] | None = None) -> list[RdmaPortInfo]:
    """The RoCE rail ports: Ethernet link layer, a netdev, an HCA the profile names, not an
    NVSwitch management function (``managing``)."""
    out = [p for p in ports if p["link_layer"] == "Ethernet" and p["netdev"]
           and p["device"] not in (managing or [])
           and (not globs or any(fnmatch(p["device"], g) for g in globs))]
    for p in out:
        if not _NAME.match(p["device"]) or not _NAME.match(str(p["netdev"])):
            raise DeployError(f"{host.name}: RDMA port {p['device']!r}/{p['netdev']!r} has a "
                              "name nodegate will not put in a shell script")
    return out


def roce_tos(dscp: Any) -> int | None:
    """The IP ToS byte of a DSCP (DSCP << 2, ECN bits 0): rdma_cm's default_roce_tos and
    NCCL_IB_TC take this value (NVIDIA: DSCP 26 -> traffic class 104)."""
    if dscp is None:
        return None
    if not isinstance(dscp, int) or isinstance(dscp, bool) or not 0 <= dscp <= 63:
        raise DeployError(f"{host.name}: network_dscp {dscp!r} is not a DSCP (0-63)")
    return dscp << 2


def pfc_map(priority: Any) -> str | None:
    """dcb's prio-pfc argument with PFC on one priority (0-7) only."""
    if priority is None:
        return None
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 7:
        raise DeployError(f"{host.name}: network_pfc_priority {priority!r} is not a priority "
                          "(0-7)")
    return " ".join(f"{p}:{'on' if p == priority else 'off'}" for p in range(8))


@deploy("nodegate network: RDMA stack, GPUDirect RDMA, RoCE settings",
        data_defaults=role_defaults("network"))
def network() -> None:
    spec = rails_spec()
    enabled = knob("network_enabled")
    if enabled is None:
        enabled = bool(spec) or bool((profile().get("host") or {}).get("infiniband"))
    if not enabled:
        host.noop("no RDMA rails in this profile (network.rails) and network_enabled unset")
        return
    os_ = target_os()
    stack = str(knob("network_stack", site="network.stack") or "distro")
    if stack not in STACKS:
        raise DeployError(f"{host.name}: network_stack must be one of {', '.join(STACKS)}, "
                          f"not {stack!r}")
    roce = _roce_settings(spec)  # every value checked before anything is planned
    _stack(os_, stack)
    _gpudirect()
    _roce(roce)
    _nccl_handoff()


def _stack(os_: TargetOS, stack: str) -> None:
    packages = knob("network_packages")
    if stack == "distro":
        wanted = list(packages or DISTRO_PACKAGES[os_.family])
        ensure_packages("network", wanted)
        return
    url = knob("network_ofed_mirror_url", site="network.ofed_mirror_url")
    if not url:
        raise DeployError(f"{host.name}: network_stack={stack} needs network_ofed_mirror_url "
                          "(the site's NVIDIA DOCA/MLNX_OFED repository mirror)")
    text = str(url)
    if any(c in text for c in " \n\"'\\"):
        raise DeployError(f"{host.name}: network_ofed_mirror_url {text!r} is not a plain URL")
    keyring_url = knob("network_ofed_keyring_url", site="network.ofed_keyring_url")
    label = "DOCA-OFED" if stack == "doca-ofed" else "MLNX_OFED"
    if os_.is_debian:
        keyring = "/usr/share/keyrings/nodegate-ofed.gpg"
        if keyring_url:
            fetch_keyring(name="network: OFED mirror keyring", url=keyring_url,
                          dest=keyring)
        opts = f"signed-by={keyring}" if keyring_url else "trusted=yes"
        put_text(name=f"network: {label} mirror apt source",
                 dest="/etc/apt/sources.list.d/nodegate-ofed.list",
                 text=f"# Managed by nodegate (roles/network.py)\ndeb [{opts}] {text} ./\n")
    else:
        gpg = f"gpgcheck=1\ngpgkey={keyring_url}\n" if keyring_url else "gpgcheck=0\n"
        put_text(name=f"network: {label} mirror dnf repository",
                 dest="/etc/yum.repos.d/nodegate-ofed.repo",
                 text=f"# Managed by nodegate (roles/network.py)\n[nodegate-ofed]\n"
                      f"name={label} (nodegate mirror)\nbaseurl={text}\nenabled=1\n{gpg}")
    wanted = list(packages or OFED_PACKAGES[stack])
    ensure_packages("network", wanted, name=f"network: {label} {', '.join(wanted)}")


def _gpudirect() -> None:
    mode = knob("network_gpudirect") or gpudirect(profile()).mode
    if mode not in GPUDIRECT_MODES:
        raise DeployError(f"{host.name}: network_gpudirect must be one of "
                          f"{', '.join(GPUDIRECT_MODES)}, not {mode!r}")
    if mode == "none":
        host.noop("GPUDirect RDMA: none declared")
        return
    if mode == "dmabuf":
        kernel = str(host.get_fact(KernelVersion) or "")
        release = kernel.split("-", maxsplit=1)[0]
        numbers = tuple(int(x) for x in release.split(".")[:2] if x.isdigit())
        if len(numbers) == 2 and numbers < DMABUF_MIN_KERNEL:
            raise DeployError(f"{host.name}: GPUDirect RDMA by DMA-BUF needs Linux >= 5.12, "
                              f"the node runs {kernel}; declare host.gpudirect.mode: peermem")
        host.noop("GPUDirect RDMA by DMA-BUF: nothing to load (open kernel modules)")
        return
    virt = container()
    if virt:
        host.noop(f"running in a {virt} container: nvidia-peermem belongs to the host's kernel")
        return
    if not module_loaded("nvidia"):
        host.noop("nvidia-peermem loads with the nvidia driver (nvidia_driver's boot entry): "
                  "the nvidia module is not loaded now")
        return
    server.modprobe(name="network: nvidia-peermem loaded (GPUDirect RDMA)",
                    module="nvidia_peermem")


def _roce_settings(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The RoCE settings asked for, checked; None where the rails are not RoCE."""
    if spec.get("link_layer") != "Ethernet":
        return None
    mtu = knob("network_mtu", "network.rails.mtu")
    if mtu is not None and (not isinstance(mtu, int) or not 1280 <= mtu <= 9216):
        raise DeployError(f"{host.name}: network_mtu {mtu!r} is not an MTU (1280-9216)")
    tos = roce_tos(knob("network_dscp", site="network.dscp"))
    pfc = pfc_map(knob("network_pfc_priority", site="network.pfc_priority"))
    ecn = bool(knob("network_ecn", site="network.ecn"))
    if ecn and pfc is None:
        raise DeployError(f"{host.name}: network_ecn needs network_pfc_priority (ECN is "
                          "enabled on the lossless priority)")
    globs = list(knob("network_devices", "network.rails.devices") or [])
    managing = nvswitch_management()
    if managing:
        host.noop(f"NVSwitch management functions, not rails: {', '.join(managing)}")
    rails = rail_ports(host.get_fact(RocePorts), globs, managing)
    if not rails:
        raise DeployError(f"{host.name}: the profile declares RoCE rails but the node has no "
                          "RDMA port over Ethernet" + (f" matching {globs}" if globs else "")
                          + " (/sys/class/infiniband); is the HCA driver loaded?")
    priority = knob("network_pfc_priority", site="network.pfc_priority")
    return {"rails": rails, "mtu": mtu, "tos": tos, "pfc": pfc,
            "ecn": [priority] if ecn else []}


def _roce(settings: dict[str, Any] | None) -> None:
    if settings is None:
        host.noop("no RoCE rails (profile network.rails.link_layer is not Ethernet)")
        return
    rails, mtu, tos = settings["rails"], settings["mtu"], settings["tos"]
    files.directory(name="network: /usr/local/sbin", path="/usr/local/sbin")
    script = put_template(
        name="network: RoCE settings script", dest=SCRIPT, src="network/nodegate-roce.sh.j2",
        mode="755", **settings)
    unit = files.put(name="network: RoCE settings unit",
                     src=template("network", "nodegate-roce.service"), dest=UNIT, mode="644")
    systemd.daemon_reload(name="network: systemd reload (RoCE unit)", _if=unit.did_change)
    systemd.service(name="network: RoCE settings at boot", service="nodegate-roce.service",
                    running=None, enabled=True)
    drift = [f"{p['netdev']} mtu {p['mtu']}" for p in rails if mtu and p["mtu"] != mtu]
    drift += [f"{p['device']}/{p['port']} tos {p['tos']}" for p in rails
              if tos is not None and p["tos"] != tos]
    if drift:
        run_when(name=f"network: apply RoCE settings ({', '.join(drift)})",
                 command=cmd(SCRIPT))
    else:
        host.noop(f"RoCE settings in place on {', '.join(str(p['netdev']) for p in rails)}")
        run_when(name="network: apply RoCE settings after a script change",
                 command=cmd(SCRIPT), _if=script.did_change)


def nccl_ib_settings() -> dict[str, str]:
    """The NCCL keys this role decides: NCCL_IB_TC from the site's DSCP (RoCE)."""
    tos = roce_tos(knob("network_dscp", site="network.dscp"))
    return {"NCCL_IB_TC": str(tos)} if tos is not None else {}


def _nccl_handoff() -> None:
    """Give the nccl role the IB values it renders into /etc/nccl.conf (an operator's own
    ``nccl_*`` value wins)."""
    settings = nccl_ib_settings()
    if not knob("network_nccl_ib"):
        return
    for key, value in settings.items():
        name = key.lower()
        if host.data.get(name) is None:
            setattr(host.data, name, value)
    if settings:
        host.noop(f"NCCL IB settings for /etc/nccl.conf: "
                  f"{', '.join(f'{k}={v}' for k, v in settings.items())}")


if is_deploy_file(globals()):
    network()
