"""What cures the evidence, as NVIDIA defines it: the action table.

Three sources, each row citing NVIDIA's own documentation (docs/remediation.md has the table):

* the Xid catalogue's resolution bucket, already judged into an action per event by
  ``nodegate.judge.xid`` (``reset_gpu``, ``reboot_node``, ``inspect_hardware``...):
  NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, column
  "Resolution Bucket (Immediate Action)";
* NVML's GPU recovery action where the driver reports it (``nvmlDeviceGpuRecoveryAction_t``,
  nvml.h; read through ``nodegate.judge.xid.RECOVERY_ACTIONS`` so the two readings of that
  enum never differ): NONE 0, GPU_RESET 1, NODE_REBOOT 2, DRAIN_P2P 3, DRAIN_AND_RESET 4,
  RECOVER_IMEX_DOMAIN / GPU_RESET_BUS 5, BUS_RESET 6, SYSTEM_REBOOT 7 (NVIDIA cuda-python
  ``cuda.bindings.nvml.DeviceGpuRecoveryAction``, which mirrors nvml.h). A probe that does
  not report it (older driver, older probe) is *unknown*, never NONE;
* the check that failed (``CHECK_REMEDIES``).

The worst remedy of all the evidence wins (``Remedy`` is ordered). A GPU reset is only ever
planned when no process uses any GPU and the platform allows it (``reset_plan``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodegate.judge.xid import RECOVERY_ACTIONS
from nodegate.results import CheckResult, Verdict


class Remedy(str, enum.Enum):
    """From least to most disruptive; ``RMA`` means no reset cures it."""

    NONE = "none"  # nothing a reset cures: the node stays drained for a person
    RESET_GPU = "reset_gpu"
    REBOOT_NODE = "reboot_node"
    POWER_CYCLE = "power_cycle"
    RMA = "rma"

    @property
    def rank(self) -> int:
        return list(Remedy).index(self)

    def next_rung(self) -> Remedy:
        """The remedy a failed re-qualification escalates to."""
        order = [Remedy.RESET_GPU, Remedy.REBOOT_NODE, Remedy.POWER_CYCLE, Remedy.RMA]
        return order[min(order.index(self) + 1, len(order) - 1)] if self in order else Remedy.RMA


MEMORY_FLAGS = ("NVIDIA GPU Memory Error Management, Error Recovery and Response Flags, "
                "docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"
                "error-recovery-and-response-flags.html")
XID_CATALOGUE = ("NVIDIA Xid catalogue, docs.nvidia.com/deploy/xid-errors/"
                 "analyzing-xid-catalog.html, Resolution Bucket (Immediate Action)")
NVML_RECOVERY = ("nvml.h nvmlDeviceGpuRecoveryAction_t (nvmlDeviceGetGpuRecoveryAction), "
                 "values as NVIDIA cuda-python cuda.bindings.nvml.DeviceGpuRecoveryAction; "
                 "meaning per " + MEMORY_FLAGS + " (Reset: terminate all GPU processes, "
                 "'nvidia-smi -r'; Reboot: reboot the operating system)")
NVIDIA_SMI_RESET = ("nvidia-smi(1), -r/--gpu-reset, docs.nvidia.com/deploy/nvidia-smi: "
                    "'Typically useful if a double bit ECC error has occurred'; 'If any GPU is "
                    "not healthy a complete reset should be instigated by power cycling the "
                    "node'")
ROW_REMAP = (MEMORY_FLAGS + ": 'row-remapping will happen at the next GPU reset'; a "
             "row-remapping failure is defined by its 'RMA Policy Thresholds for Row-Remapping'")

#: nodegate.judge.xid action -> remedy. ``application``/``software``/``unspecified``/``unknown``
#: are nothing a reset is documented to cure: no automatic action.
XID_ACTION_REMEDY: dict[str, Remedy] = {
    "none": Remedy.NONE,
    "application": Remedy.NONE,
    "software": Remedy.NONE,
    "unspecified": Remedy.NONE,
    "unknown": Remedy.NONE,
    "reset_gpu": Remedy.RESET_GPU,  # RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK(5)_ERR
    "reboot_node": Remedy.REBOOT_NODE,  # RESTART_BM, RESTART_VM
    "inspect_hardware": Remedy.RMA,  # CONTACT_SUPPORT, CHECK_MECHANICALS
}

#: A failed check -> (remedy, source). Checks not listed have no automatic remedy.
CHECK_REMEDIES: dict[str, tuple[Remedy, str]] = {
    "gpu_reachable": (Remedy.POWER_CYCLE, NVIDIA_SMI_RESET
                      + "; Xid 79 (fallen off the bus) is RESTART_BM in the " + XID_CATALOGUE),
    "ecc_dbe_volatile": (Remedy.RESET_GPU, NVIDIA_SMI_RESET),
    "remap_pending": (Remedy.RESET_GPU, ROW_REMAP),
    "remap_failure": (Remedy.RMA, ROW_REMAP),
    "remap_uncorrectable": (Remedy.RMA, ROW_REMAP + "; past the profile's limit"),
}


@dataclass(frozen=True)
class Finding:
    """One piece of evidence and the remedy it calls for."""

    entity: str
    remedy: Remedy
    why: str
    source: str


@dataclass(frozen=True)
class Plan:
    """The remedy for the node: the worst finding's, with every GPU it concerns."""

    remedy: Remedy
    findings: tuple[Finding, ...] = ()
    targets: tuple[str, ...] = ()  # gpuN entities the remedy is for (none: node-wide)
    rma_entities: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        if not self.findings:
            return "no failing evidence with a documented remedy"
        return "; ".join(f"{f.entity}: {f.why} -> {f.remedy.value}" for f in self.findings)


def gpu_of(entity: str) -> str | None:
    """``gpu3`` for ``gpu3``/``gpu3.link5``; None for node-level entities and pairs."""
    head = entity.split(".", 1)[0]
    return head if head.startswith("gpu") and head[3:].isdigit() else None


def findings_from_results(results: Iterable[CheckResult]) -> list[Finding]:
    """The findings in one report's FAIL/ERROR results (Xid events and failed checks)."""
    out: list[Finding] = []
    for result in results:
        if result.verdict not in (Verdict.FAIL, Verdict.ERROR):
            continue
        if result.check == "xid_events":
            out.extend(_xid_findings(result))
        elif result.check in CHECK_REMEDIES and result.verdict is Verdict.FAIL:
            remedy, source = CHECK_REMEDIES[result.check]
            out.append(Finding(result.entity, remedy, f"{result.check} failed "
                               f"(measured {result.measured!r})", source))
        else:
            out.append(Finding(result.entity, Remedy.NONE, f"{result.check} "
                               f"{result.verdict.value}: no documented automatic remedy",
                               "nodegate policy: a person reads it"))
    return out


def _xid_findings(result: CheckResult) -> list[Finding]:
    out = []
    events = result.evidence.get("events")
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        code = event.get("xid", event.get("sxid"))
        if event.get("recurrent"):
            out.append(Finding(result.entity, Remedy.RMA, f"Xid {code} came back after a "
                               "reboot", XID_CATALOGUE + " (investigatory: CONTACT_SUPPORT)"))
            continue
        if event.get("origin") == "fallen-off-bus" or code == 79:
            remedy, source = CHECK_REMEDIES["gpu_reachable"]
            out.append(Finding(result.entity, remedy, f"Xid {code}: fell off the bus", source))
            continue
        remedy = XID_ACTION_REMEDY.get(str(event.get("action", "unknown")), Remedy.NONE)
        if event.get("override") == "escalate":
            remedy = max(remedy, Remedy.RESET_GPU, key=lambda r: r.rank)
        out.append(Finding(result.entity, remedy, f"Xid {code} "
                           f"({event.get('mnemonic', event.get('meaning', ''))})",
                           XID_CATALOGUE))
    return out


def findings_from_recovery_actions(actions: Mapping[str, Any]) -> list[Finding]:
    """Per GPU entity, NVML's recovery action (an int; None or absent: unknown, no finding)."""
    out = []
    for entity, value in sorted(actions.items()):
        if type(value) is not int:
            continue  # absent, unsupported or unreadable: unknown, never "none"
        judged = RECOVERY_ACTIONS.get(value)
        if judged is None:
            out.append(Finding(entity, Remedy.NONE, f"NVML recovery action {value} not known "
                               "to this nodegate", NVML_RECOVERY))
        elif judged != "none":
            out.append(Finding(entity, XID_ACTION_REMEDY[judged],
                               f"NVML recovery action {value}", NVML_RECOVERY))
    return out


def decide(findings: Sequence[Finding]) -> Plan:
    """The worst remedy among ``findings``; its targets are the GPUs that call for it."""
    if not findings:
        return Plan(Remedy.NONE)
    worst = max((f.remedy for f in findings), key=lambda r: r.rank)
    targets = sorted({g for f in findings if f.remedy is worst and (g := gpu_of(f.entity))},
                     key=lambda g: int(g[3:]))
    rma = sorted({g for f in findings if f.remedy is Remedy.RMA and (g := gpu_of(f.entity))},
                 key=lambda g: int(g[3:]))
    return Plan(worst, tuple(findings), tuple(targets), tuple(rma))


# --- GPU reset: only when nothing uses a GPU and the platform allows it --------------------

#: What nvidia-smi(1) says about -r on NVSwitch systems (docs.nvidia.com/deploy/nvidia-smi):
#: "Starting with the NVIDIA Ampere architecture, GPUs with NVLink connections can be
#: individually reset. On Ampere NVSwitch systems, Fabric Manager is required to facilitate
#: reset. On Hopper and later NVSwitch systems, the dependency on Fabric Manager to facilitate
#: reset is removed." and "If Fabric Manager is not running [...] any GPUs with NVLink
#: connections to a GPU being reset must also be reset in the same command". It also says
#: "There can't be any applications using these devices" and "There also can't be any compute
#: applications running on any other GPU in the system if individual GPU reset is not
#: feasible". nodegate asks more: no process on any GPU of the node, always (the node is
#: drained and its jobs have ended; a process left is someone's, and is never killed).
#: Not found in NVIDIA's documentation this session: whether a B200/B300 (NVLink5) HGX board
#: needs more than Hopper does for a per-GPU reset; nodegate treats it as Hopper.
INDIVIDUAL_RESET_ARCHITECTURES = frozenset({"ampere", "hopper", "blackwell"})
FM_FREE_RESET_ARCHITECTURES = frozenset({"hopper", "blackwell"})


@dataclass(frozen=True)
class ResetPlan:
    """The GPUs one reset command covers, or why no reset may run (``blocked``)."""

    gpus: tuple[str, ...]
    blocked: str | None = None
    why: str = ""


def reset_plan(targets: Sequence[str], *, all_gpus: Sequence[str],
               processes: Mapping[str, Sequence[int]], nvswitch: bool,
               architecture: str | None, fabric_manager_running: bool | None,
               allowed: bool = True) -> ResetPlan:
    """Which GPUs ``nvidia-smi -r`` must cover to reset ``targets``, or why it may not run."""
    if not allowed:
        return ResetPlan((), "the profile forbids GPU resets (remediation.gpu_reset: false)")
    busy = {gpu: list(pids) for gpu, pids in processes.items() if pids}
    if busy:
        listed = ", ".join(f"{gpu} (pid {', '.join(map(str, pids))})"
                           for gpu, pids in sorted(busy.items()))
        return ResetPlan((), f"processes use GPUs: {listed}; a GPU is never reset under a "
                         "process")
    if not targets:
        return ResetPlan((), "no GPU named by the evidence to reset")
    arch = (architecture or "").lower()
    if not nvswitch:
        if arch in INDIVIDUAL_RESET_ARCHITECTURES:
            return ResetPlan(tuple(targets), why="no NVSwitch: each GPU resets on its own")
        return ResetPlan(tuple(all_gpus), why="pre-Ampere or unknown architecture: every "
                         "NVLink peer is reset in the same command")
    if arch in FM_FREE_RESET_ARCHITECTURES:
        return ResetPlan(tuple(targets), why=f"{arch} NVSwitch system: individual reset, no "
                         "Fabric Manager dependency")
    if arch == "ampere" and fabric_manager_running:
        return ResetPlan(tuple(targets), why="Ampere NVSwitch system with Fabric Manager "
                         "running: individual reset")
    return ResetPlan(tuple(all_gpus), why="NVSwitch system without a running Fabric Manager "
                     "(or an older or unknown architecture): every peer GPU reset together")
