"""Atomic file replacement shared by every report writer.

A report or textfile is read by other processes (node_exporter, CI, the lead's join step)
at any moment, and the node may lose power mid-run; readers must see the old file or the new
one, never half of one. So: write a temp file in the same directory, fsync, rename over.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from nodegate.errors import ConfigError

#: A temp file this old was left by a writer that was killed (SIGKILL, power loss); removed.
STALE_TMP_S = 600.0


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> Path:
    """Write ``text`` to ``path`` so that no reader ever sees a partial file.

    The temp file is a dot-file ending in ``.tmp`` in the target's directory (same filesystem,
    so the rename is atomic; and node_exporter's textfile collector ignores it, as it only reads
    ``*.prom``). ``mode`` defaults to 0644 because mkstemp's 0600 would hide the file from a
    collector running as another user.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            raise IsADirectoryError(21, "is a directory")
        _remove_stale(target)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                        suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None
        raise
    _fsync_dir(target.parent)
    return target


def _remove_stale(target: Path) -> None:
    """Temp files of this target left by a killed writer: nothing else will ever remove them."""
    cutoff = time.time() - STALE_TMP_S
    for leftover in target.parent.glob(f".{target.name}.*.tmp"):
        with contextlib.suppress(OSError):
            if leftover.stat().st_mtime < cutoff:
                leftover.unlink()


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself; best effort where directories cannot be opened."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
