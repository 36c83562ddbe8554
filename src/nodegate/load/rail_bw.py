"""Which ports ``ib_write_bw`` runs on and how: the profile's rail HCAs as sysfs shows them,
each ACTIVE port with a TCP port of its own, loopback on the node (``nodegate netload``) or
against a known-good peer (``nodegate multinode``). No torch here."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodegate.probes.perftest import DEFAULT_TCP_PORT, BwSpec

#: AzNHC's check_ib_bw_gdr message size (customTests/azure_ib_write_bw_gdr.nhc: 8388608)
DEFAULT_BYTES = 8 << 20
DEFAULT_SECONDS = 5
#: Seconds a side needs besides its run (QP exchange, CUDA set-up, teardown).
SLACK_S = 20.0


@dataclass(frozen=True)
class RailPort:
    device: str
    port: int
    state: str | None  # "ACTIVE" when it can carry traffic

    @property
    def entity(self) -> str:
        return f"{self.device}.port{self.port}"


def sizing(profile: Mapping[str, Any]) -> tuple[int, int]:
    load = dict(profile.get("load") or {})
    return (int(load.get("rail_bw_bytes") or DEFAULT_BYTES),
            int(load.get("rail_bw_seconds") or DEFAULT_SECONDS))


def rail_ports(profile: Mapping[str, Any], root: Path | None = None) -> tuple[list[RailPort],
                                                                            str | None]:
    """(rail ports, why there are none): the profile's ``network.rails.devices`` as sysfs
    shows them; a problem reading sysfs is returned, not raised."""
    from nodegate.probes.rdma import read_rdma

    spec = dict((profile.get("network") or {}).get("rails") or {})
    if not spec:
        return [], "the profile declares no RDMA rails (network.rails)"
    snapshot = read_rdma(root)
    if snapshot.problem is not None:
        return [], snapshot.problem
    globs = spec.get("devices") or ["*"]  # as judge.network.select_rails reads them
    ports = [RailPort(d.name, p.port, p.state) for d in snapshot.devices
             if any(fnmatch.fnmatchcase(d.name, g) for g in globs) for p in d.ports]
    return ports, None if ports else "no rail HCA port found in sysfs"


def spec_for(rail: RailPort, index: int, *, size: int, seconds: int, server: str | None = None,
             cuda_index: int | None = None, base_port: int = DEFAULT_TCP_PORT) -> BwSpec:
    """``index`` keeps each run's TCP port apart (runs that overlap must not share one)."""
    return BwSpec(device=rail.device, port=rail.port, size=size, duration_s=seconds,
                  tcp_port=base_port + index, cuda_index=cuda_index, server=server)


def wanted_with_peer(profile: Mapping[str, Any]) -> bool:
    """Per-rail ib_write_bw in the multi-node check: where the profile declares rails, unless
    ``load.multinode_rail_bw`` is false (the lab: its containers have no RDMA device)."""
    load = dict(profile.get("load") or {})
    rails = (profile.get("network") or {}).get("rails")
    return bool(rails) and load.get("multinode_rail_bw", True) is not False


def with_peer(role: str, profile: Mapping[str, Any], *, peer_host: str, members: int,
              index: int, wait_s: float) -> dict[str, Any]:
    """Per-rail ib_write_bw between the known-good node (``role`` "host": a server for each
    member and rail in turn) and member ``index`` (a client per rail, dialling
    ``peer_host``). Every run is bounded; a peer that never answers is an error for that
    pair. Returns rail entity -> BwOutcome (host side: ``member<i>/<entity>``)."""
    from nodegate.probes import perftest

    ports, why = rail_ports(profile)
    if not ports:
        return {"node": perftest.BwOutcome(False, None, why, "", 0.0)}
    perftest.require_tool()
    size, seconds = sizing(profile)
    per_run = seconds + SLACK_S
    active = [p for p in ports if p.state == "ACTIVE"]
    out: dict[str, Any] = {}
    for rail in ports:
        if rail not in active:
            out[rail.entity] = perftest.BwOutcome(False, None, f"port state {rail.state}, not "
                                                  "ACTIVE (see ib_port_state)", "", 0.0)
    if role == "host":
        for member in range(members):
            absent = None  # a member that never came is not waited for rail after rail
            for r, rail in enumerate(active):
                key = f"member{member}/{rail.entity}"
                if absent is not None:
                    out[key] = perftest.BwOutcome(False, None, absent, "", 0.0)
                    continue
                spec = spec_for(rail, member * len(active) + r, size=size, seconds=seconds)
                out[key] = perftest.run_server(spec, wait_s + per_run)
                if (out[key].error or "").startswith("no client came"):
                    absent = f"member {member} never came ({out[key].error})"
        return out
    for r, rail in enumerate(active):
        turn = index * len(active) + r + 1  # runs before this one finish first on the peer
        spec = spec_for(rail, turn - 1, size=size, seconds=seconds, server=peer_host)
        out[rail.entity] = perftest.run_client(spec, wait_s + turn * per_run)
    return out


def peer_phase_s(profile: Mapping[str, Any], members: int) -> float:
    """How long the per-rail phase may hold the group before its collectives start."""
    if not wanted_with_peer(profile):
        return 0.0
    count = int(((profile.get("network") or {}).get("rails") or {}).get("count") or 0)
    return members * count * (sizing(profile)[1] + SLACK_S)
