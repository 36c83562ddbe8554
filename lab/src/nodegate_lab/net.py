"""The lab network: one bridge in its own namespace, one namespace per host, one uplink veth.

Everything is on 10.77.7.0/24, which exists only on these links: nodes get no default route
and no resolver, the root namespace only a connected route on the uplink, and nothing is
NATed or forwarded, so lab traffic cannot leave the lab.
"""

from __future__ import annotations

from pathlib import Path

from nodegate_lab import config
from nodegate_lab.config import Member
from nodegate_lab.proc import ok, run

NETNS_DIR = Path("/run/netns")


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def _has_ns(name: str) -> bool:
    return netns_path(name).exists()


def _link_exists(name: str, ns: str | None = None) -> bool:
    cmd = ["ip", *(["-n", ns] if ns else []), "link", "show", "dev", name]
    return ok(cmd)


def _no_ipv6(ns: str | None, dev: str) -> None:
    """Lab links carry IPv4 only: no link-local chatter, no SLAAC."""
    cmd = ["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"]
    run(["ip", "netns", "exec", ns, *cmd] if ns else cmd, check=False)


def _add_ns(name: str) -> None:
    if not _has_ns(name):
        run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def ensure_bridge() -> None:
    """Bridge namespace, bridge and the root-namespace uplink with the service addresses."""
    _add_ns(config.BRIDGE_NS)
    if not _link_exists(config.BRIDGE, config.BRIDGE_NS):
        run(["ip", "-n", config.BRIDGE_NS, "link", "add", config.BRIDGE, "type", "bridge"])
    _no_ipv6(config.BRIDGE_NS, config.BRIDGE)
    run(["ip", "-n", config.BRIDGE_NS, "link", "set", config.BRIDGE, "up"])
    if not _link_exists(config.UPLINK):
        run(["ip", "link", "add", config.UPLINK, "type", "veth", "peer", "name",
             config.UPLINK_PEER, "netns", config.BRIDGE_NS])
    _no_ipv6(None, config.UPLINK)
    _no_ipv6(config.BRIDGE_NS, config.UPLINK_PEER)
    run(["ip", "-n", config.BRIDGE_NS, "link", "set", config.UPLINK_PEER, "master",
         config.BRIDGE, "up"])
    run(["ip", "link", "set", config.UPLINK, "up"])
    wanted = [f"{config.HOST_ADDRESS}/{config.PREFIX_LEN}", f"{config.PDU_ADDRESS}/32"]
    wanted += [f"{config.node(i).bmc_address}/32" for i in range(1, config.MAX_NODES + 1)]
    have = run(["ip", "-o", "-4", "addr", "show", "dev", config.UPLINK]).stdout
    for cidr in wanted:
        if f" {cidr} " not in have:
            run(["ip", "addr", "add", cidr, "dev", config.UPLINK])


def ensure_host(member: Member) -> Path:
    """The host's namespace with eth0 on the bridge; returns the namespace path for nspawn."""
    _add_ns(member.netns)
    if not _link_exists("eth0", member.netns):
        if _link_exists(member.veth, config.BRIDGE_NS):
            run(["ip", "-n", config.BRIDGE_NS, "link", "del", member.veth])
        run(["ip", "-n", config.BRIDGE_NS, "link", "add", member.veth, "type", "veth", "peer",
             "name", "eth0", "netns", member.netns])
    _no_ipv6(member.netns, "eth0")
    _no_ipv6(config.BRIDGE_NS, member.veth)
    run(["ip", "-n", config.BRIDGE_NS, "link", "set", member.veth, "master", config.BRIDGE,
         "up"])
    cidr = f"{member.address}/{config.PREFIX_LEN}"
    have = run(["ip", "-n", member.netns, "-o", "-4", "addr", "show", "dev", "eth0"]).stdout
    if f" {cidr} " not in have:
        run(["ip", "-n", member.netns, "addr", "add", cidr, "dev", "eth0"])
    run(["ip", "-n", member.netns, "link", "set", "eth0", "up"])
    return netns_path(member.netns)


def limit_rate(member: Member, mbit: int | None) -> None:
    """A slow NIC on ``member``: its link shaped to ``mbit`` Mbit/s each way, a token bucket
    (``tc qdisc ... tbf``) on both ends of its veth: the bridge's end shapes what the host
    receives, its ``eth0`` what it sends. ``None`` takes both off. The one fault of the
    network that the lab's shared bridge can show: one host's link slower than the others'
    (what a NIC trained down or a bad cable does to the pairs that host is in)."""
    if mbit is not None and mbit <= 0:
        raise ValueError(f"{member.name}: link rate {mbit} Mbit/s: must be positive")
    for ns, dev in [(config.BRIDGE_NS, member.veth), (member.netns, "eth0")]:
        if mbit is None:
            run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                check=False)  # none there: nothing to take off
        else:
            # burst (kB): 10 ms at the rate, above one timer tick (rate / HZ); queue <= 100 ms
            burst = max(32, mbit * 1000 // 8 // 100)
            run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                 "rate", f"{mbit}mbit", "burst", f"{burst}kb", "latency", "100ms"])


def lab_namespaces() -> list[str]:
    """Every namespace the lab owns (by prefix), for status and teardown."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(config.NS_PREFIX))


def teardown() -> None:
    """Delete the uplink (its peer goes with it) and every lab namespace (their veths too)."""
    if _link_exists(config.UPLINK):
        run(["ip", "link", "del", config.UPLINK])
    for ns in lab_namespaces():
        run(["ip", "netns", "del", ns])
