"""Atomic file replacement for every report writer: ``nodegate.fileio`` is the one writer.

Kept as a name so the report package's writers (and any caller that imported it from here)
use the same code: a temp file in the target's folder, fsync, rename; only a regular file is
replaced, never a symbolic link, device, FIFO, socket or directory (``fileio.check_target``).
"""

from __future__ import annotations

from nodegate.fileio import (
    STALE_TMP_S,
    atomic_link,
    atomic_write_text,
    check_target,
    fsync_dir,
    preflight_file,
)

__all__ = ["STALE_TMP_S", "atomic_link", "atomic_write_text", "check_target", "fsync_dir",
           "preflight_file"]
