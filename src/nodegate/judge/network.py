"""Quick-level checks of the RDMA rails: port state, rate, link layer, HCA PCIe link, firmware,
RoCE netdev, where each NIC sits against its GPU (switch, NUMA node), and the port error
counters (judged by growth in ``nodegate.judge.counters``).

The profile's ``network.rails`` says what the node should have. A value sysfs did not give is
ERROR for that rail; SKIP only where the profile declares no rails or no rule.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from nodegate.judge.common import against, make
from nodegate.judge.network_checks import COUNTERS
from nodegate.probes.rail_map import RailMap
from nodegate.probes.rdma import (
    COUNTER_BITS,
    SOFT_COUNTERS,
    RdmaDevice,
    RdmaPort,
    RdmaSnapshot,
)
from nodegate.profiles import Profile
from nodegate.profiles.loader import Threshold
from nodegate.results import CheckResult, Severity, Verdict

HW, CRIT, WARNING = Severity.HARDWARE, Severity.CRITICAL, Severity.WARNING

#: sysfs counter -> the check that judges it (totals here, growth in judge.counters).
COUNTER_CHECKS: dict[str, str] = {counter: check for counter, (check, _, _) in COUNTERS.items()}


def rails_spec(profile: Profile) -> dict[str, Any] | None:
    rails = profile.data.get("network", {}).get("rails")
    return dict(rails) if rails else None


def select_rails(snapshot: RdmaSnapshot, spec: dict[str, Any]) -> list[RdmaDevice]:
    """The HCAs the profile calls rails (``network.rails.devices`` globs, default all)."""
    patterns = spec.get("devices") or ["*"]
    return [d for d in snapshot.devices if any(fnmatch.fnmatchcase(d.name, p) for p in patterns)]


def judge_network(snapshot: RdmaSnapshot, rail_map: RailMap | None, profile: Profile, *,
                  gpu_problem: str | None = None) -> list[CheckResult]:
    """Every network check on the rails of ``snapshot``; ``rail_map`` None when no GPU bus id
    is known (``gpu_problem`` says why)."""
    spec = rails_spec(profile)
    if spec is None:
        return [make("ib_rail_count", "node", Verdict.SKIP,
                     reason="the profile declares no RDMA rails (network.rails)")]
    if snapshot.problem is not None:
        return [make("ib_rail_count", "node", Verdict.ERROR, threshold=spec["count"],
                     unit="rails", severity=CRIT, reason=snapshot.problem,
                     sysfs_root=snapshot.root)]
    rails = rail_map.rails if rail_map is not None else select_rails(snapshot, spec)
    out = [_count(rails, spec, snapshot, rail_map)]
    out += _firmware(rails, spec.get("firmware"))
    soft = bool(spec.get("soft_roce"))
    for dev in rails:
        out.append(_soft_skip("ib_hca_pcie_link", dev.name, dev) if soft and dev.parent
                   else _hca_pcie(dev))
        for port in dev.ports:
            out += _port(dev, port, spec, profile)
    out += _topology(rails, rail_map, spec, gpu_problem)
    return out


def _count(rails: list[RdmaDevice], spec: dict[str, Any], snapshot: RdmaSnapshot,
           rail_map: RailMap | None) -> CheckResult:
    return make("ib_rail_count", "node",
                Verdict.PASS if len(rails) == spec["count"] else Verdict.FAIL,
                measured=len(rails), threshold=spec["count"], unit="rails", severity=HW,
                rails=[d.name for d in rails],
                others=[d.name for d in snapshot.devices if d not in rails] or None,
                source=spec.get("source"),
                rail_map=rail_map.to_json() if rail_map is not None else None)


def _problem(where: dict[str, str], *keys: str) -> str | None:
    found = [f"{k}: {v}" for k, v in where.items() if any(k == x or k.startswith(x)
                                                           for x in keys)]
    return "; ".join(found) or None


def _firmware(rails: list[RdmaDevice], pin: dict[str, Any] | None) -> list[CheckResult]:
    """Pinned: each HCA against the pin. Unpinned: all rails must agree (a split fails the
    node, since nothing says which side is right). An unread version is ERROR, never a vote."""
    out = []
    read = {}
    for dev in rails:
        if dev.fw_ver is None:
            out.append(make("ib_firmware", dev.name, Verdict.ERROR, severity=CRIT,
                            reason=_problem(dev.problems, "fw_ver") or "no fw_ver"))
        else:
            read[dev.name] = dev.fw_ver
    if pin is not None:
        allowed = [str(v) for v in pin["versions"]]
        threshold = {"one_of": allowed, "source": pin["source"]}
        for name, version in read.items():
            ok = version in allowed
            out.append(make("ib_firmware", name, Verdict.PASS if ok else Verdict.FAIL,
                            measured=version, threshold=threshold, severity=CRIT,
                            hint=None if ok else "flash the pinned HCA firmware (mlxfwmanager)"))
        return out
    distinct = sorted(set(read.values()))
    if len(distinct) <= 1:
        return out + [make("ib_firmware", name, Verdict.PASS, measured=version,
                           threshold="same on every rail") for name, version in read.items()]
    return [*out, make("ib_firmware", "node", Verdict.FAIL,
                       measured=f"{len(distinct)} firmware versions", severity=CRIT,
                       threshold="same on every rail (no pin in the profile)", versions=read,
                       hint="flash one version and pin it (network.rails.firmware)")]


def _hca_pcie(dev: RdmaDevice) -> CheckResult:
    """The HCA's link trained at its max speed and width (a NIC does not drop its link at
    idle the way a GPU does); a downtrained x8 or Gen4 link caps a 400 Gb/s port."""
    link = dev.pcie
    values = (link.current_speed_gts, link.current_width, link.max_speed_gts, link.max_width)
    if any(v is None for v in values):
        return make("ib_hca_pcie_link", dev.name, Verdict.ERROR, threshold="current = max",
                    severity=CRIT, reason=_problem(dev.problems, "device") or "not read")
    measured = f"{link.current_speed_gts:g} GT/s x{link.current_width}"
    best = f"{link.max_speed_gts:g} GT/s x{link.max_width}"
    ok = link.current_speed_gts == link.max_speed_gts and link.current_width == link.max_width
    return make("ib_hca_pcie_link", dev.name, Verdict.PASS if ok else Verdict.FAIL,
                measured=measured, threshold=best, severity=HW,
                pcie_path=dev.pci.text() if dev.pci else None,
                hint=None if ok else "reseat the HCA or check its riser/slot")


def _port(dev: RdmaDevice, port: RdmaPort, spec: dict[str, Any],
          profile: Profile) -> list[CheckResult]:
    entity = port.entity
    active = port.state == "ACTIVE" and port.phys_state == "LinkUp"
    out = []
    if port.state is None or port.phys_state is None:
        out.append(make("ib_port_state", entity, Verdict.ERROR, threshold="ACTIVE/LinkUp",
                        severity=CRIT, reason=_problem(port.problems, "ports/")))
    else:
        out.append(make("ib_port_state", entity, Verdict.PASS if active else Verdict.FAIL,
                        measured=f"{port.state}/{port.phys_state}", threshold="ACTIVE/LinkUp",
                        severity=HW, hint=None if active else
                        "check the cable, the transceiver and the switch port (and the subnet "
                        "manager for an IB port stuck in INIT)"))
    if port.rate_gbps is None:
        out.append(make("ib_port_rate", entity, Verdict.ERROR, threshold=spec["rate_gbps"],
                        unit="Gb/s", severity=CRIT,
                        reason=_problem(port.problems, f"ports/{port.port}/rate")))
    else:
        ok = active and port.rate_gbps == spec["rate_gbps"]
        out.append(make("ib_port_rate", entity, Verdict.PASS if ok else Verdict.FAIL,
                        measured=port.rate_gbps, threshold=spec["rate_gbps"], unit="Gb/s",
                        severity=HW, rate=port.rate_text,
                        reason=None if active else "the port is not ACTIVE: the rate sysfs "
                        "shows is not a trained link's"))
    if port.link_layer is None:
        out.append(make("ib_link_layer", entity, Verdict.ERROR, threshold=spec["link_layer"],
                        severity=CRIT,
                        reason=_problem(port.problems, f"ports/{port.port}/link_layer")))
    else:
        ok = port.link_layer == spec["link_layer"]
        out.append(make("ib_link_layer", entity, Verdict.PASS if ok else Verdict.FAIL,
                        measured=port.link_layer, threshold=spec["link_layer"], severity=CRIT,
                        hint=None if ok else "set the port's link type (mlxconfig LINK_TYPE_P1)",
                        gids=[f"{g.index}:{g.type}" for g in port.gids if g.type] or None))
    if spec.get("mtu") is not None:
        out.append(_netdev(dev, port, spec["mtu"]))
    soft = bool(spec.get("soft_roce")) and dev.parent is not None
    out += [_soft_skip(check, entity, dev, counter=counter)
            if soft and counter not in port.counters and counter not in SOFT_COUNTERS
            else _counter(port, counter, check, profile.threshold(total))
            for counter, (check, total, _) in COUNTERS.items()]
    return out


def _soft_skip(check: str, entity: str, dev: RdmaDevice, **evidence: Any) -> CheckResult:
    """What a software RDMA device (rdma_rxe) has no hardware for: no PCIe function, no PMA
    PortCounters. SKIP only because the profile says its rails are Soft-RoCE."""
    return make(check, entity, Verdict.SKIP, reason=f"{dev.name} is a software RDMA device over "
                f"{dev.parent} (profile network.rails.soft_roce): no PCIe function or PMA "
                "counters to read", **evidence)


def _netdev(dev: RdmaDevice, port: RdmaPort, mtu: int) -> CheckResult:
    """RoCE runs over the port's Ethernet interface: it must be up, at the profile's MTU."""
    threshold = f"up, mtu {mtu}"
    problem = _problem(dev.problems, "device/net", "device")
    if not dev.netdevs or any(n.mtu is None or n.operstate is None for n in dev.netdevs):
        return make("ib_netdev", port.entity, Verdict.ERROR, threshold=threshold, severity=CRIT,
                    reason=problem or "the HCA has no network interface in device/net")
    bad = [n for n in dev.netdevs if n.operstate != "up" or n.mtu != mtu]
    measured = ", ".join(f"{n.name} {n.operstate} mtu {n.mtu}" for n in dev.netdevs)
    return make("ib_netdev", port.entity, Verdict.FAIL if bad else Verdict.PASS,
                measured=measured, threshold=threshold, severity=CRIT,
                hint="set the MTU on the interface and on the switch port" if bad else None)


def _counter(port: RdmaPort, counter: str, check: str,
             threshold: Threshold | None) -> CheckResult:
    """The total since the counter was last cleared; ``judge.counters`` turns it into growth
    since the previous report when there is one. A saturated counter hides its growth."""
    value = port.counters.get(counter)
    if value is None:
        return make(check, port.entity, Verdict.ERROR, severity=CRIT, counter=counter,
                    reason=_problem(port.problems, f"ports/{port.port}/counters/{counter}"))
    ceiling = (1 << COUNTER_BITS[counter]) - 1
    if value >= ceiling:
        return make(check, port.entity, Verdict.ERROR, measured=value, severity=WARNING,
                    counter=counter, reason=f"{counter} is at its ceiling ({ceiling}, a "
                    f"{COUNTER_BITS[counter]}-bit counter that saturates): growth cannot be "
                    "seen", hint="clear the port counters (perfquery -R) or reboot, then judge "
                    "again")
    return against(check, port.entity, value, threshold, fail=Verdict.WARN, severity=WARNING,
                   counter=counter)


def _topology(rails: list[RdmaDevice], rail_map: RailMap | None, spec: dict[str, Any],
              gpu_problem: str | None) -> list[CheckResult]:
    pairing, numa_rule = spec["pairing"], spec.get("numa", "same-as-gpu")
    per_gpu = spec.get("nics_per_gpu", 1)
    if pairing == "any" and numa_rule == "any":
        return []  # the profile asks for no GPU-NIC relation: none is judged, none is needed
    if rail_map is None:
        return [make("ib_topology", "node", Verdict.ERROR, severity=CRIT,
                     threshold=f"{per_gpu} NIC(s) per GPU, {pairing}",
                     reason=gpu_problem or "no GPU bus ids")]
    out = []
    threshold = f"{per_gpu} NIC(s) {pairing}"
    for gpu in rail_map.gpus:
        if pairing == "any":
            continue
        if gpu.pci is None:
            out.append(make("ib_topology", gpu.entity, Verdict.ERROR, threshold=threshold,
                            severity=CRIT, reason=gpu.problem, bus_id=gpu.bdf))
            continue
        ok = len(gpu.nics) == per_gpu
        out.append(make("ib_topology", gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                        measured=gpu.nics, threshold=threshold, severity=HW,
                        pcie_path=gpu.pci.text(), numa_node=gpu.numa_node,
                        hint=None if ok else "a rail HCA is missing or in a slot that is not "
                        "behind this GPU's PCIe switch"))
    for dev in rails:
        gpus = rail_map.gpus_of(dev.name)
        if pairing != "any":
            if dev.pci is None:
                out.append(make("ib_topology", dev.name, Verdict.ERROR, threshold=threshold,
                                severity=CRIT, reason=dev.problems.get("device")))
            else:
                out.append(make("ib_topology", dev.name,
                                Verdict.PASS if gpus else Verdict.FAIL,
                                measured=[g.entity for g in gpus] or "no GPU on its switch",
                                threshold="behind a GPU's PCIe switch", severity=HW,
                                pcie_path=dev.pci.text()))
        if numa_rule != "any":
            out.append(_numa(dev, gpus))
    return out


def _numa(dev: RdmaDevice, gpus: list[Any]) -> CheckResult:
    """A rail on another socket than its GPU sends every RDMA byte over the CPU interconnect;
    -1 means the firmware gave the kernel no node, so NCCL cannot place it either."""
    wanted = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    threshold = f"NUMA node of {', '.join(g.entity for g in gpus)}" if gpus else "a NUMA node"
    if dev.numa_node is None:
        return make("ib_rail_numa", dev.name, Verdict.ERROR, threshold=threshold,
                    severity=CRIT, reason=_problem(dev.problems, "device"))
    if dev.numa_node < 0:
        return make("ib_rail_numa", dev.name, Verdict.FAIL, measured=dev.numa_node,
                    threshold=threshold, severity=CRIT,
                    hint="the firmware reports no NUMA node for the HCA (BIOS/ACPI _PXM)")
    if not gpus:
        return make("ib_rail_numa", dev.name, Verdict.PASS, measured=dev.numa_node,
                    threshold=threshold, note="no GPU shares its switch (see ib_topology)")
    ok = wanted == [dev.numa_node]
    return make("ib_rail_numa", dev.name, Verdict.PASS if ok else Verdict.FAIL,
                measured=dev.numa_node, threshold=wanted[0] if len(wanted) == 1 else wanted,
                severity=HW, gpus=[g.entity for g in gpus],
                hint=None if ok else "the HCA and its GPU report different NUMA nodes")
