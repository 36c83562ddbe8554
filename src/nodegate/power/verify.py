"""``nodegate power verify``: the power wiring the site declares is the wiring there is.

Why: a wrong BMC address in the site file was accepted; the deploy exited 0 and the
power checks said WARN "BMC unreachable" on every run, forever. The pdu_monitor role runs this
on the node at bring-up (and whenever the wiring changes): each configured BMC must answer
and manage this host (a Redfish ``Systems`` member whose ``HostName`` is the host's name or
whose ``SerialNumber`` is the site's ``serial``), each PDU must answer and serve the outlets
the site names. A BMC that names no host at all (no HostName, no serial to compare) cannot
be told apart and is reported, not failed: there is nothing to contradict the site.
Exit 0: wired as declared; 1: a device names another host or lacks an outlet; 3: a device
did not answer (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Beside node.json: the BMC addresses this command saw answer and name this host
#: (nodegate.battery.power.judge_static reads it).
VERIFIED_FILE = "power-verified.json"


@dataclass(frozen=True)
class Finding:
    """One device's verdict: ``ok`` (wired as declared), ``unknown`` (answers, names no
    host), ``wrong`` (names another host, lacks an outlet) or ``down`` (no answer)."""

    device: str
    state: str
    message: str


def short(name: str) -> str:
    """A host name without its domain, lower case: how BMCs and sites both spell it."""
    return name.strip().lower().split(".")[0]


def judge_bmc(device: str, systems: list[dict[str, str]], hosts: list[str],
              serial: str | None = None) -> Finding:
    """Does one of the BMC's Systems name one of ``hosts`` (the host's names: its inventory
    name, its own hostname) or carry ``serial``? Pure."""
    host = hosts[0]
    if serial and any(s.get("SerialNumber", "").strip().lower() == serial.strip().lower()
                      for s in systems):
        return Finding(device, "ok", f"{device}: manages {host} (serial {serial})")
    names = [s["HostName"] for s in systems if s.get("HostName")]
    if any(short(n) == short(h) for n in names for h in hosts):
        return Finding(device, "ok", f"{device}: manages {host} (HostName)")
    serials = [s["SerialNumber"] for s in systems if s.get("SerialNumber")]
    if names or (serial and serials):
        said = ", ".join([*(f"HostName {n}" for n in names),
                          *(f"serial {x}" for x in serials if serial)])
        return Finding(device, "wrong", f"{device}: manages {said}, not {host}"
                       f"{f' (serial {serial})' if serial else ''}: the site's BMC address is "
                       "another host's")
    return Finding(device, "unknown", f"{device}: answers, but names no host (no HostName"
                   f"{'' if serial else '; set bmc.serial in the site to compare'}): "
                   "wiring not confirmed")


def judge_pdu(device: str, up: bool, error: str | None, entities: set[str],
              outlets: list[int]) -> Finding:
    """Does the PDU answer and serve the site's outlets (when it reports outlets at all)?"""
    if not up:
        return Finding(device, "down", f"{device}: no answer: {error or 'unreachable'}")
    listed = {e for e in entities if e.startswith("outlet")}
    missing = [n for n in outlets if f"outlet{n}" not in listed]
    if listed and missing:
        return Finding(device, "wrong", f"{device}: has no outlet "
                       f"{', '.join(map(str, missing))} (it reports {len(listed)} outlets)")
    return Finding(device, "ok", f"{device}: answers; outlets {outlets or 'none named'}")


def exit_code(findings: list[Finding]) -> int:
    if any(f.state == "down" for f in findings):
        return 3
    return 1 if any(f.state == "wrong" for f in findings) else 0


def site_outlets(node_file: Path | None) -> dict[str, list[int]]:
    """PDU name -> the outlet numbers node.json says feed this host."""
    import json

    from nodegate.fileio import read_text

    if node_file is None or not node_file.is_file():
        return {}
    wiring = json.loads(read_text(node_file, kind="config"))
    outlets: dict[str, list[int]] = {}
    for name in wiring.get("outlets") or []:
        pdu, _, outlet = str(name).rpartition(".outlet")
        if outlet.isdigit():
            outlets.setdefault(pdu, []).append(int(outlet))
    return outlets


def run_verify(args: argparse.Namespace) -> int:
    """Read every device of the poller config once; print one line per device."""
    import sys

    from nodegate.power.bmc import BmcError, bmc_systems
    from nodegate.power.pdu import read_pdu
    from nodegate.power.poller import load_config

    cfg = load_config(Path(args.config))
    outlets = site_outlets(Path(args.node_file) if args.node_file else None)
    findings: list[Finding] = []
    answered: list[str] = []
    for name, target in cfg.bmcs:
        try:
            finding = judge_bmc(name, bmc_systems(target), args.host, args.serial)
        except BmcError as exc:
            finding = Finding(name, "down", f"{name}: no answer: {exc}")
        findings.append(finding)
        if finding.state in ("ok", "unknown"):
            answered.append(target.display)

    async def read_all() -> list[Any]:
        return list(await asyncio.gather(*(read_pdu(n, t, m) for n, t, m in cfg.pdus)))

    for dev in asyncio.run(read_all()) if cfg.pdus else []:
        findings.append(judge_pdu(dev.name, dev.up, dev.error,
                                  {r.entity for r in dev.readings}, outlets.get(dev.name, [])))
    for finding in findings:
        stream = sys.stdout if finding.state in ("ok", "unknown") else sys.stderr
        label = {"ok": "OK", "unknown": "WARN", "wrong": "FAIL", "down": "ERROR"}[finding.state]
        print(f"{label} {finding.message}", file=stream)
    code = exit_code(findings)
    if code == 0 and args.node_file:
        record_verified(Path(args.node_file), answered)
    return code


def record_verified(node_file: Path, bmcs: list[str]) -> None:
    """Beside node.json, the BMC addresses that answered as wired: after this, one that stops
    answering is an outage (the power checks' infrastructure WARN); one never recorded here
    is ERROR (nodegate.battery.power.judge_static)."""
    import datetime as dt
    import json

    from nodegate.fileio import atomic_write_text

    data = {"bmcs": sorted(bmcs),
            "verified_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    atomic_write_text(node_file.with_name(VERIFIED_FILE), json.dumps(data, indent=2) + "\n")


__all__ = ["VERIFIED_FILE", "Finding", "exit_code", "judge_bmc", "judge_pdu",
           "record_verified", "run_verify", "short"]
