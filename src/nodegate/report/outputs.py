"""Write a node report and everything rendered from it, each file atomically."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from nodegate.errors import ConfigError
from nodegate.fileio import read_bytes
from nodegate.report import fleet_summary

if TYPE_CHECKING:  # the model loads where a report is written (see nodegate.report)
    from nodegate.report import NodeReport
    from nodegate.report.order import OrderKey

DEFAULT_TEXTFILE_DIR = Path("/var/lib/node_exporter/textfile_collector")
DEFAULT_REPORT_DIR = Path("/var/lib/nodegate/reports")


class WrittenFiles(NamedTuple):
    """The files a report set was written to."""

    json: Path
    latest: Path
    junit: Path | None
    prometheus: Path | None
    #: the report as written: numbered (``number``)
    report: NodeReport | None = None


def default_report_dir() -> Path:
    """``$NODEGATE_REPORT_DIR``, else the default; empty is unset (``paths.env_path``)."""
    from nodegate.paths import env_path

    return env_path("NODEGATE_REPORT_DIR") or DEFAULT_REPORT_DIR


def default_textfile_dir() -> Path:
    """``$NODEGATE_TEXTFILE_DIR``, else the default; empty is unset (``paths.env_path``)."""
    from nodegate.paths import env_path

    return env_path("NODEGATE_TEXTFILE_DIR") or DEFAULT_TEXTFILE_DIR


def fixed_targets(report_dir: Path, textfile_dir: Path | None, name: str) -> list[Path]:
    """The files of a run named ``name`` that keep their names run after run (the latest
    report, its summary and JUnit, the textfile); dated reports get new names."""
    latest = report_dir / f"{name}-latest.json"
    targets = [latest, fleet_summary.path_for(latest), report_dir / f"{name}-latest.xml"]
    if textfile_dir is not None:
        targets.append(textfile_dir / f"nodegate_{name}.prom")
    return targets


def preflight(report_dir: Path, textfile_dir: Path | None, name: str | None = None) -> None:
    """Refuse unusable output folders before anything is measured or written, creating none:
    a run writes its whole report set, or exits 2 having written nothing. With ``name`` (the
    run's level or suite), the files it will replace are checked too: a directory, device,
    FIFO or link where ``<name>-latest.json`` belongs is refused now, not after the dated
    report was written."""
    for path, option in ((report_dir, "--report-dir"), (textfile_dir, "--textfile-dir")):
        if path is None:
            continue
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError(f"cannot create {path}: {existing} is not a directory", key=option)
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot create or write {path}: {existing} is not writable",
                              key=option)
    if name is not None:
        from nodegate.fileio import check_target

        for target in fixed_targets(report_dir, textfile_dir, name):
            if os.path.lexists(target):
                check_target(target, make_parents=False)


def _ensure_dirs(wanted: list[tuple[Path, str]]) -> None:
    """Create every output folder, or none: a failure removes what this call created."""
    created: list[Path] = []
    try:
        for path, option in wanted:
            missing = [p for p in (path, *path.parents) if not p.exists()]
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create {path}: {exc.strerror}", key=option) from None
            created += reversed(missing)
            if not os.access(path, os.W_OK):
                raise ConfigError(f"{path} is not writable", key=option)
    except ConfigError:
        for path in reversed(created):
            path.rmdir()
        raise


def write_outputs(report: NodeReport, *, report_dir: Path, textfile_dir: Path | None,
                  junit: bool = True, validate: bool = False,
                  name: str | None = None) -> WrittenFiles:
    """``<name>-<stamp>.json``, ``<name>-latest.json`` (+ .xml, .prom); ``name`` defaults to the
    report's level (a suite outside the battery, ``multinode``, keeps files of its own)."""
    from nodegate.report import write_junit, write_prometheus
    from nodegate.report._atomic import fsync_dir
    from nodegate.report.model import dumps, format_timestamp

    preflight(report_dir, textfile_dir, name or report.level.value)
    _ensure_dirs([(report_dir, "--report-dir")]
                 + ([(textfile_dir, "--textfile-dir")] if textfile_dir is not None else []))
    report = number(report, report_dir)
    # serialized once; not re-validated on this path (the builder is schema-tested), which
    # keeps the cron health check inside its time budget
    data = report.to_dict()
    text = dumps(data, rows=True)  # one result a line: half the cost of indenting every level
    level = name or data["level"]
    stamp = format_timestamp(report.started_at).replace(":", "").replace("-", "")
    if validate:
        from nodegate.report import validate as validate_report

        validate_report(data, source=str(report_dir))
    # each report with its fleet summary beside it (``nodegate report DIR`` reads those)
    # the digest to_dict computed from these results a moment ago, not computed again
    summary = fleet_summary.text_for(data, text, digest=data["digest"])
    # the renames in the report folder persisted by one folder fsync after the last of them
    dated = fleet_summary.write_files(report_dir / f"{level}-{stamp}.json", text, summary,
                                      sync_dir=False)
    # the latest copy is a second name of the dated file: one write and fsync of the report
    latest = fleet_summary.link_files(dated, report_dir / f"{level}-latest.json", text,
                                      summary, sync_dir=False)
    junit_path = (write_junit([report], report_dir / f"{level}-latest.xml", sync_dir=False)
                  if junit else None)
    fsync_dir(report_dir)
    prom = None
    if textfile_dir is not None:
        prom = write_prometheus(report, textfile_dir / f"nodegate_{level}.prom")
    prune(report_dir, level, keep=KEEP_REPORTS, written=dated, slack=PRUNE_SLACK)
    return WrittenFiles(json=dated, latest=latest, junit=junit_path, prometheus=prom,
                        report=report)


#: Dated reports kept per level: 5-minute cron runs fill a disk otherwise (~3.5 days).
KEEP_REPORTS = 1000
#: How many more a run lets accumulate before pruning back to ``KEEP_REPORTS``: ordering
#: them reads each one's summary (~1 s for 1000 on a busy machine), once every 50 runs
#: rather than on every 5-minute health check.
PRUNE_SLACK = 50


def prune(report_dir: Path, level: str, *, keep: int, written: Path | None = None,
          slack: int = 0) -> None:
    """Remove all but the newest ``keep`` dated reports of ``level``, each with its summary,
    once there are more than ``keep + slack``.

    Newest by the reports' own order (``nodegate.report.order``: sequence, then boot time),
    never by file name: after a clock step, older files can carry names from the future.
    ``written`` (the report just written) is never removed.
    """
    latest = f"{level}-latest.json"
    dated = [p for p in report_dir.glob(f"{level}-*.json")
             if p.name != latest and not fleet_summary.is_summary_name(p.name)
             and p != written]
    room = keep - (1 if written is not None else 0)
    if len(dated) <= max(room, 0) + slack:
        return
    ordered = sorted(dated, key=_file_key)
    for old in ordered[: len(ordered) - max(room, 0)]:
        old.unlink(missing_ok=True)
        fleet_summary.path_for(old).unlink(missing_ok=True)


#: The sequence counter beside the reports (hidden: no reader of ``*.json`` lists it).
SEQUENCE_FILE = ".sequence"
SEQUENCE_LOCK = ".sequence.lock"


def _file_key(path: Path) -> OrderKey:
    """A dated report's order key, read from its summary (small) or else the report; a file
    that cannot be read sorts first (the first pruned), by name among such."""
    from nodegate.report.model import decode
    from nodegate.report.order import dict_key

    for source in (fleet_summary.path_for(path), path):
        try:  # the one reader: a FIFO or a device named like a report is refused, not read
            data = decode(read_bytes(source, kind="report"))
        except (OSError, ValueError, ConfigError):
            continue
        if isinstance(data, dict):
            return dict_key(data)
    return (-1, 0, 0.0, 0.0, path.name)


def _sequences(paths: Iterable[Path]) -> Iterable[int]:
    from nodegate.report.model import decode

    for path in paths:
        try:
            data = decode(read_bytes(path, kind="report"))
        except (OSError, ValueError, ConfigError):
            continue
        value = data.get("sequence") if isinstance(data, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            yield value


def highest_sequence(report_dir: Path) -> int:
    """The highest sequence among the reports (and summaries) in ``report_dir``, 0 if none:
    what a lost or corrupt counter resumes after, so no number is ever used twice."""
    names = {p.name for p in report_dir.glob("*.json")}
    # a report's summary carries its sequence: read the small file where there is one
    wanted = [report_dir / name for name in sorted(names) if not name.startswith(".")
              and (fleet_summary.is_summary_name(name)
                   or fleet_summary.name_for(name) not in names)]
    return max(_sequences(wanted), default=0)


def next_sequence(report_dir: Path) -> int:
    """Take this node's next report number: under a lock of its own (two runs writing at
    once never share one), persisted atomically in ``SEQUENCE_FILE`` before any report
    carries it; always above the highest number among the reports present, whatever the
    counter says (missing, corrupt or set back)."""
    from nodegate import flock
    from nodegate.report._atomic import atomic_write_text

    counter = report_dir / SEQUENCE_FILE
    with flock.exclusive(report_dir / SEQUENCE_LOCK, what="report sequence lock",
                         busy=lambda pid: f"report sequence lock held by pid {pid}",
                         wait_s=30.0, poll_s=0.05, mode=0o644):
        try:  # a FIFO here is refused at once (the writer below then names it)
            text = read_bytes(counter, kind="config", limit=64).decode("ascii").strip()
            current = int(text) if text.isdigit() and len(text) <= 16 else None
        except (OSError, UnicodeDecodeError, ConfigError):
            current = None
        # above every number present whatever the counter says: a counter restored from a
        # backup (or hand-edited) must not number a new FAIL below an old PASS, which the
        # gate would then take for the older report
        number = max(current or 0, highest_sequence(report_dir)) + 1
        atomic_write_text(counter, f"{number}\n")
    return number


def number(report: NodeReport, report_dir: Path) -> NodeReport:
    """``report`` with what orders it without the wall clock (``nodegate.report.order``):
    the next sequence number, the boot-relative time, the machine id and boot id where they
    are readable and not already set."""
    from nodegate.probes.kernel_log import read_boot_id
    from nodegate.report.order import read_boottime, read_machine_id

    return dataclasses.replace(
        report,
        boot_id=report.boot_id or read_boot_id(),
        machine_id=report.machine_id or read_machine_id(),
        boottime_s=report.boottime_s if report.boottime_s is not None else read_boottime(),
        sequence=next_sequence(report_dir))
