"""Join on evidence: what a report must show before the gate lets its node join.

A report's level is a label; ``nodegate validate --level standard --checks gpu`` writes a
"standard" report with no load in it. So a join at level L asks the report what ran: every
check the registry places at L or below in the node's own groups (minus the checks this
profile says do not apply), the load at its full duration, no fault-injection seam set.
The power group is not required: its checks judge the BMC and PDUs, infrastructure outside
the node (docs/verdicts.md rule 4); when it ran, its results are judged like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodegate.battery.registry import CHECKS
from nodegate.report.model import NodeReport
from nodegate.results import Verdict
from nodegate.vocabulary import LEVEL_RANK

#: Groups whose checks a join requires, in the order a refusal names them (network: the
#: RDMA rails a job crosses between nodes).
JOIN_GROUPS = ("gpu", "log", "host", "network", "load")

#: How many missing check names a refusal spells out per group (the rest are counted).
SHOWN = 8

_NVLINK = ("nvlink_state", "nvlink_speed", "nvlink_crc_errors", "nvlink_replay_errors",
           "nvlink_recovery_errors")
_PEER = ("p2p_completed", "p2p_unidir", "p2p_bidir", "p2p_unidir_outlier",
         "p2p_bidir_outlier", "allreduce_completed", "allreduce_busbw", "burnin_straggler",
         "p2p_copy_verified", "allreduce_verified",
         "collectives_completed", "allgather_busbw", "reducescatter_busbw", "alltoall_busbw",
         "broadcast_busbw")


#: The storage checks that run only where the profile asks (battery.storage).
_SMART = ("nvme_critical_warning", "nvme_spare", "nvme_media_errors", "nvme_wear",
          "nvme_temperature", "nvme_unsafe_shutdowns", "nvme_firmware", "nvme_namespace_size")
_FIO = ("nvme_seq_read", "nvme_seq_write", "nvme_rand_read")


def _section(profile: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = profile.get(name)
    return value if isinstance(value, Mapping) else {}


def not_applicable(profile: Mapping[str, Any] | None) -> dict[str, str]:
    """Check -> why this profile says it does not apply (the judges emit nothing for it).

    Mirrors the judges' own conditions: ``judge.gpu`` (fabric, NVLink), ``judge.host``
    (fabric manager, ACS, NVMe) and the load phases that need two GPUs.
    """
    if profile is None:
        return {}
    gpu, nvlink = _section(profile, "gpu"), _section(profile, "nvlink")
    driver, host, nvme = (_section(profile, k) for k in ("driver", "host", "nvme"))
    out: dict[str, str] = {}
    features = gpu.get("features") or {}
    if not nvlink.get("nvswitch") or not features.get("gpu_fabric",
                                                      gpu.get("architecture") != "ampere"):
        out["fabric_state"] = ("no GPU fabric info (no NVSwitch, or a GPU model without it: "
                               "gpu.features.gpu_fabric)")
    if not nvlink.get("links_per_gpu"):
        out.update(dict.fromkeys(_NVLINK, "nvlink.links_per_gpu is 0"))
    if not features.get("recovery_action"):
        out["gpu_recovery_action"] = ("a GPU model that declares no NVML recovery action "
                                      "(gpu.features.recovery_action)")
    if not driver.get("fabricmanager"):
        out["fabricmanager_service"] = "driver.fabricmanager is false"
    if not host.get("acs_disabled"):
        out["pcie_acs"] = "host.acs_disabled is false"
    devices = nvme.get("devices") or 0
    if devices <= 1:
        out["nvme_array"] = f"nvme.devices is {devices}: no md array"
    if not devices:
        out["nvme_mount"] = "nvme.devices is 0"
    if int(gpu.get("count") or 0) < 2:
        out.update(dict.fromkeys(_PEER, "one GPU: no peer to copy to or reduce with"))
    out.update(_network_not_applicable(_section(_section(profile, "network"), "rails")))
    return out


def _network_not_applicable(rails: Mapping[str, Any]) -> dict[str, str]:
    """Mirrors ``judge.network``: no rails declared leaves only ib_rail_count (its SKIP
    says why); ``pairing``/``numa`` "any" are not judged; ib_netdev needs a RoCE ``mtu``."""
    network = [n for n, info in CHECKS.items() if info.group == "network"]
    if not rails:
        return dict.fromkeys([n for n in network if n != "ib_rail_count"],
                             "the profile declares no RDMA rails (network.rails)")
    out: dict[str, str] = {}
    if rails.get("mtu") is None:
        out["ib_netdev"] = "network.rails.mtu is not set (no RoCE netdev to judge)"
    if rails.get("pairing") == "any":
        out["ib_topology"] = "network.rails.pairing is any"
    if rails.get("numa") == "any":
        out["ib_rail_numa"] = "network.rails.numa is any"
    return out


def _storage_not_applicable(profile: Mapping[str, Any] | None,
                            level: str) -> dict[str, str]:
    """Mirrors ``battery.storage``: the SMART checks run only where ``nvme.smart`` is true,
    fio only with an ``nvme.fio`` block, DCGM's diagnostic only at the levels
    ``dcgm.diag_level`` names (a missing dcgmi there is a SKIP with its reason)."""
    if profile is None:
        return {}
    nvme = _section(profile, "nvme")
    out: dict[str, str] = {}
    if not nvme.get("smart"):
        out.update(dict.fromkeys([n for n in CHECKS if n in _SMART],
                                 "nvme.smart is not true (no SMART health read)"))
    if not isinstance(nvme.get("fio"), Mapping):
        out.update(dict.fromkeys(_FIO, "the profile has no nvme.fio block"))
    levels = _section(_section(profile, "dcgm"), "diag_level")
    if not int(levels.get(level) or 0):
        out["dcgm_diag"] = f"dcgm.diag_level names no diagnostic at {level}"
    return out


def required_checks(level: str, profile: Mapping[str, Any] | None) -> list[str]:
    """The registry's checks at ``level`` or below in ``JOIN_GROUPS`` that apply to
    ``profile``, in registry order."""
    skip = {**not_applicable(profile), **_storage_not_applicable(profile, level)}
    rank = LEVEL_RANK[level]
    return [name for name, info in CHECKS.items()
            if info.group in JOIN_GROUPS and LEVEL_RANK[info.level] <= rank
            and name not in skip]


def _missing(report: NodeReport, required: Iterable[str]) -> list[str]:
    """Required checks with no result, or only SKIPs that give no reason (a SKIP must say
    which declaration of the profile made it one)."""
    reasons: dict[str, bool] = {}
    for result in report.results:
        explained = result.verdict is not Verdict.SKIP or bool(result.evidence.get("reason"))
        reasons[result.check] = reasons.get(result.check, False) or explained
    return [name for name in required if not reasons.get(name, False)]


def problems(report: NodeReport, level: str,
             profile: Mapping[str, Any] | None) -> list[str]:
    """Why ``report`` is not evidence for a join at ``level`` (empty: it is).

    Each line names what was missing: ``missing load checks: gemm_tflops, ...``,
    ``load ran at duration scale 0.02, not 1``, ``fault seams set: NODEGATE_LOAD_...``.
    """
    out = []
    missing = _missing(report, required_checks(level, profile))
    for group in JOIN_GROUPS:
        names = [n for n in missing if CHECKS[n].group == group]
        if names:
            more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
            out.append(f"missing {group} checks: {', '.join(names[:SHOWN])}{more}")
    run = report.run
    if LEVEL_RANK[level] > LEVEL_RANK["quick"]:
        if not run:
            out.append("the report does not record what ran (duration scale, fault seams): "
                       "written by an older nodegate; run nodegate validate again")
        else:
            scale = run.get("duration_scale")
            if scale is None:
                if not any(CHECKS[n].group == "load" for n in missing):
                    out.append("no load duration scale recorded")
            elif float(scale) < 1.0:
                out.append(f"load ran at duration scale {float(scale):g}, not 1")
    seams = run.get("seams") if run else None
    if isinstance(seams, Mapping) and seams:
        out.append("fault-injection seams set: "
                   + ", ".join(f"{k}={v}" for k, v in sorted(seams.items())))
    return out


def widen_checks(args: Iterable[str], level: str) -> list[str]:
    """``args`` for the battery run a join will judge, with any ``--checks`` selection
    widened to every group the join requires at ``level`` (``--checks gpu,log`` from the
    agent's health args must not turn a standard gate run into one without load). Groups
    outside ``JOIN_GROUPS`` that the selection names (power) are kept."""
    needed = [g for g in JOIN_GROUPS if g != "load" or LEVEL_RANK[level] > LEVEL_RANK["quick"]]
    out: list[str] = []
    items = list(args)
    index = 0
    while index < len(items):
        arg = items[index]
        if arg == "--checks" or arg.startswith("--checks="):
            if arg == "--checks":
                index += 1
                value = items[index] if index < len(items) else ""
            else:
                value = arg.partition("=")[2]
            asked = [g.strip() for g in value.split(",") if g.strip()]
            out += ["--checks", ",".join(dict.fromkeys([*needed, *asked]))]
        else:
            out.append(arg)
        index += 1
    return out
