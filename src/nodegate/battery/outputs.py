"""Write a node report and everything rendered from it, each file atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.report import NodeReport, fleet_summary

DEFAULT_TEXTFILE_DIR = Path("/var/lib/node_exporter/textfile_collector")
DEFAULT_REPORT_DIR = Path("/var/lib/nodegate/reports")


@dataclass(frozen=True)
class WrittenFiles:
    json: Path
    latest: Path
    junit: Path | None
    prometheus: Path | None


def default_report_dir() -> Path:
    return Path(os.environ.get("NODEGATE_REPORT_DIR", str(DEFAULT_REPORT_DIR)))


def default_textfile_dir() -> Path:
    return Path(os.environ.get("NODEGATE_TEXTFILE_DIR", str(DEFAULT_TEXTFILE_DIR)))


def preflight(report_dir: Path, textfile_dir: Path | None) -> None:
    """Refuse unusable output folders before anything is measured or written, creating none:
    a run writes its whole report set, or exits 2 having written nothing."""
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

    preflight(report_dir, textfile_dir)
    _ensure_dirs([(report_dir, "--report-dir")]
                 + ([(textfile_dir, "--textfile-dir")] if textfile_dir is not None else []))
    # serialized once; not re-validated on this path (the builder is schema-tested), which
    # keeps the cron health check inside its time budget
    data = report.to_dict()
    text = dumps(data)
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
    latest = fleet_summary.write_files(report_dir / f"{level}-latest.json", text, summary,
                                       sync_dir=False)
    junit_path = (write_junit([report], report_dir / f"{level}-latest.xml", sync_dir=False)
                  if junit else None)
    fsync_dir(report_dir)
    prom = None
    if textfile_dir is not None:
        prom = write_prometheus(report, textfile_dir / f"nodegate_{level}.prom")
    prune(report_dir, level, keep=KEEP_REPORTS)
    return WrittenFiles(json=dated, latest=latest, junit=junit_path, prometheus=prom)


#: Dated reports kept per level: 5-minute cron runs fill a disk otherwise (~3.5 days).
KEEP_REPORTS = 1000


def prune(report_dir: Path, level: str, *, keep: int) -> None:
    """Remove all but the newest ``keep`` dated reports of ``level``, each with its summary."""
    latest = f"{level}-latest.json"
    dated = sorted(p for p in report_dir.glob(f"{level}-*.json")
                   if p.name != latest and not fleet_summary.is_summary_name(p.name))
    for old in dated[:-keep] if keep else dated:
        old.unlink(missing_ok=True)
        fleet_summary.path_for(old).unlink(missing_ok=True)
