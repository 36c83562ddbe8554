"""Two Soft-RoCE VMs: real RDMA devices (``rdma_rxe``) between two Debian 12 kernels.

The lab's containers have no RDMA device and this machine has no HCA. Debian's own kernel
has ``rdma_rxe`` (Soft-RoCE: RoCE v2 in software over any Ethernet netdev), so two VMs of
the md VM's image (``nodegate_lab.mdvm``: same cached root tarball, same boot path) each get
a second virtio NIC on a tap; both taps sit on a bridge inside this lab instance's network
namespace (``ngl<N>-rxe``), so the RDMA traffic between the VMs never touches the host's
network. In each guest ``rdma link add rxe0 type rxe netdev eth1`` makes ``rxe0``: a real
``/sys/class/infiniband`` tree, real ``ibv_devinfo``, real ``ib_write_bw`` between the VMs,
real counters (rxe's ``hw_counters``; it has no PMA, so no ``ports/1/counters``).

The guests' only apt source is a flat repository of real Debian packages baked into their root
(``repo_dir``, like the lab nodes' mirror): the network role's packages and their dependencies,
downloaded once here. The role still runs a real ``apt-get update`` and ``apt-get install``;
with all of bookworm's index to parse under TCG its first deploy took 74 s, with this
repository 45 s (docs/network.md).

The virtio NIC reports 100 Gb/s full duplex (qemu's ``speed``/``duplex``), so rxe's port
rate is ``100 Gb/sec (4X EDR)`` as ib_core derives it from the netdev's ethtool speed. It is
a label, not a capacity: the measured bandwidth is what the emulated path gives.

    python -m nodegate_lab.rxevm up      # build (cached, shared with mdvm), boot both
    python -m nodegate_lab.rxevm down
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.errors import CannotRunError
from nodegate.paths import cache_dir
from nodegate_lab import base, config, mdvm, mirror
from nodegate_lab.proc import need, run

NAMES = ("rxe-a", "rxe-b")
NETNS = f"{config.NS_PREFIX}rxe"
BRIDGE = "rxebr"  # inside NETNS only
RDMA_SUBNET = f"10.78.{config.INSTANCE}"
RDMA_NETDEV = "eth1"  # the second virtio NIC (net.ifnames=0 in the guest)
RXE_DEVICE = "rxe0"
LINK_SPEED_MBPS = 100000
BRIDGE_MTU = 9216  # the largest MTU a profile may ask of a rail (profiles/schema.py)
PROFILE = "softroce-vm"
#: What the guests' repository holds (with dependencies): the network role's Debian packages
#: (roles/network.py DISTRO_PACKAGES; tests/roles/test_rxevm_repo.py holds the two equal).
REPO_PACKAGES: tuple[str, ...] = ("rdma-core", "ibverbs-utils", "infiniband-diags", "perftest")
REPO_RECIPE = "1"
#: Where the repository sits in each guest's root.
GUEST_REPO = "var/lib/nodegate-repo"


def base_dir() -> Path:
    """NODEGATE_RXEVM_DIR or /var/lib/nodegate-rxevm<N>: one directory per VM below it."""
    return Path(os.environ.get("NODEGATE_RXEVM_DIR",
                               f"/var/lib/nodegate-rxevm{config.INSTANCE}"))


@dataclass(frozen=True)
class Member:
    index: int
    name: str

    @property
    def tap(self) -> str:
        return f"{config.VETH_PREFIX}{self.name}"  # a link this lab instance owns

    @property
    def address(self) -> str:
        return f"{RDMA_SUBNET}.{11 + self.index}"

    @property
    def mac(self) -> str:
        return f"52:54:00:78:{config.INSTANCE:02x}:{11 + self.index:02x}"


MEMBERS = tuple(Member(i, n) for i, n in enumerate(NAMES))


def _nic_args(member: Member) -> list[str]:
    """The RDMA NIC: virtio-net on a tap (opened in the root namespace, moved afterwards)."""
    return ["-netdev", f"tap,id=rdma0,ifname={member.tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=rdma0,mac={member.mac},"
                       f"speed={LINK_SPEED_MBPS},duplex=full"]


def repo_dir() -> Path:
    """The cached repository (keyed by suite, recipe and package list)."""
    text = "\n".join([config.SUITE, REPO_RECIPE, *sorted(REPO_PACKAGES)])
    return cache_dir() / "rxevm" / f"repo-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def build_repo() -> Path:
    """The guests' repository: ``REPO_PACKAGES`` and their dependencies as this machine's apt
    resolves them (``mirror.fetch_debian``), with a ``Packages`` index; built once, one
    builder at a time."""
    target = repo_dir()
    if (target / ".complete").is_file():
        return target
    with base.building(target):
        if (target / ".complete").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix="repo-", dir=target.parent))
        try:
            mirror.fetch_debian(tmp / "debian", REPO_PACKAGES)
            (tmp / "Packages").write_text(mirror.scan(tmp, "debian"))
            os.chmod(tmp, 0o755)
            (tmp / ".complete").write_text("\n".join(REPO_PACKAGES) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def install_repo(repo: Path, root: Path) -> None:
    """Copy the repository into a guest's root and make it the only apt source there."""
    dest = root / GUEST_REPO
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(".complete"))
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "etc/apt/sources.list").write_text(
        f"# the Soft-RoCE VMs' repository (nodegate_lab.rxevm)\n"
        f"deb [trusted=yes] file:/{GUEST_REPO} ./\n")
    sources_d = root / "etc/apt/sources.list.d"
    if sources_d.is_dir():
        for extra in sources_d.iterdir():
            extra.unlink()


def _ns_run(*argv: str, check: bool = True) -> None:
    run(["ip", "-n", NETNS, *argv], check=check)


def _bridge() -> None:
    if not Path(f"/run/netns/{NETNS}").exists():
        run(["ip", "netns", "add", NETNS])
    _ns_run("link", "add", BRIDGE, "type", "bridge", check=False)
    _ns_run("link", "set", BRIDGE, "up")
    _ns_run("link", "set", "lo", "up")


def _attach(member: Member) -> None:
    """Move the tap qemu holds into the namespace and onto the bridge (a tap keeps its file
    descriptor across namespaces)."""
    run(["ip", "link", "set", member.tap, "netns", NETNS])
    _ns_run("link", "set", member.tap, "master", BRIDGE)
    # the bridge drops frames above the egress port's MTU: room for the guests' jumbo frames
    _ns_run("link", "set", member.tap, "mtu", str(BRIDGE_MTU))
    _ns_run("link", "set", member.tap, "up")


def guest_setup(member: Member) -> str:
    """The guest side: eth1 addressed, rdma_rxe loaded, rxe0 over eth1 (the testbed's "HCA"
    is made here; what the role installs and sets comes after)."""
    return (f"ip link set {RDMA_NETDEV} up && "
            f"(ip -4 addr show dev {RDMA_NETDEV} | grep -q {member.address}/ || "
            f"ip addr add {member.address}/24 dev {RDMA_NETDEV}) && modprobe rdma_rxe && "
            f"(test -e /sys/class/infiniband/{RXE_DEVICE} || "
            f"rdma link add {RXE_DEVICE} type rxe netdev {RDMA_NETDEV})")


def up(*, accel: str = "auto", tie_to_parent: bool = False) -> list[mdvm.VM]:
    """Both VMs booted, on the bridge, with rxe0; the site file written."""
    if os.geteuid() != 0:
        raise CannotRunError("the Soft-RoCE VMs need root (mmdebstrap, taps, namespaces)")
    need("ip", "qemu-system-x86_64")
    down()
    tarball = mdvm.build()  # the md VM's image: built once, shared
    repo = build_repo()
    _bridge()
    vms = []
    try:
        for member in MEMBERS:  # both boot side by side: each mostly waits on its own vCPU
            run(["ip", "tuntap", "add", "dev", member.tap, "mode", "tap"])
            vm = mdvm.prepare(base_dir() / member.name, tarball,
                              populate=lambda root: install_repo(repo, root))
            vm.extra_qemu = _nic_args(member)
            vm.save()
            vms.append(vm)
            mdvm.launch(vm, accel=accel, tie_to_parent=tie_to_parent)
        for member, vm in zip(MEMBERS, vms, strict=True):
            mdvm.wait_ready(vm)  # qemu holds its tap by now: it can move
            _attach(member)
        for member, vm in zip(MEMBERS, vms, strict=True):
            mdvm.ssh(vm, f"hostnamectl set-hostname {member.name} 2>/dev/null || "
                         f"hostname {member.name}; {guest_setup(member)}", timeout=120)
        write_site(vms)
    except BaseException:
        for vm in vms:
            mdvm.stop(vm)
        raise
    return vms


def load() -> list[mdvm.VM]:
    found = [mdvm.load(base_dir() / m.name) for m in MEMBERS]
    return [vm for vm in found if vm is not None]


def site_file() -> Path:
    return base_dir() / "site.yaml"


def site_data(vms: list[mdvm.VM]) -> dict[str, Any]:
    """nodegate.site/1: both VMs as GPU-less RoCE nodes of the ``softroce-vm`` profile."""
    return {
        "schema": "nodegate.site/1",
        "name": "rxevm",
        "description": "the Soft-RoCE VMs (python -m nodegate_lab.rxevm); do not edit",
        "defaults": {"ssh_user": "root", "ssh_strict_host_key_checking": "yes",
                     "profile": PROFILE},
        "groups": {"gpu_nodes": list(NAMES)},
        "hosts": {m.name: {"address": "127.0.0.1", "ssh_port": vm.port,
                           "ssh_key": str(vm.key),
                           "ssh_known_hosts_file": str(vm.known_hosts)}
                  for m, vm in zip(MEMBERS, vms, strict=True)},
    }


def write_site(vms: list[mdvm.VM]) -> Path:
    import yaml

    from nodegate.site import load_site

    path = site_file()
    path.write_text("# generated by python -m nodegate_lab.rxevm; removed by its down\n"
                    + yaml.safe_dump(site_data(vms), sort_keys=False))
    load_site(str(path))
    return path


def down() -> bool:
    """Both VMs killed, taps and namespace removed, the directory gone."""
    existed = base_dir().exists()
    for vm in load():
        mdvm.stop(vm)
    for member in MEMBERS:
        run(["ip", "link", "del", member.tap], check=False)
    if Path(f"/run/netns/{NETNS}").exists():
        run(["ip", "netns", "del", NETNS], check=False)
    shutil.rmtree(base_dir(), ignore_errors=True)
    return existed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodegate_lab.rxevm",
                                     description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="boot both VMs with rxe0 (the image is mdvm's, cached)")
    p_up.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    sub.add_parser("status", help="show the VMs")
    sub.add_parser("down", help="kill the VMs, remove taps, namespace and directory")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            vms = up(accel=args.accel)
            for vm in vms:
                print(f"{vm.dir.name}: pid {vm.pid}, {vm.accel}, ssh 127.0.0.1:{vm.port}")
            print(f"site file: {site_file()} (NODEGATE_SITE={site_file()} pyinfra -y "
                  "inventory.py roles/network.py)")
        elif args.command == "down":
            print("rxevm: removed" if down() else "rxevm: nothing to remove")
        else:
            vms = load()
            print(json.dumps([{"vm": vm.dir.name, "running": mdvm.running(vm),
                               "port": vm.port} for vm in vms]))
            return 0 if vms and all(mdvm.running(vm) for vm in vms) else 1
    except CannotRunError as exc:
        print(f"rxevm: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
