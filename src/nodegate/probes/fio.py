"""fio on the NVMe array: sequential read, sequential write, random 4 KiB read.

Each job is one fio run, direct I/O (``--direct=1``, the page cache would measure memory),
time-bounded (``--time_based --runtime``; no ``--ramp_time``: fio 3.33 then counts the
ramp's bytes in ``bw_bytes`` but not its time, an inflated figure seen on the md VM), on a
file under the array's mount, with
``--output-format=json``; the JSON is parsed, never the text. The three workloads are the
ones drive datasheets quote (128 KiB sequential at a deep queue, 4 KiB random read), so the
floors can be the datasheet figures times the drive count, with a margin.

Field meanings are fio's (HOWTO, "JSON output"): per job ``read``/``write`` hold
``bw_bytes`` (bytes/s; fio before 3.4 prints only ``bw``, KiB/s), ``iops`` and ``runtime``
(ms); ``error`` is the job's errno, 0 when it ran clean. A job that errs, a run that exits
non-zero, times out or prints no JSON gives a FioRun with ``problem``: the judge makes it
ERROR, never a figure.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from nodegate.probes.nvme import Runner, ToolFailed, local_runner, parse_json_text

#: bytes per KiB, for fio's ``bw`` field (KiB/s) when ``bw_bytes`` is absent (fio < 3.4)
KIB = 1024


@dataclass(frozen=True)
class FioJob:
    """One workload: name (a check's suffix), fio ``rw``, block size, queue depth, jobs."""

    name: str
    rw: str
    bs: str
    iodepth: int
    numjobs: int

    @property
    def direction(self) -> str:
        return "write" if "write" in self.rw else "read"


#: The workloads, as drive datasheets quote them.
JOBS: tuple[FioJob, ...] = (
    FioJob("seq_read", "read", "128k", 32, 4),
    FioJob("seq_write", "write", "128k", 32, 4),
    FioJob("rand_read", "randread", "4k", 64, 8),
)


@dataclass(frozen=True)
class FioRun:
    job: FioJob
    bytes_per_s: float | None = None
    iops: float | None = None
    runtime_ms: int | None = None
    fio_version: str = ""
    problem: str | None = None
    argv: tuple[str, ...] = ()

    @property
    def gbps(self) -> float | None:
        return None if self.bytes_per_s is None else self.bytes_per_s / 1e9

    @property
    def kiops(self) -> float | None:
        return None if self.iops is None else self.iops / 1e3


def fio_argv(job: FioJob, directory: str, *, runtime_s: int, size_mib: int,
             ioengine: str = "libaio") -> list[str]:
    """The fio command line for ``job`` on a file in ``directory`` (the array's mount)."""
    return ["fio", f"--name=nodegate-{job.name}", f"--directory={directory}",
            f"--filename=nodegate-fio.{job.name.split('_')[0]}", f"--rw={job.rw}",
            f"--bs={job.bs}", f"--iodepth={job.iodepth}", f"--numjobs={job.numjobs}",
            f"--size={size_mib}M", f"--ioengine={ioengine}", "--direct=1", "--time_based",
            f"--runtime={runtime_s}", "--group_reporting",
            "--invalidate=1", "--output-format=json"]


def parse_fio(doc: Any, job: FioJob) -> FioRun:
    """A FioRun from fio's JSON: the group-reported job's figures in ``job.direction``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        return FioRun(job, problem="fio JSON holds no jobs")
    version = str(doc.get("fio version", ""))
    entry = doc["jobs"][0]
    errno = entry.get("error", 0)
    if errno:
        return FioRun(job, fio_version=version,
                      problem=f"fio job {entry.get('jobname', '?')} error {errno} "
                              f"({_strerror(errno)})")
    side = entry.get(job.direction)
    if not isinstance(side, dict):
        return FioRun(job, fio_version=version, problem=f"fio JSON has no {job.direction} block")
    if "bw_bytes" in side:
        rate = float(side["bw_bytes"])
    elif "bw" in side:
        rate = float(side["bw"]) * KIB
    else:
        return FioRun(job, fio_version=version, problem="fio JSON has no bw_bytes or bw")
    runtime = int(side.get("runtime", 0))
    ios = int(side.get("total_ios", 0))
    if runtime <= 0 or ios <= 0:
        return FioRun(job, fio_version=version,
                      problem=f"fio did no {job.direction} I/O (runtime {runtime} ms, "
                              f"{ios} I/Os)")
    return FioRun(job, bytes_per_s=rate, iops=float(side.get("iops", 0.0)),
                  runtime_ms=runtime, fio_version=version)


def _strerror(errno: Any) -> str:
    import os

    try:
        return os.strerror(int(errno))
    except (TypeError, ValueError):
        return "unknown"


def run_job(job: FioJob, directory: str, *, runtime_s: int, size_mib: int,
            run: Runner = local_runner, slack_s: float = 60.0) -> FioRun:
    """Run one workload; every way it can go wrong comes back as ``problem``. A missing
    ``fio`` raises ToolMissing (exit 3)."""
    from nodegate.probes.nvme import ToolMissing

    argv = fio_argv(job, directory, runtime_s=runtime_s, size_mib=size_mib)
    timeout = runtime_s + slack_s  # laying out the file, ramp, teardown
    try:
        proc = run(argv, timeout)
    except FileNotFoundError:
        raise ToolMissing("fio", "fio") from None
    except subprocess.TimeoutExpired:
        return FioRun(job, problem=f"fio did not finish within {timeout:g} s", argv=tuple(argv))
    if proc.returncode == 127:
        raise ToolMissing("fio", "fio", " (exit 127)")
    try:
        doc = parse_json_text(proc.stdout, what="fio")
    except ToolFailed as exc:
        said = " | ".join((proc.stderr or "").strip().splitlines()[-2:])
        return FioRun(job, problem=f"fio exit {proc.returncode}: {said or exc}",
                      argv=tuple(argv))
    result = parse_fio(doc, job)
    if proc.returncode != 0 and result.problem is None:
        err = " | ".join((proc.stderr or "").strip().splitlines()[-2:])
        result = FioRun(job, fio_version=result.fio_version,
                        problem=f"fio exit {proc.returncode}: {err or 'no message'}")
    return FioRun(job, result.bytes_per_s, result.iops, result.runtime_ms, result.fio_version,
                  result.problem, tuple(argv))
