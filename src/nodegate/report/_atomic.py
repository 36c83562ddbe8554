"""Atomic file replacement shared by every report writer.

A report or textfile is read by other processes (node_exporter, CI, the lead's join step)
at any moment, and the node may lose power mid-run; readers must see the old file or the new
one, never half of one. So: write a temp file in the same directory, fsync, rename over.

A rename replaces whatever has the name, so the target is checked first (``check_target``):
only a regular file is ever replaced. A device, FIFO, socket or directory there is refused
(a ``--html /dev/full`` once replaced the device node); a symbolic link to a regular file is
written through (the file it points to is replaced, the link kept); a link to anything else,
broken or looping, is refused. Writers of nodegate's own folders (reports, summaries,
textfiles) create missing parent folders; a file the user names (``nodegate report --html``)
is checked up front by ``preflight_file``, which creates nothing.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.redaction import redact

#: A temp file this old was left by a writer that was killed (SIGKILL, power loss); removed.
STALE_TMP_S = 600.0


def check_target(path: str | os.PathLike[str], *, make_parents: bool = True) -> Path:
    """The regular file that writing ``path`` will replace or create (a symbolic link to a
    regular file: that file); ConfigError naming ``path`` when it is anything else, or (with
    ``make_parents`` False) when its folder does not exist."""
    target = Path(path)
    where = str(target)
    try:
        info: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=where) from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        try:
            real = target.resolve(strict=True)
            info = os.stat(real)
        except (OSError, RuntimeError):
            raise ConfigError("cannot write: a broken or looping symbolic link (not replaced)",
                              file=where) from None
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("cannot write: a symbolic link to something that is not a "
                              "regular file (not replaced)", file=where)
        target = real
    elif info is not None and stat.S_ISDIR(info.st_mode):
        raise ConfigError("cannot write: is a directory", file=where)
    elif info is not None and not stat.S_ISREG(info.st_mode):
        raise ConfigError("cannot write: not a regular file (a device, FIFO or socket; not "
                          "replaced)", file=where)
    if not make_parents and not target.parent.is_dir():
        raise ConfigError(f"cannot write: folder {target.parent} does not exist (not created)",
                          file=where)
    return target


def preflight_file(path: str | os.PathLike[str]) -> Path:
    """Check a file the user named before any work: ``check_target`` without creating
    folders, and a temp file made and removed in its folder (writable, room for an inode).
    Returns the file ``atomic_write_text`` will write."""
    target = check_target(path, make_parents=False)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                        suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(path)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp_name)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644,
                      make_parents: bool = True) -> Path:
    """Write ``text`` to ``path`` so that no reader ever sees a partial file.

    The temp file is a dot-file ending in ``.tmp`` in the target's directory (same filesystem,
    so the rename is atomic; and node_exporter's textfile collector ignores it, as it only reads
    ``*.prom``). ``mode`` defaults to 0644 because mkstemp's 0600 would hide the file from a
    collector running as another user. Only a regular file is replaced (``check_target``);
    ``make_parents`` False: a missing folder is an error, not created.
    """
    target = check_target(path, make_parents=make_parents)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                        suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(redact(text, keep_length=True))  # no credential read reaches a file
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
