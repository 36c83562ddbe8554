"""The RMA evidence bundle: one ``.tar.gz`` a vendor can act on, with a manifest.

``manifest.json`` (schema ``nodegate.rma/1``) holds the node, its chassis and BMC identity
where known, each GPU's serial, UUID, part number, VBIOS and InfoROM versions, the driver and
Fabric Manager versions, the failing results with their evidence, the remediation history and
why the node went to RMA. Beside it: ``kernel.log``, the kernel log lines around each GPU
event, and ``nvidia-bug-report.log.gz`` where ``nvidia-bug-report.sh`` is on PATH.

Every text that enters the archive passes ``nodegate.redaction.redact`` (the project's one
redaction place): URL userinfo and every credential this process read. What other programs
wrote (the kernel log lines, the bug report, decompressed and compressed again) passes
``redaction.redact_collected`` too: the node's own credential values
(``nodegate.node_secrets``: its nodegate environment and credential files, numeric-looking
values included), ``password=``-shaped values and SNMP communities; the manifest's
``redacted`` says how many of each kind were masked in each file, never the values.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_bytes, read_bytes
from nodegate.redaction import redact, redact_collected
from nodegate.report.model import format_timestamp

SCHEMA = "nodegate.rma/1"
MANIFEST = "manifest.json"
KERNEL_LOG = "kernel.log"
BUG_REPORT = "nvidia-bug-report.log.gz"
BUG_REPORT_TOOL = "nvidia-bug-report.sh"
#: Lines kept before and after each GPU event line of the kernel log.
CONTEXT_LINES = 5
#: A kernel log line nodegate reads as a GPU event (Xid, SXid, any NVRM line).
EVENT_LINE = re.compile(r"NVRM: |\bS?Xid\b|nvidia-nvswitch|fallen off the bus")
#: The GPU identity fields a manifest carries, in its order.
GPU_FIELDS = ("entity", "serial", "uuid", "board_part_number", "pci_bus_id", "vbios",
              "inforom_image", "inforom_ecc")

#: Runs ``nvidia-bug-report.sh --output-file PATH`` (tests pass a fake).
BugReportRunner = Callable[[Path], bool]


def kernel_context(text: str, *, around: int = CONTEXT_LINES) -> list[str]:
    """The lines within ``around`` lines of each GPU event line, in log order, each once."""
    lines = text.splitlines()
    keep: set[int] = set()
    for index, line in enumerate(lines):
        if EVENT_LINE.search(line):
            keep.update(range(max(0, index - around), min(len(lines), index + around + 1)))
    return [lines[i] for i in sorted(keep)]


def default_bug_report(path: Path, timeout_s: float = 600.0) -> bool:
    """Run NVIDIA's ``nvidia-bug-report.sh`` into ``path`` when the tool is on PATH."""
    tool = shutil.which(BUG_REPORT_TOOL)
    if tool is None:
        return False
    base = str(path)[: -len(".gz")] if str(path).endswith(".gz") else str(path)
    try:
        proc = subprocess.run([tool, "--output-file", base], capture_output=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and path.is_file()


def build_manifest(*, node: str, reason: str, now: dt.datetime,
                   gpus: Sequence[Mapping[str, Any]], failing: Sequence[Mapping[str, Any]],
                   history: Sequence[Mapping[str, Any]], chassis: Mapping[str, Any] | None,
                   bmc: Mapping[str, Any] | None, driver_version: str | None,
                   fabricmanager_version: str | None) -> dict[str, Any]:
    """The manifest as a dict (what is not known is null, never invented)."""
    return {
        "schema": SCHEMA,
        "node": node,
        "created_at": format_timestamp(now),
        "reason": reason,
        "chassis": dict(chassis) if chassis else None,
        "bmc": dict(bmc) if bmc else None,
        "driver_version": driver_version,
        "fabricmanager_version": fabricmanager_version,
        "gpus": [{key: gpu.get(key) for key in GPU_FIELDS} for gpu in gpus],
        "failing_results": [dict(r) for r in failing],
        "remediation_history": [dict(h) for h in history],
        "files": {},
    }


#: Room an RMA bundle needs in its folder before remediation acts: the manifest, the kernel
#: log's context and nvidia-bug-report's compressed output (a few MiB on an 8-GPU board).
MIN_ROOM = 64 * 1024 * 1024


def check_folder(folder: Path, *, key: str, room: int = 0) -> None:
    """Before remediation acts: ``folder`` is a folder (or can be made one), takes a file,
    and has ``room`` bytes free; else ConfigError (exit 2) naming it and ``key``. A folder
    that fills up between this check and the write is the one case left to the write's own
    error, after the act is recorded."""
    import contextlib
    import os

    from nodegate import fileio

    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ConfigError("not a folder (a file or a link is where the folder belongs)",
                          file=str(folder), key=key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".nodegate-write-check"
        fileio.preflight_file(probe)
        free = os.statvfs(folder)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=str(folder), key=key) from None
    except OSError as exc:
        raise ConfigError(f"cannot use the folder: {exc.strerror or exc}", file=str(folder),
                          key=key) from None
    finally:
        with contextlib.suppress(OSError):
            (folder / ".nodegate-write-check").unlink()
    left = free.f_bavail * free.f_frsize
    if left < room:
        raise ConfigError(f"{left} bytes free, {room} needed before remediation acts",
                          file=str(folder), key=key)


def write_bundle(path: Path, manifest: dict[str, Any], *, kernel_log: str | None = None,
                 bug_report: BugReportRunner | None = default_bug_report) -> Path:
    """Write the archive at ``path`` atomically (a temp file beside it, then a rename)."""
    from nodegate.node_secrets import node_secrets

    members: list[tuple[str, bytes]] = []
    files: dict[str, str] = {}
    # what other programs wrote is filtered for the node's own credentials too (values this
    # process never read), and the manifest says what was masked, by kind
    secrets = node_secrets()
    redacted: dict[str, dict[str, int]] = {}
    if kernel_log is not None:
        context = kernel_context(kernel_log)
        text, counts = redact_collected("\n".join(context) + "\n", secrets.values)
        members.append((KERNEL_LOG, text.encode()))
        files[KERNEL_LOG] = f"{len(context)} kernel log lines around the GPU events"
        redacted[KERNEL_LOG] = counts
    if bug_report is not None:
        with tempfile.TemporaryDirectory(prefix="nodegate-rma-") as scratch:
            out = Path(scratch) / BUG_REPORT
            if bug_report(out) and out.is_file():
                data, counts = _redacted_gzip(out, secrets.values)
                members.append((BUG_REPORT, data))
                files[BUG_REPORT] = f"output of {BUG_REPORT_TOOL}, redacted"
                redacted[BUG_REPORT] = counts
            else:
                files[BUG_REPORT] = f"not included: {BUG_REPORT_TOOL} not on PATH or failed"
    manifest = {**manifest, "files": files,
                "redacted": {name: dict(sorted(c.items())) for name, c in redacted.items()}}
    if secrets.problems:
        manifest["redaction_problems"] = list(secrets.problems)
    text = redact(json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n")
    members.insert(0, (MANIFEST, text.encode()))
    buffer = io.BytesIO()
    stamp = int(dt.datetime.now(dt.timezone.utc).timestamp())
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, stamp
            archive.addfile(info, io.BytesIO(data))
    # 0600: the vendor gets it, not every local user
    return atomic_write_bytes(path, buffer.getvalue(), mode=0o600)


def _redacted_gzip(path: Path, secrets: Iterable[str]) -> tuple[bytes, dict[str, int]]:
    """The gzip file's text with every secret masked (``redact_collected``), compressed
    again, and what was masked by kind."""
    raw = gzip.decompress(read_bytes(path, kind="capture"))
    text, counts = redact_collected(raw.decode("utf-8", "surrogateescape"), secrets)
    return gzip.compress(text.encode("utf-8", "surrogateescape")), counts


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a bundle (tests, and an operator checking one)."""
    with tarfile.open(path, mode="r:gz") as archive:
        member = archive.extractfile(MANIFEST)
        if member is None:
            raise ConfigError("no manifest.json in the bundle", file=str(path))
        data: dict[str, Any] = json.loads(member.read())
        return data
