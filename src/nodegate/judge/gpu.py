"""Quick-level GPU checks: what NVML says about each GPU, judged against the profile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from nodegate.judge.common import against, expect, make
from nodegate.judge.gpu_checks import CHECKS as GPU_CHECKS
from nodegate.probes import nvml_codes
from nodegate.probes.nvml import BoardSnapshot, GpuState, NvLinkState
from nodegate.profiles import Profile
from nodegate.profiles.threshold_keys import GPU_FEATURES, GpuFeatures, Key
from nodegate.results import CheckResult, Severity, Verdict

HW = Severity.HARDWARE
CRIT = Severity.CRITICAL

# NVML encodings (clock event reason bits, compute modes, fabric states) come from
# nvidia-ml-py's constants in one place; the HW clock event reasons mean the board is in trouble.
CLOCK_EVENT_BITS = nvml_codes.CLOCK_EVENT_BITS
CLOCK_EVENTS_FATAL = nvml_codes.CLOCK_EVENTS_FATAL
COMPUTE_MODES = nvml_codes.COMPUTE_MODES
FABRIC_STATE_COMPLETED = nvml_codes.FABRIC_STATE_COMPLETED
FABRIC_STATE_NAMES = nvml_codes.FABRIC_STATE_NAMES
#: Above this utilization a GPU is not idle and its idle temperature is not judged.
IDLE_UTILIZATION_PCT = 5


def clock_event_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


def judge_board(board: BoardSnapshot, profile: Profile) -> list[CheckResult]:
    results = [_gpu_count(board, profile), _driver(board, profile)]
    reachable = []
    for gpu in board.gpus:
        if gpu.lost:
            results.append(make("gpu_reachable", gpu.entity, Verdict.FAIL, measured="lost",
                                threshold="reachable", severity=HW, error=gpu.lost_error,
                                bus_id=gpu.bus_id,
                                hint="GPU fell off the bus: check the kernel log for Xid 79"))
            continue
        results.append(make("gpu_reachable", gpu.entity, Verdict.PASS, measured="reachable",
                            threshold="reachable"))
        reachable.append(gpu)
    p_gpu = profile.data["gpu"]
    results += _firmware(reachable, "vbios_uniform", "VBIOS", "vbios", read=_vbios,
                         pin=p_gpu.get("vbios"))
    results += _firmware(reachable, "inforom_uniform", "InfoROM", "inforom",
                         read=_inforom(profile), pin=p_gpu.get("inforom"))
    for gpu in reachable:
        results += judge_gpu(gpu, profile)
    return results


def judge_nvml_unavailable(reason: str, *, kind: str, stage: str | None,
                           deadline_s: float) -> list[CheckResult]:
    """The board could not be read at all (nvmlInit failed, NVML hung, the probe died): the
    node answered nothing about its GPUs, which is ERROR on the node, never "no result"."""
    hint = {"init": "the NVIDIA driver or libnvidia-ml is missing or not loaded: check "
                    "`lsmod | grep nvidia`, the driver package and the kernel log",
            "timeout": "an NVML call did not return (wedged GPU or driver): check the kernel "
                       "log for Xid 79/119 and GSP timeouts; a GPU reset or reboot may be needed",
            }.get(kind, "NVML failed while reading the board: check the driver and kernel log")
    return [make("gpu_reachable", "node", Verdict.ERROR, measured="no answer from NVML",
                 threshold="NVML answers", severity=CRIT, reason=reason, failure=kind,
                 stage=stage, deadline_s=deadline_s, hint=hint)]


def _gpu_count(board: BoardSnapshot, profile: Profile) -> CheckResult:
    expected = profile.data["gpu"]["count"]
    return expect("gpu_count", "node", board.device_count, expected, unit="GPUs", severity=HW,
                  bus_ids=[g.bus_id for g in board.gpus if g.bus_id])


def _driver(board: BoardSnapshot, profile: Profile) -> CheckResult:
    from nodegate.versions import Version

    pin = profile.data["driver"]["version"]
    measured = board.driver_version
    if measured is None:
        return make("driver_version", "node", Verdict.ERROR, threshold=pin, severity=CRIT,
                    reason="NVML did not report a driver version")
    same = Version(measured) == Version(pin)
    return make("driver_version", "node", Verdict.PASS if same else Verdict.FAIL,
                measured=measured, threshold=pin, severity=CRIT,
                nvml_version=board.nvml_version, cuda_driver_version=board.cuda_driver_version)


def _firmware(gpus: list[GpuState], check: str, what: str, key: str, *,
              read: Callable[[GpuState], Reading],
              pin: dict[str, Any] | None) -> list[CheckResult]:
    """Firmware judged per GPU against a pin, or, without one, by agreement: never by vote.

    ``read`` gives the value or why there is none. A pin judges every GPU on its own, so a
    board whose GPUs all carry the same wrong flash fails, and so does a single-GPU board.
    Without a pin a split among GPUs of one model cannot say which side is right: it fails the
    node with every GPU's version listed. A GPU that does not answer is ERROR, never a vote
    for anyone.
    """
    out: list[CheckResult] = []
    readable: dict[str | None, list[tuple[GpuState, str]]] = {}
    for gpu in gpus:
        value, problem, verdict = read(gpu)
        if value is None:
            out.append(make(check, gpu.entity, verdict,
                            measured="corrupted" if verdict is Verdict.FAIL else "unreadable",
                            threshold=_pin_repr(pin), severity=CRIT,
                            reason=problem or f"NVML did not report the {what}"))
        else:
            readable.setdefault(gpu.name, []).append((gpu, value))
    if pin is not None:
        allowed = [str(v) for v in pin["versions"]]
        for members in readable.values():
            for gpu, value in members:
                ok = value in allowed
                out.append(make(check, gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                                measured=value, threshold=_pin_repr(pin), severity=CRIT,
                                hint=None if ok else f"flash the pinned {what}"))
        return out
    for model, members in readable.items():
        versions = {gpu.entity: value for gpu, value in members}
        distinct = sorted(set(versions.values()))
        if len(distinct) == 1:
            out += [make(check, gpu.entity, Verdict.PASS, measured=value,
                         threshold="same on every GPU of the model") for gpu, value in members]
            continue
        out.append(make(check, "node", Verdict.FAIL,
                        measured=f"{len(distinct)} {what} versions", severity=CRIT,
                        threshold="same on every GPU of the model (no pin in the profile)",
                        model=model, versions=versions,
                        hint=f"GPUs disagree and the profile pins no {what}: flash one "
                             f"version and pin it (profile key gpu.{key})"))
    return out


def _pin_repr(pin: dict[str, Any] | None) -> dict[str, Any] | str:
    if pin is None:
        return "same on every GPU of the model"
    return {"one_of": list(pin["versions"]), "source": pin["source"]}


class Reading(NamedTuple):
    """One GPU's firmware version, or why there is none (ERROR: unread; FAIL: NVML says bad)."""

    value: str | None
    problem: str | None = None
    verdict: Verdict = Verdict.ERROR


def _vbios(gpu: GpuState) -> Reading:
    if gpu.vbios is None and "vbios" in gpu.read_errors:
        return Reading(None, f"nvmlDeviceGetVbiosVersion: {gpu.read_errors['vbios']}")
    return Reading(gpu.vbios)


def _inforom(profile: Profile) -> Callable[[GpuState], Reading]:
    """The InfoROM as judged: the image version, with the ECC object's version when the
    board runs ECC (a corrupt InfoROM loses its objects; NVML then reports none)."""
    need_ecc = bool(profile.data["gpu"].get("ecc"))
    pinned = profile.data["gpu"].get("inforom") is not None
    calls = {"inforom_validate": "nvmlDeviceValidateInforom",
             "inforom": "nvmlDeviceGetInforomImageVersion",
             "inforom_ecc": "nvmlDeviceGetInforomVersion(NVML_INFOROM_ECC)"}

    def read(gpu: GpuState) -> Reading:
        if gpu.inforom_valid is False:
            return Reading(None, "nvmlDeviceValidateInforom: NVML_ERROR_CORRUPTED_INFOROM",
                           Verdict.FAIL)
        failed = [f"{call}: {gpu.read_errors[label]}" for label, call in calls.items()
                  if label in gpu.read_errors]
        if failed:  # unmeasured, never "valid" nor "corrupt"
            return Reading(None, "NVML error: " + "; ".join(failed))
        if gpu.inforom_image is None:
            return Reading(None, "NVML did not report the InfoROM image version")
        # the ECC object exists where ECC runs: with ECC off or not reported (a capture's N/A)
        # ecc_mode judges that, and a missing object says nothing about the InfoROM
        if need_ecc and gpu.ecc_enabled is True and gpu.inforom_ecc is None:
            return Reading(None, "InfoROM ECC object unreadable on an ECC board: a corrupt "
                                 "InfoROM loses its objects")
        # a pin names image versions; agreement compares the whole signature
        return Reading(_inforom_signature(gpu, with_ecc=not pinned))

    return read


def _inforom_signature(gpu: GpuState, *, with_ecc: bool = True) -> str | None:
    """Image version, plus the ECC object's version when GPUs are compared with each other."""
    if gpu.inforom_image is None:
        return None
    if not with_ecc or gpu.inforom_ecc is None:
        return gpu.inforom_image
    return f"{gpu.inforom_image} ecc={gpu.inforom_ecc}"


def judge_gpu(gpu: GpuState, profile: Profile) -> list[CheckResult]:
    p_gpu, e = profile.data["gpu"], gpu.entity
    th = profile.threshold
    features = GpuFeatures.of(p_gpu)
    out = [
        expect("gpu_model", e, gpu.name, p_gpu["model"], severity=CRIT,
               pci_device_id=f"0x{gpu.pci_device_id:04X}" if gpu.pci_device_id else None),
        expect("gpu_pci_device_id", e,
               f"0x{gpu.pci_device_id:04X}" if gpu.pci_device_id is not None else None,
               f"0x{p_gpu['pci_device_id']:04X}", severity=CRIT),
        _memory(gpu, profile),
        expect("persistence_mode", e, gpu.persistence, p_gpu["persistence"], severity=CRIT),
        expect("mig_mode", e, None if gpu.mig_enabled is None else
               ("enabled" if gpu.mig_enabled else "disabled"), p_gpu["mig"], severity=CRIT),
        expect("compute_mode", e, None if gpu.compute_mode is None else
               COMPUTE_MODES.get(gpu.compute_mode, str(gpu.compute_mode)),
               p_gpu["compute_mode"], severity=CRIT),
        expect("ecc_mode", e, gpu.ecc_enabled, p_gpu["ecc"], severity=CRIT,
               pending=gpu.ecc_pending,
               # NVML gives the pending mode, not a flag: a change waits only where they differ
               pending_change=(None if gpu.ecc_pending is None or gpu.ecc_enabled is None
                               else gpu.ecc_pending != gpu.ecc_enabled) or None),
        against("ecc_dbe_volatile", e, gpu.dbe_volatile, th(Key.ECC_DBE_VOLATILE_MAX),
                severity=HW),
        against("ecc_dbe_aggregate", e, gpu.dbe_aggregate, th(Key.ECC_DBE_AGGREGATE_MAX),
                fail=Verdict.WARN, severity=Severity.WARNING),
        against("ecc_sbe_volatile", e, gpu.sbe_volatile, th(Key.ECC_SBE_VOLATILE_MAX),
                severity=HW),
        against("ecc_sbe_aggregate", e, gpu.sbe_aggregate, th(Key.ECC_SBE_AGGREGATE_MAX),
                fail=Verdict.WARN, severity=Severity.WARNING),
        against("remap_pending", e, None if gpu.remap_pending is None else int(gpu.remap_pending),
                th(Key.REMAP_PENDING_MAX), severity=CRIT,
                hint="a GPU reset applies the pending remap"),
        against("remap_failure", e, None if gpu.remap_failure is None else int(gpu.remap_failure),
                th(Key.REMAP_FAILURE_MAX), severity=HW),
        against("remap_uncorrectable", e, gpu.remap_uncorrectable,
                th(Key.REMAP_UNCORRECTABLE_MAX), severity=HW),
        _retired_pages(gpu, profile),
        _pcie_link(gpu, profile),
        against("pcie_replays", e, gpu.pcie_replays, th(Key.PCIE_REPLAY_MAX),
                fail=Verdict.WARN, severity=Severity.WARNING),
        _clock_events(gpu),
        _power_limit(gpu, profile),
        _idle_temperature(gpu, profile),
        _foreign_processes(gpu),
        *_recovery_action(gpu, features),
    ]
    if profile.data["nvlink"]["nvswitch"] and features.gpu_fabric:
        # GPU fabric info exists from Hopper on (gpu.features.gpu_fabric); on Ampere the host
        # group checks the fabric manager service instead
        out.append(_fabric(gpu, profile))
    out += _nvlinks(gpu, profile, features)
    return [_unmeasured(r, gpu, features) for r in out]


#: The probe's field labels (``nodegate.probes.nvml``) each check is judged from; link checks
#: name the field after ``nvlink<M>.``. Every label the probe reads is here, so an NVML error on
#: any read makes some check of that GPU ERROR (an error on a label only in evidence too).
CHECK_FIELDS: dict[str, tuple[str, ...]] = {
    "gpu_model": ("name", "uuid", "serial", "board_part_number"),
    "gpu_pci_device_id": ("pci",), "gpu_memory": ("memory",),
    "gpu_recovery_action": ("recovery_action",),
    "persistence_mode": ("persistence",), "mig_mode": ("mig_mode",),
    "compute_mode": ("compute_mode",), "ecc_mode": ("ecc_mode",),
    "ecc_dbe_volatile": ("dbe_volatile",), "ecc_dbe_aggregate": ("dbe_aggregate",),
    "ecc_sbe_volatile": ("sbe_volatile",), "ecc_sbe_aggregate": ("sbe_aggregate",),
    "remap_pending": ("remapped_rows",), "remap_failure": ("remapped_rows",),
    "remap_uncorrectable": ("remapped_rows",),
    "retired_pages": ("retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"),
    "pcie_link": ("pcie_gen_max", "pcie_width", "pcie_gen", "pcie_gen_gpu_max",
                  "pcie_width_max"),
    "pcie_replays": ("pcie_replays",),
    "clock_events": ("clock_event_reasons", "sm_clock", "sm_clock_max"),
    "power_limit": ("power_limit", "power_default_limit", "power"),
    "idle_temperature": ("temperature", "slowdown_temp", "shutdown_temp", "utilization"),
    "foreign_processes": ("processes",),
    "fabric_state": ("fabric",),
    "nvlink_state": ("state", "version", "remote"), "nvlink_speed": ("speed",),
    "nvlink_crc_errors": ("crc_flit", "crc_data"), "nvlink_replay_errors": ("replay",),
    "nvlink_recovery_errors": ("recovery",),
}

#: The ``gpu.features`` flag a check's NVML calls depend on, from the checks' declarations
#: (``nodegate.judge.gpu_checks``); a check not named here reads what every GPU nodegate
#: judges reports, so NOT_SUPPORTED there is always ERROR.
CHECK_FEATURE: dict[str, str] = {c.name: f.value for c in GPU_CHECKS for f in c.requires
                                 if f.value in GPU_FEATURES}

#: SKIP reasons for a feature the model does not have; page retirement names what judges the
#: same memory instead.
FEATURE_ABSENT: dict[str, str] = {
    "page_retirement": "no page retirement on this GPU (Ampere and later remap rows instead: "
                       "see remap_pending, remap_failure, remap_uncorrectable)",
}

_ECC_COUNTERS = ("ecc_dbe_volatile", "ecc_dbe_aggregate", "ecc_sbe_volatile",
                 "ecc_sbe_aggregate")


def _fields(result: CheckResult) -> list[str]:
    """The probe labels ``result`` was judged from (``nvlink3.replay`` for a link check)."""
    prefix = ""
    if ".link" in result.entity:
        prefix = f"nvlink{result.entity.rsplit('.link', 1)[1]}."
    return [f"{prefix}{name}" for name in CHECK_FIELDS.get(result.check, ())]


def _not_measured(result: CheckResult) -> bool:
    """A SKIP that only says the value was missing (not "no threshold", not "GPU busy")."""
    return (result.verdict is Verdict.SKIP
            and "not reported" in str(result.evidence.get("reason", "")))


def _unmeasured(result: CheckResult, gpu: GpuState, features: GpuFeatures) -> CheckResult:
    """Unmeasured is ERROR, NOT_SUPPORTED is declared (docs/verdicts.md).

    Any NVML error but NOT_SUPPORTED on a field a check reads makes it ERROR, whatever the
    other fields said (a measured FAIL stays FAIL, with the errors in its evidence). A
    NOT_SUPPORTED that left the check without its value is ERROR where the GPU model declares
    the feature (``gpu.features``) or the field is one every GPU reports, and a SKIP naming
    the feature only where the model lacks it.
    """
    fields = _fields(result)
    failed = {name: gpu.read_errors[name] for name in fields if name in gpu.read_errors}
    evidence = {k: v for k, v in result.evidence.items() if k not in ("reason", "nvml_errors")}
    if failed:
        if result.verdict is Verdict.FAIL:
            return make(result.check, result.entity, result.verdict, measured=result.measured,
                        threshold=result.threshold, unit=result.unit, severity=result.severity,
                        **{**result.evidence, "nvml_errors": failed})
        if result.verdict is Verdict.ERROR and "nvml_errors" in result.evidence:
            return result  # already says which NVML call failed
        return make(result.check, result.entity, Verdict.ERROR, threshold=result.threshold,
                    unit=result.unit, severity=CRIT, **evidence, nvml_errors=failed,
                    reason="NVML error: " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    unsupported = [name for name in fields if name in gpu.unsupported]
    if not unsupported or not _not_measured(result):
        return result
    feature = CHECK_FEATURE.get(result.check)
    if feature is not None and not features.has(feature):
        reason = FEATURE_ABSENT.get(feature) or (
            f"this GPU model has no {GPU_FEATURES[feature]} (gpu.features.{feature}: false)")
        return make(result.check, result.entity, Verdict.SKIP, threshold=result.threshold,
                    unit=result.unit, severity=result.severity, **evidence, reason=reason)
    if result.check in _ECC_COUNTERS and gpu.ecc_enabled is False:
        # NVML answers NOT_SUPPORTED for the counters while ECC is off; ecc_mode judges that
        return make(result.check, result.entity, Verdict.SKIP, threshold=result.threshold,
                    unit=result.unit, severity=result.severity, **evidence,
                    reason="ECC is disabled on this GPU (NVML has no counters then): "
                           "ecc_mode judges it")
    if feature == "row_remapping" and gpu.mig_enabled is True:
        # nvml.h nvmlDeviceGetRemappedRows: not supported on MIG-enabled GPUs with active
        # instances (a real MIG A100 capture shows N/A); mig_mode judges the mode
        return make(result.check, result.entity, Verdict.SKIP, threshold=result.threshold,
                    unit=result.unit, severity=result.severity, **evidence,
                    reason="NVML does not report remapped rows while MIG is enabled with "
                           "active instances: mig_mode judges it")
    declared = (f"the GPU model declares {GPU_FEATURES[feature]} (gpu.features.{feature}: "
                f"true, {features.source})" if feature is not None
                else "every GPU nodegate judges reports it")
    return make(result.check, result.entity, Verdict.ERROR, threshold=result.threshold,
                unit=result.unit, severity=CRIT, **evidence,
                nvml_errors={name: "NVML_ERROR_NOT_SUPPORTED" for name in unsupported},
                reason=f"NVML_ERROR_NOT_SUPPORTED for {', '.join(unsupported)}, but {declared}")


def _memory(gpu: GpuState, profile: Profile) -> CheckResult:
    """Total memory as NVML reports it (bytes, probed as MiB) against ``gpu.memory_mib``:
    a board exposing a fraction of its HBM (a stack lost, a wrong SKU) must not pass."""
    expected = int(profile.data["gpu"]["memory_mib"])
    tolerance = profile.threshold(Key.GPU_MEMORY_DEVIATION_PCT_MAX)
    if tolerance is None:
        return make("gpu_memory", gpu.entity, Verdict.SKIP, threshold=expected, unit="MiB",
                    reason="the profile sets no gpu_memory_deviation_pct_max")
    bound = {"mib": expected, "deviation_pct_max": tolerance.value, "source": tolerance.source}
    if gpu.memory_total_mib is None:
        return make("gpu_memory", gpu.entity, Verdict.ERROR, threshold=bound, unit="MiB",
                    severity=HW, reason="nvmlDeviceGetMemoryInfo did not answer")
    deviation = abs(gpu.memory_total_mib - expected) / expected * 100.0
    ok = deviation <= tolerance.value
    return make("gpu_memory", gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=gpu.memory_total_mib, threshold=bound, unit="MiB", severity=HW,
                deviation_pct=round(deviation, 3),
                hint=None if ok else "total memory is not this model's: a lost HBM stack or "
                                     "another SKU than the profile's")


#: What each recovery action asks of the operator (nvml.h's descriptions of
#: nvmlDeviceGpuRecoveryAction_t); an action not listed is still a FAIL, named by its value.
RECOVERY_HINTS: dict[str, str] = {
    "gpu_reset": "the driver asks for a GPU reset: drain the node, stop the GPU's processes "
                 "and reset it (nvidia-smi -r)",
    "node_reboot": "the driver asks for a node reboot: drain the node and reboot it",
    "drain_p2p": "the driver asks to quiesce peer-to-peer (NVLink) traffic: drain the node, "
                 "then read the action again",
    "drain_and_reset": "the driver asks to drain the GPU and reset it: it runs at reduced "
                       "capacity until then",
}


def _recovery_action(gpu: GpuState, features: GpuFeatures) -> list[CheckResult]:
    """NVML's GPU recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``): the driver's own
    word that a GPU needs a reset, drain or reboot. Anything but NONE fails the GPU, naming
    the action, whatever the model. Where the model declares no such field
    (``gpu.features.recovery_action: false``) and the driver answers NOT_SUPPORTED the check
    does not apply and gives no result (as ``fabric_state`` before Hopper); where it declares
    one, NOT_SUPPORTED is ERROR (``_unmeasured``), and so is any other read error anywhere."""
    check, e = "gpu_recovery_action", gpu.entity
    threshold = "none"
    if gpu.recovery_action is None:
        unread = make(check, e, Verdict.ERROR, threshold=threshold, severity=CRIT,
                      reason="NVML did not give the recovery action")
        if "recovery_action" in gpu.read_errors:  # ERROR, the error named by _unmeasured
            return [unread]
        if not features.recovery_action:
            return []
        if "recovery_action" in gpu.unsupported:  # declared, so ERROR by _unmeasured
            return [make(check, e, Verdict.SKIP, threshold=threshold,
                         reason="recovery action not reported")]
        return [unread]
    name = nvml_codes.recovery_action_name(gpu.recovery_action)
    ok = gpu.recovery_action == nvml_codes.RECOVERY_ACTION_NONE
    return [make(check, e, Verdict.PASS if ok else Verdict.FAIL, measured=name,
                 threshold=threshold, severity=HW, nvml_value=gpu.recovery_action,
                 message=None if ok else f"NVML recovery action: {name}",
                 hint=None if ok else RECOVERY_HINTS.get(
                     name, f"the driver reports recovery action {name}: drain the node and "
                           "follow NVIDIA's recovery guidance for it"))]


def _retired_pages(gpu: GpuState, profile: Profile) -> CheckResult:
    result = against("retired_pages", gpu.entity, _retired(gpu),
                     profile.threshold(Key.RETIRED_PAGES_MAX), severity=HW,
                     pending=gpu.retired_pages_pending, sbe=gpu.retired_pages_sbe,
                     dbe=gpu.retired_pages_dbe)
    if result.verdict == Verdict.SKIP and gpu.remap_pending is not None:
        # Ampere and later answer NOT_SUPPORTED (seen on a real H200): the remap_* checks judge
        # the same memory there, so this SKIP is the check not applying, and says so
        return make("retired_pages", gpu.entity, Verdict.SKIP, threshold=result.threshold,
                    unit=result.unit, severity=result.severity,
                    reason="no page retirement on this GPU (Ampere and later remap rows "
                           "instead: see remap_pending, remap_failure, remap_uncorrectable)")
    if gpu.retired_pages_pending and result.verdict == Verdict.PASS:
        # a retirement waiting for a reset leaves the bad page in use until then
        return make("retired_pages", gpu.entity, Verdict.FAIL, measured=result.measured,
                    threshold=result.threshold, unit=result.unit, severity=CRIT,
                    **{**result.evidence, "hint": "page retirement pending: reset the GPU"})
    return result


def _retired(gpu: GpuState) -> int | None:
    if gpu.retired_pages_sbe is None and gpu.retired_pages_dbe is None:
        return None
    return (gpu.retired_pages_sbe or 0) + (gpu.retired_pages_dbe or 0)


def _pcie_link(gpu: GpuState, profile: Profile) -> CheckResult:
    """The link the GPU is able to train (NVML's link max generation, the lower of the GPU's
    and the slot's) against ``pcie.gen``, and the current width against ``pcie.width``. The
    current generation is evidence only: an idle GPU trains it down to save power (Gen1 on
    a healthy H100), so it is judged under load (``pcie_gen_under_load``)."""
    want_gen, want_width = int(profile.data["pcie"]["gen"]), int(profile.data["pcie"]["width"])
    expected = f"Gen{want_gen} x{want_width}"
    missing = [name for name, value in (("max link generation", gpu.pcie_gen_max),
                                        ("current link width", gpu.pcie_width))
               if value is None]
    if gpu.pcie_gen_max is None or gpu.pcie_width is None:
        return make("pcie_link", gpu.entity, Verdict.ERROR, threshold=expected, severity=HW,
                    reason=f"NVML did not report the {' and '.join(missing)}",
                    current_gen=gpu.pcie_gen, gpu_max_gen=gpu.pcie_gen_gpu_max,
                    max_width=gpu.pcie_width_max)
    measured = f"Gen{gpu.pcie_gen_max} x{gpu.pcie_width}"
    ok = gpu.pcie_gen_max >= want_gen and gpu.pcie_width >= want_width
    hint = None
    if not ok:
        hint = "link trains below the profile: reseat the GPU or check the riser/retimer"
        if gpu.pcie_gen_gpu_max is not None and gpu.pcie_gen_gpu_max >= want_gen > gpu.pcie_gen_max:
            hint = "the GPU can train the profile's gen but the link cannot: check slot/riser"
    return make("pcie_link", gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=measured, threshold=expected, severity=HW, hint=hint,
                current_gen=gpu.pcie_gen, gpu_max_gen=gpu.pcie_gen_gpu_max,
                max_width=gpu.pcie_width_max)


def _clock_events(gpu: GpuState) -> CheckResult:
    if gpu.clock_event_reasons is None:
        return make("clock_events", gpu.entity, Verdict.SKIP, reason="not reported")
    mask = gpu.clock_event_reasons
    active = clock_event_names(mask)
    fatal = clock_event_names(mask & CLOCK_EVENTS_FATAL)
    return make("clock_events", gpu.entity, Verdict.FAIL if fatal else Verdict.PASS,
                measured=",".join(active) or "none", threshold="no HW slowdown/thermal/brake",
                severity=HW, mask=f"0x{mask:x}", fatal=fatal or None)


def _power_limit(gpu: GpuState, profile: Profile) -> CheckResult:
    """The enforced limit against the profile's: one figure for the model, or the figures of
    the board SKU (``power_limits_by_sku``, keyed by PCI subsystem id) where one is listed."""
    p_gpu = profile.data["gpu"]
    sku = next((s for s in p_gpu.get("power_limits_by_sku") or []
                if gpu.pci_subsystem_id is not None
                and int(s["pci_subsystem_id"]) == gpu.pci_subsystem_id), None)
    accepted = [float(w) for w in sku["power_limit_w"]] if sku else [
        float(p_gpu["power_limit_w"])]
    threshold: float | str = accepted[0] if len(accepted) == 1 else " or ".join(
        f"{w:g}" for w in accepted)
    extra = {"sku": f"0x{gpu.pci_subsystem_id:04X}", "sku_source": sku["source"]} if sku else {}
    if gpu.power_limit_w is None:
        return make("power_limit", gpu.entity, Verdict.SKIP, threshold=threshold, unit="W",
                    reason="power limit not reported")
    measured = gpu.power_limit_w
    ok = any(abs(measured - w) < 1.0 for w in accepted)
    return make("power_limit", gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=measured, threshold=threshold, unit="W", severity=CRIT,
                default_limit_w=gpu.power_default_limit_w, **extra)


def _idle_temperature(gpu: GpuState, profile: Profile) -> CheckResult:
    if gpu.utilization_pct is not None and gpu.utilization_pct > IDLE_UTILIZATION_PCT:
        return make("idle_temperature", gpu.entity, Verdict.SKIP,
                    reason=f"GPU busy ({gpu.utilization_pct}% utilization)")
    return against("idle_temperature", gpu.entity, gpu.temperature_c,
                   profile.threshold(Key.GPU_TEMP_IDLE_MAX_C), severity=HW,
                   slowdown_c=gpu.slowdown_temp_c)


def _foreign_processes(gpu: GpuState) -> CheckResult:
    if "processes" in gpu.unsupported or "processes" in gpu.read_errors:
        # an unread process list is not an empty one
        return make("foreign_processes", gpu.entity, Verdict.SKIP, threshold=0,
                    unit="processes", reason="process list not reported by this GPU/driver")
    procs = [{"pid": p.pid, "name": p.name, "used_memory_mib": p.used_memory_mib}
             for p in gpu.processes]
    verdict = Verdict.WARN if procs else Verdict.PASS
    return make("foreign_processes", gpu.entity, verdict, measured=len(procs), threshold=0,
                unit="processes", severity=Severity.INFO, processes=procs or None,
                note="load checks skip GPUs held by other processes" if procs else None)


#: The fabric health mask's fields as nvml.h packs them (decoded in ``nvml_codes``).
fabric_health_problems = nvml_codes.fabric_health_problems


def _fabric(gpu: GpuState, profile: Profile) -> CheckResult:
    if gpu.fabric_state is None:
        # only reached where the model declares GPU fabric info: ``_unmeasured`` makes this
        # ERROR, naming NVML's answer
        return make("fabric_state", gpu.entity, Verdict.SKIP,
                    reason="GPU fabric info not reported by this GPU/driver")
    name = FABRIC_STATE_NAMES.get(gpu.fabric_state, str(gpu.fabric_state))
    problems = fabric_health_problems(gpu.fabric_health_mask or 0)
    ok = gpu.fabric_state == FABRIC_STATE_COMPLETED and gpu.fabric_status == 0 and not problems
    measured = f"{name}/status={gpu.fabric_status}"
    if problems:
        measured += "/" + ",".join(problems)
    return make("fabric_state", gpu.entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=measured, threshold="completed/status=0/healthy", severity=CRIT,
                health_mask=None if gpu.fabric_health_mask is None
                else f"0x{gpu.fabric_health_mask:x}",
                message=None if ok else _nvlsm_cause(name, profile),
                hint=None if ok else "is nvidia-fabricmanager running at the driver's version? "
                                     "(CUDA error 802 otherwise)")


def _nvlsm_cause(state: str, profile: Profile) -> str | None:
    """Name NVLSM where it is the likely cause: on NVLink 5 boards (the profile's
    ``driver.nvlsm``) Fabric Manager registers the GPUs only with the NVLink subnet manager
    beside it and, from FM 570, ``ib_umad`` loaded; without them every GPU stays In Progress
    (or Not Started) while everything else looks up. Elsewhere the hint about FM suffices."""
    if not profile.data["driver"].get("nvlsm", False) or state not in ("in_progress",
                                                                         "not_started"):
        return None
    what = "registration in progress" if state == "in_progress" else "not started"
    # NVLSM first: the report's table cuts the note to its first few dozen characters
    return (f"NVLSM/ib_umad missing? fabric {what}: on NVLink 5 boards Fabric Manager needs "
            "NVLSM (nvlsm) running beside it and ib_umad loaded (CUDA error 802 until the "
            "fabric completes)")


def _link_speed(link: NvLinkState, entity: str, profile: Profile) -> CheckResult:
    """One active link's speed (NVML, MB/s) against the GPU layer's per-link speed: the
    generation's figure, not the link count (H100 and B200 both have 18 links; NVML reports
    26562 MB/s a link on NVLink 4 and 53125 on NVLink 5). A link trained below it carries
    less than the board was bought for while every state reads "active"."""
    gbps = float(profile.data["nvlink"]["link_gbps"])
    threshold = {"min": gbps * 1000.0,
                 "source": f"gpu layer nvlink.link_gbps: {gbps:g} GB/s a link, NVLink "
                           f"{profile.data['nvlink']['generation']}"}
    if link.speed_mbps is None:
        return make("nvlink_speed", entity, Verdict.SKIP, threshold=threshold, unit="MB/s",
                    reason="link speed not reported")
    ok = link.speed_mbps >= gbps * 1000.0
    return make("nvlink_speed", entity, Verdict.PASS if ok else Verdict.FAIL,
                measured=link.speed_mbps, threshold=threshold, unit="MB/s", severity=HW,
                remote=link.remote_bus_id,
                hint=None if ok else "the link trained below its generation's speed: reseat "
                                     "or replace the GPU baseboard / NVLink cable, then reset")


def _nvlinks(gpu: GpuState, profile: Profile,
             features: GpuFeatures | None = None) -> list[CheckResult]:
    """Each expected link active at an ``nvmlNvlinkVersion_t`` the model declares
    (``gpu.features.nvlink_versions``: real drivers return more than one for one generation)."""
    expected_links = profile.data["nvlink"]["links_per_gpu"]
    generation = profile.data["nvlink"]["generation"]
    accepted = (features or GpuFeatures.of(profile.data["gpu"])).nvlink_versions
    wanted = f"active, NVLink {generation}"
    th = profile.threshold
    by_link = {link.link: link for link in gpu.nvlinks}
    out = []
    for index in range(expected_links):
        entity = f"{gpu.entity}.link{index}"
        link = by_link.get(index)
        if link is None:
            error = gpu.read_errors.get(f"nvlink{index}.state")
            if error is not None:
                out.append(make("nvlink_state", entity, Verdict.ERROR, threshold=wanted,
                                severity=HW, nvml_errors={f"nvlink{index}.state": error},
                                reason=f"nvmlDeviceGetNvLinkState: {error}: the link did not "
                                       "answer, which says nothing about whether it is up"))
            else:
                out.append(make("nvlink_state", entity, Verdict.FAIL, measured="absent",
                                threshold=wanted, severity=HW,
                                reason="nvmlDeviceGetNvLinkState answered that this GPU has "
                                       "no such link (NOT_SUPPORTED / INVALID_ARGUMENT)"))
            continue
        if not link.active:
            out.append(make("nvlink_state", entity, Verdict.FAIL, measured="inactive",
                            threshold=wanted, severity=HW, remote=link.remote_bus_id))
            continue
        found = nvml_codes.NVLINK_VERSIONS.get(link.version_enum or 0)
        name = f"{found[0]}_{found[1]}" if found else None
        if link.generation is None or name is None:
            out.append(make("nvlink_state", entity, Verdict.ERROR, threshold=wanted,
                            severity=HW, remote=link.remote_bus_id,
                            nvml_version_enum=link.version_enum,
                            reason="NVLink version unreadable or an nvmlNvlinkVersion_t value "
                                   "this nvidia-ml-py does not know"))
        else:
            ok = name in accepted if accepted else link.generation == generation
            out.append(make("nvlink_state", entity, Verdict.PASS if ok else Verdict.FAIL,
                            measured=f"active, NVLink {link.generation}", threshold=wanted,
                            severity=HW, remote=link.remote_bus_id,
                            nvml_version_enum=link.version_enum,
                            nvml_version=f"NVML_NVLINK_VERSION_{name}",
                            accepted=None if ok else [f"NVML_NVLINK_VERSION_{v}"
                                                      for v in accepted] or None))
        out.append(_link_speed(link, entity, profile))
        out.append(against("nvlink_crc_errors", entity, link.crc_errors,
                           th(Key.NVLINK_CRC_ERRORS_MAX), fail=Verdict.WARN,
                           severity=Severity.WARNING, flit=link.crc_flit, data=link.crc_data))
        out.append(against("nvlink_replay_errors", entity, link.replay,
                           th(Key.NVLINK_REPLAY_ERRORS_MAX), fail=Verdict.WARN,
                           severity=Severity.WARNING))
        out.append(against("nvlink_recovery_errors", entity, link.recovery,
                           th(Key.NVLINK_RECOVERY_ERRORS_MAX), severity=HW))
    return out
