"""NVMe drives and the array: SMART health per device, fio throughput on the array.

The SMART checks read nvme-cli's log (``nodegate.probes.nvme``) and decide per controller:

* ``nvme_critical_warning``: any bit set FAILs, named in words (NVMe base spec byte 0).
* ``nvme_spare``: Available Spare against the drive's own Available Spare Threshold.
* ``nvme_media_errors``, ``nvme_wear`` (Percentage Used), ``nvme_temperature``: against the
  profile; temperature falls back to the drive's own warning threshold (id-ctrl WCTEMP).
* ``nvme_unsafe_shutdowns``: growth since the previous report that saw the same serial
  (device names move between boots; serials do not).
* ``nvme_firmware``: as pinned (``nvme.firmware``), else identical across drives of one model.
* ``nvme_namespace_size``: as ``nvme.drive.namespace_bytes`` for that model, else no smaller
  than the largest namespace of the same model.

fio floors are the profile's explicit thresholds when set, else the drive datasheet figure
(``nvme.drive``) x the array's disk count x ``nvme.fio.efficiency``, with both sources.
A device or run that could not be read is ERROR; no number lives here. What could not be
read fails only the checks that need it: a SMART log that could not be read (or one missing a
field) never touches the firmware and namespace checks, which come from id-ctrl and
``nvme list``; an id-ctrl that could not be read fails the firmware check (and the temperature
check where only the drive's WCTEMP would have given its limit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nodegate.judge.common import against, make, threshold_repr
from nodegate.probes.fio import FioRun
from nodegate.probes.nvme import KELVIN_OFFSET, NvmeDevice
from nodegate.profiles import Profile
from nodegate.profiles.loader import Threshold
from nodegate.profiles.threshold_keys import Key
from nodegate.results import CheckResult, Severity, Verdict

CRIT = Severity.CRITICAL
WARN = Severity.WARNING
#: the SMART checks, one result each per controller
SMART_CHECKS = ("nvme_critical_warning", "nvme_spare", "nvme_media_errors", "nvme_wear",
                "nvme_temperature", "nvme_unsafe_shutdowns")
ALL_CHECKS = (*SMART_CHECKS, "nvme_firmware", "nvme_namespace_size")
#: fio workload name -> (check, threshold key, drive datasheet key, unit)
FIO_CHECKS: dict[str, tuple[str, Key, str, str]] = {
    "seq_read": ("nvme_seq_read", Key.FIO_SEQ_READ_GBPS_MIN, "seq_read_gbps", "GB/s"),
    "seq_write": ("nvme_seq_write", Key.FIO_SEQ_WRITE_GBPS_MIN, "seq_write_gbps", "GB/s"),
    "rand_read": ("nvme_rand_read", Key.FIO_RAND_READ_KIOPS_MIN, "rand_read_kiops", "kIOPS"),
}


def judge_unreadable(problem: str, *, checks: Sequence[str] = SMART_CHECKS,
                     entity: str = "node") -> list[CheckResult]:
    """Nothing could be read (``nvme list`` failed): every check ERRORs on the node."""
    return [make(check, entity, Verdict.ERROR, severity=CRIT, reason=problem)
            for check in checks]


def judge_devices(devices: Sequence[NvmeDevice], profile: Profile,
                  previous: Mapping[str, int] | None = None) -> list[CheckResult]:
    """Every SMART, firmware and namespace check for ``devices``. ``previous`` maps a serial
    to its unsafe shutdown count in the previous report that saw it."""
    nvme = profile.section("nvme")
    out: list[CheckResult] = []
    for dev in devices:
        ident: dict[str, Any] = {"model": dev.model or None, "serial": dev.serial or None}
        if dev.smart is None:
            out += [make(check, dev.controller, Verdict.ERROR, severity=CRIT,
                         reason=dev.problem or "SMART log not read", **ident)
                    for check in SMART_CHECKS]
            continue
        out += _smart(dev, profile, previous or {}, ident)
    if devices:
        out += _firmware(devices, nvme.get("firmware"))
        out += _namespace_sizes(devices, nvme.get("drive"))
    return out


def _smart(dev: NvmeDevice, profile: Profile, previous: Mapping[str, int],
           ident: dict[str, Any]) -> list[CheckResult]:
    smart = dev.smart
    assert smart is not None
    entity = dev.controller
    bits = smart.warnings()
    if smart.critical_warning is None:
        out = [make("nvme_critical_warning", entity, Verdict.ERROR, severity=CRIT,
                    reason="critical_warning missing from the SMART log (or not one byte)",
                    **ident)]
    else:
        out = [make("nvme_critical_warning", entity, Verdict.FAIL if bits else Verdict.PASS,
                    measured=f"0x{smart.critical_warning:02x}", threshold="0x00",
                    severity=CRIT, warnings=bits or None, **ident)]
    if smart.available_spare is None or smart.spare_threshold is None:
        out.append(make("nvme_spare", entity, Verdict.ERROR, severity=CRIT,
                        reason="available spare or its threshold missing from the SMART log",
                        **ident))
    else:
        ok = smart.available_spare >= smart.spare_threshold  # "falls below" (NVMe spec)
        out.append(make("nvme_spare", entity, Verdict.PASS if ok else Verdict.FAIL,
                        measured=smart.available_spare, unit="%", severity=CRIT,
                        threshold={"min": smart.spare_threshold,
                                   "source": "drive: SMART Available Spare Threshold"},
                        **ident))
    media, wear, temperature, unsafe = (profile.threshold(key) for key in (
        Key.NVME_MEDIA_ERRORS_MAX, Key.NVME_PERCENTAGE_USED_MAX, Key.NVME_TEMPERATURE_MAX_C,
        Key.NVME_UNSAFE_SHUTDOWNS_GROWTH_MAX))
    #: check, its value in the SMART log, what the log lacks when it is None, the judge
    judged: list[tuple[str, int | None, str, Severity, Callable[[int], CheckResult]]] = [
        ("nvme_media_errors", smart.media_errors, "field", CRIT,
         lambda n: _counter("nvme_media_errors", entity, n, media, ident)),
        ("nvme_wear", smart.percentage_used, "field", WARN,
         lambda n: _counter("nvme_wear", entity, n, wear, ident, fail=Verdict.WARN,
                            severity=WARN)),
        ("nvme_temperature", smart.temperature_c, "temperature", WARN,
         lambda c: _temperature(dev, c, temperature, ident)),
        ("nvme_unsafe_shutdowns", smart.unsafe_shutdowns, "unsafe_shutdowns", WARN,
         lambda n: _unsafe(dev, n, unsafe, previous, ident)),
    ]
    for check, value, what, severity, judge in judged:
        out.append(judge(value) if value is not None else
                   make(check, entity, Verdict.ERROR, severity=severity,
                        reason=f"{what} missing from the SMART log", **ident))
    return out


def _counter(check: str, entity: str, value: int, threshold: Threshold | None,
             ident: dict[str, Any], *, fail: Verdict = Verdict.FAIL,
             severity: Severity = CRIT) -> CheckResult:
    return against(check, entity, value, threshold, fail=fail, severity=severity,
                   reason_missing=f"no threshold for {check} in the profile", **ident)


def _temperature(dev: NvmeDevice, celsius: int, threshold: Threshold | None,
                 ident: dict[str, Any]) -> CheckResult:
    raw: dict[str, Any] = {"temperature_k": celsius + KELVIN_OFFSET}  # as the log gave it
    if threshold is not None:
        return against("nvme_temperature", dev.controller, celsius, threshold, severity=WARN,
                       **raw, **ident)
    if dev.wctemp_k is None and dev.ident_problem:  # the limit could not be read
        return make("nvme_temperature", dev.controller, Verdict.ERROR, measured=celsius,
                    unit="C", severity=WARN, reason="no nvme_temperature_max_c in the profile "
                    f"and id-ctrl (the drive's warning temperature) not read: "
                    f"{dev.ident_problem}", **raw, **ident)
    if dev.wctemp_k is None:
        return make("nvme_temperature", dev.controller, Verdict.SKIP, measured=celsius,
                    unit="C", reason="no nvme_temperature_max_c in the profile and the drive "
                    "reports no warning temperature (id-ctrl wctemp)", **raw, **ident)
    limit = dev.wctemp_k - KELVIN_OFFSET
    return make("nvme_temperature", dev.controller,
                Verdict.PASS if celsius < limit else Verdict.FAIL, measured=celsius, unit="C",
                threshold={"below": limit, "source": "drive: id-ctrl WCTEMP (warning "
                           "composite temperature threshold)"}, severity=WARN, **raw, **ident)


def _unsafe(dev: NvmeDevice, count: int, threshold: Threshold | None,
            previous: Mapping[str, int], ident: dict[str, Any]) -> CheckResult:
    before = previous.get(dev.serial) if dev.serial else None
    evidence: dict[str, Any] = {"unsafe_shutdowns": count, "previous": before, **ident}
    if before is None:
        return make("nvme_unsafe_shutdowns", dev.controller, Verdict.PASS, measured=0,
                    unit="count", threshold=threshold_repr(threshold) if threshold else None,
                    note="first report with this serial: its count is the baseline",
                    **evidence)
    growth = max(count - before, 0)  # a replaced controller restarts from 0
    return against("nvme_unsafe_shutdowns", dev.controller, growth, threshold,
                   fail=Verdict.WARN, severity=WARN,
                   reason_missing="no nvme_unsafe_shutdowns_growth_max in the profile",
                   **evidence)


def previous_unsafe_shutdowns(reports: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """serial -> unsafe shutdown count from the newest report (``reports`` newest first)
    that judged that serial."""
    out: dict[str, int] = {}
    for report in reports:  # earlier reports are data: anything malformed is skipped
        results = report.get("results") if isinstance(report, Mapping) else None
        for result in results if isinstance(results, list) else []:
            if not isinstance(result, Mapping) or result.get("check") != "nvme_unsafe_shutdowns":
                continue
            evidence = result.get("evidence")
            if not isinstance(evidence, Mapping):
                continue
            serial, count = evidence.get("serial"), evidence.get("unsafe_shutdowns")
            if isinstance(serial, str) and type(count) is int and serial not in out:
                out[serial] = count
    return out


def _by_model(devices: Sequence[NvmeDevice]) -> dict[str, list[NvmeDevice]]:
    """Devices per model, whatever their SMART log said: identity and namespaces come from
    id-ctrl and ``nvme list``, not from it."""
    groups: dict[str, list[NvmeDevice]] = defaultdict(list)
    for dev in devices:
        groups[dev.model].append(dev)
    return groups


def _firmware(devices: Sequence[NvmeDevice], pinned: Sequence[str] | None) -> list[CheckResult]:
    out = []
    for model, group in _by_model(devices).items():
        revisions = sorted({d.firmware for d in group if _firmware_read(d)})
        for dev in group:
            ident: dict[str, Any] = {"model": model or None, "serial": dev.serial or None}
            if not _firmware_read(dev):
                out.append(make("nvme_firmware", dev.controller, Verdict.ERROR, severity=WARN,
                                reason=dev.ident_problem or "no firmware revision in id-ctrl "
                                "or nvme list", **ident))
            elif pinned:
                ok = dev.firmware in pinned
                out.append(make("nvme_firmware", dev.controller,
                                Verdict.PASS if ok else Verdict.FAIL, measured=dev.firmware,
                                threshold=list(pinned), severity=WARN, **ident))
            else:
                ok = len(revisions) == 1
                out.append(make("nvme_firmware", dev.controller,
                                Verdict.PASS if ok else Verdict.FAIL, measured=dev.firmware,
                                threshold="identical across drives of one model",
                                severity=WARN, revisions=None if ok else revisions, **ident))
    return out


def _firmware_read(dev: NvmeDevice) -> bool:
    return bool(dev.firmware) and dev.ident_problem is None


def _namespace_sizes(devices: Sequence[NvmeDevice],
                     drive: Mapping[str, Any] | None) -> list[CheckResult]:
    out = []
    expected_model = (drive or {}).get("model")
    expected = (drive or {}).get("namespace_bytes")
    for model, group in _by_model(devices).items():
        sizes = [ns.size_bytes for d in group for ns in d.namespaces if ns.size_bytes]
        largest = max(sizes) if sizes else None
        for dev in group:
            for ns in dev.namespaces:
                entity = ns.path.rsplit("/", 1)[-1]
                ident: dict[str, Any] = {"model": model or None, "serial": dev.serial or None}
                if ns.size_bytes is None:
                    out.append(make("nvme_namespace_size", entity, Verdict.ERROR,
                                    severity=WARN, reason="nvme list gives no size", **ident))
                elif expected and model == expected_model:
                    out.append(make("nvme_namespace_size", entity,
                                    Verdict.PASS if ns.size_bytes >= expected else Verdict.FAIL,
                                    measured=ns.size_bytes, unit="bytes", severity=WARN,
                                    threshold={"min": expected,
                                               "source": drive.get("source") if drive else None},
                                    **ident))
                else:
                    ok = largest is not None and ns.size_bytes >= largest
                    out.append(make("nvme_namespace_size", entity,
                                    Verdict.PASS if ok else Verdict.FAIL, measured=ns.size_bytes,
                                    unit="bytes", severity=WARN,
                                    threshold={"min": largest, "source": "the largest namespace "
                                               "of the same model on this node"}, **ident))
    return out


# --- fio ------------------------------------------------------------------------------------


def fio_floor(profile: Profile, workload: str, disks: int) -> tuple[float | None, str, str]:
    """(floor, unit, source) for ``workload``: the explicit threshold, else the datasheet
    figure x disks x efficiency; (None, unit, why) when the profile gives neither."""
    _, key, drive_key, unit = FIO_CHECKS[workload]
    explicit = profile.threshold(key)
    if explicit is not None:
        return explicit.value, explicit.unit, explicit.source
    nvme = profile.section("nvme")
    drive = nvme.get("drive") or {}
    fio = nvme.get("fio") or {}
    per_drive, efficiency = drive.get(drive_key), fio.get("efficiency")
    if per_drive is None or efficiency is None or disks < 1:
        return None, unit, (f"no {key} and no nvme.drive.{drive_key} x nvme.fio.efficiency "
                            "in the profile")
    floor = float(per_drive) * disks * float(efficiency)
    return floor, unit, (f"{per_drive:g} {unit} per drive ({drive.get('model')}; "
                         f"{drive.get('source')}) x {disks} disks x {efficiency:g} "
                         f"({fio.get('source', 'no source given')})")


def judge_fio(runs: Sequence[FioRun], profile: Profile, *, entity: str,
              disks: int) -> list[CheckResult]:
    """One result per workload on the array (``entity``: its mount point)."""
    out = []
    for run in runs:
        check, _, _, unit = FIO_CHECKS[run.job.name]
        evidence: dict[str, Any] = {"rw": run.job.rw, "bs": run.job.bs, "iodepth": run.job.iodepth,
                    "numjobs": run.job.numjobs, "fio_version": run.fio_version or None,
                    "runtime_ms": run.runtime_ms}
        if run.problem is not None:
            out.append(make(check, entity, Verdict.ERROR, severity=CRIT, reason=run.problem,
                            **evidence))
            continue
        value = run.gbps if unit == "GB/s" else run.kiops
        floor, floor_unit, source = fio_floor(profile, run.job.name, disks)
        measured = round(value, 3) if value is not None else None
        if floor is None:
            out.append(make(check, entity, Verdict.SKIP, measured=measured, unit=unit,
                            reason=source, **evidence))
            continue
        ok = measured is not None and measured >= floor
        out.append(make(check, entity, Verdict.PASS if ok else Verdict.FAIL, measured=measured,
                        threshold={"min": round(floor, 3), "source": source}, unit=floor_unit,
                        severity=CRIT, **evidence))
    return out
