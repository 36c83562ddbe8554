"""Storage and DCGM phases: probes measure, ``judge.storage`` / ``judge.dcgm`` decide.

* ``run_nvme_health`` (quick level, host group): nvme-cli's SMART log per device, when the
  profile asks for it (``nvme.smart: true``). No torch, a few nvme-cli calls per drive.
* ``run_fio`` (standard and acceptance): fio on the array's mount, when the profile has an
  ``nvme.fio`` block.
* ``run_dcgm`` (the levels ``dcgm.diag_level`` names): ``dcgmi diag -r <n> -j`` when dcgmi is
  installed; SKIP with the reason when it is not.

nvme-cli or fio missing where the profile asks for them is exit 3 naming the package
(``ToolMissing``); a device that vanishes is ERROR on that device and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from nodegate.probes.nvme import Runner, local_runner
from nodegate.profiles import Profile
from nodegate.results import CheckResult

#: reports read back for the unsafe shutdown baseline: the newest few, as the counters' growth
#: check reads (each is parsed whole; the cron path has 0.5 s)
HISTORY_REPORTS = 4
DEFAULT_DCGM_TIMEOUT_S = 3600.0


def run_nvme_health(profile: Profile, *, report_dir: Path | None = None,
                    run: Runner = local_runner) -> list[CheckResult]:
    from nodegate.judge.storage import (
        ALL_CHECKS,
        judge_devices,
        judge_unreadable,
        previous_unsafe_shutdowns,
    )
    from nodegate.probes.nvme import ToolFailed, read_devices

    if not profile.section("nvme").get("smart"):
        return not_asked(ALL_CHECKS, "nvme.smart is not true: no SMART health read")
    try:
        devices = read_devices(run)
    except ToolFailed as exc:
        return judge_unreadable(str(exc), checks=ALL_CHECKS)
    if not devices:
        return judge_unreadable("nvme list shows no NVMe device", checks=ALL_CHECKS)
    from nodegate.report.history import recent_reports
    from nodegate.report.outputs import default_report_dir

    history = recent_reports(report_dir or default_report_dir(), HISTORY_REPORTS)
    return judge_devices(devices, profile, previous_unsafe_shutdowns(history))


FIO_CHECKS = ("nvme_seq_read", "nvme_seq_write", "nvme_rand_read")


def not_asked(checks: tuple[str, ...], reason: str) -> list[CheckResult]:
    """A SKIP per check the profile does not ask for, saying which declaration: the
    documented SKIP (never silence: the report shows the check was considered)."""
    from nodegate.judge.common import make
    from nodegate.results import Verdict

    return [make(check, "node", Verdict.SKIP, reason=reason) for check in checks]


def fio_settings(profile: Profile) -> tuple[int, int] | None:
    """(runtime_s, size_mib) when the profile asks for fio, else None."""
    fio = profile.section("nvme").get("fio")
    if not isinstance(fio, dict):
        return None
    from nodegate.probes.fio import DEFAULT_RUNTIME_S, DEFAULT_SIZE_MIB

    return (int(fio.get("runtime_s", DEFAULT_RUNTIME_S)),
            int(fio.get("size_mib", DEFAULT_SIZE_MIB)))


def planned_fio_s(profile: Profile) -> float:
    """Seconds the fio phase plans (``nodegate.load.plan`` reads the same)."""
    from nodegate.probes.fio import planned_seconds

    return planned_seconds(profile.section("nvme").get("fio"))


def preflight(profile: Profile, level: str) -> None:
    """Before any load starts: fio missing where the profile asks for it is exit 3 now, not
    after minutes of GPU phases."""
    from nodegate.probes.nvme import ToolMissing

    if level != "quick" and fio_settings(profile) is not None and shutil.which("fio") is None:
        raise ToolMissing("fio", "fio", " on PATH (the profile's nvme.fio asks for it)")


def run_fio(profile: Profile, *, run: Runner = local_runner,
            directory: str | None = None) -> list[CheckResult]:
    from nodegate.judge.storage import judge_fio
    from nodegate.probes.fio import JOBS, run_job

    settings = fio_settings(profile)
    if settings is None:
        return not_asked(FIO_CHECKS, "the profile has no nvme.fio block: fio not run")
    nvme = profile.section("nvme")
    target = directory or str(nvme.get("mountpoint", "/raid"))
    runtime_s, size_mib = settings
    runs = [run_job(job, target, runtime_s=runtime_s, size_mib=size_mib, run=run)
            for job in JOBS]
    with contextlib.suppress(OSError):  # test files hold nothing: never leave them behind
        run(["rm", "-f", *(f"{target}/nodegate-fio.{k}" for k in ("seq", "rand"))], 60.0)
    return judge_fio(runs, profile, entity=target, disks=int(nvme.get("devices") or 0))


def dcgm_level(profile: Profile, level: str) -> int:
    levels = profile.section("dcgm").get("diag_level") or {}
    return int(levels.get(level, 0))


def run_dcgm(profile: Profile, level: str, *, run: Runner = local_runner,
             which: str | None = None) -> list[CheckResult]:
    from nodegate.judge.dcgm import judge_absent, judge_diag
    from nodegate.probes.dcgm import run_diag
    from nodegate.probes.nvme import ToolFailed

    diag_level = dcgm_level(profile, level)
    if diag_level <= 0:
        return not_asked(("dcgm_diag",), f"dcgm.diag_level names no diagnostic at {level}")
    found = which if which is not None else shutil.which("dcgmi", path=os.environ.get("PATH"))
    if not found:
        return judge_absent("dcgmi not installed (the dcgm role installs DCGM; "
                            "profile dcgm.enabled)")
    timeout = float(profile.section("dcgm").get("timeout_s", DEFAULT_DCGM_TIMEOUT_S))
    try:
        diag = run_diag(diag_level, run=run, timeout_s=timeout)
    except ToolFailed as exc:
        from nodegate.judge.common import make
        from nodegate.judge.dcgm import SOURCE
        from nodegate.results import Severity, Verdict

        return [make("dcgm_diag", "node", Verdict.ERROR, severity=Severity.CRITICAL,
                     reason=str(exc), source=SOURCE)]
    return judge_diag(diag)
