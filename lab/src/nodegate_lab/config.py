"""Names, addresses and paths the lab uses, in one place so up, down and status agree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodegate.paths import cache_dir


def _instance() -> int:
    """NODEGATE_LAB_INSTANCE (0-19, default 0): which of several labs on one machine (19
    keeps every link name within 15 characters: ``ngl19v-slurmctl``).

    Instance 0 is the default lab (10.77.7.0/24, links ``ngl0``/``nglbr0``, namespaces
    ``ngl-*``, /var/lib/nodegate-lab, inventory/lab.yaml). Instance N uses 10.77.(7+N).0/24,
    ``nglN*`` names, /var/lib/nodegate-labN and ``lab_dir()/lab.yaml`` as its site file, so a
    test lab can run beside the lab someone is deploying to.
    """
    raw = os.environ.get("NODEGATE_LAB_INSTANCE", "0").strip() or "0"
    if not raw.isdigit() or not 0 <= int(raw) <= 19:
        from nodegate.errors import ConfigError

        raise ConfigError("NODEGATE_LAB_INSTANCE must be 0..19", key="NODEGATE_LAB_INSTANCE")
    return int(raw)


INSTANCE = _instance()
_TAG = str(INSTANCE) if INSTANCE else ""
#: The lab's one private /24; it exists only on the lab's own links.
SUBNET_PREFIX = f"10.77.{7 + INSTANCE}"
PREFIX_LEN = 24
#: Root-namespace end of the uplink veth: where the mirror, PDU and BMCs listen.
HOST_ADDRESS = f"{SUBNET_PREFIX}.1"
CONTROLLER_ADDRESS = f"{SUBNET_PREFIX}.10"
NODE_ADDRESS_BASE = 11  # node1 = .11
BMC_ADDRESS_BASE = 101  # node1's BMC = .101 (an address on the uplink veth)
PDU_ADDRESS = f"{SUBNET_PREFIX}.200"
MIRROR_PORT = 8080
PDU_PORT = 1161
BMC_PORT = 8443
MAX_NODES = 32

#: Network namespace names (``ip netns``) and link names; all start with "ngl".
NS_PREFIX = f"ngl{_TAG}-"
BRIDGE_NS = f"{NS_PREFIX}bridge"
BRIDGE = f"nglbr{INSTANCE}"
UPLINK = f"ngl{INSTANCE}"  # root-namespace end
UPLINK_PEER = f"ngl{INSTANCE}-br"  # bridge-namespace end
VETH_PREFIX = f"ngl{_TAG}v-"  # bridge-side end of each host's veth


def owns_link(name: str) -> bool:
    """True for a link this lab instance makes (and not another instance's)."""
    return name in (UPLINK, UPLINK_PEER, BRIDGE) or name.startswith(VETH_PREFIX)

#: The node packages of the base image (the minbase bootstrap, base.BOOTSTRAP, adds these).
BASE_PACKAGES: tuple[str, ...] = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv",
    "iproute2", "kmod", "udev", "procps", "ca-certificates", "gnupg", "less",
    "iputils-ping", "apt-utils",
)
SUITE = "bookworm"
DEFAULT_SCENARIO = "h100-hgx"
DISKS_PER_NODE = 2  # inventory/profiles/platform/sim-lab.yaml expects two
DISK_SIZE_MIB = 1024  # sparse; mkfs.xfs wants >= 300 MB


def lab_dir() -> Path:
    """Lab state (node roots, keys, logs): NODEGATE_LAB_DIR or /var/lib/nodegate-lab[N]."""
    return Path(os.environ.get("NODEGATE_LAB_DIR", f"/var/lib/nodegate-lab{_TAG}"))


def base_cache_dir() -> Path:
    """Where base tarballs are cached, keyed by their package list."""
    return cache_dir() / "lab"


@dataclass(frozen=True)
class Member:
    """One lab host: a GPU node or the Slurm controller."""

    name: str
    index: int  # 1-based for nodes; 0 for the controller
    kind: str  # "node" | "controller"

    @property
    def address(self) -> str:
        if self.kind == "controller":
            return CONTROLLER_ADDRESS
        return f"{SUBNET_PREFIX}.{NODE_ADDRESS_BASE + self.index - 1}"

    @property
    def bmc_address(self) -> str:
        return f"{SUBNET_PREFIX}.{BMC_ADDRESS_BASE + self.index - 1}"

    @property
    def netns(self) -> str:
        return f"{NS_PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        """Bridge-side veth name (<= 15 chars)."""
        return f"{VETH_PREFIX}{self.name}"[:15]

    @property
    def dir(self) -> Path:
        return lab_dir() / "hosts" / self.name


def node(index: int) -> Member:
    return Member(f"node{index}", index, "node")


CONTROLLER = Member("slurmctl", 0, "controller")
