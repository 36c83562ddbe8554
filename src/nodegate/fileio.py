"""The one way in for every file an operator or a node supplies, and the one way out.

A profile, a site file, a kernel log or a password file is named by someone else, and what
has that name may not be a file: ``open()`` on a FIFO waits for a writer that never comes
(some commands did so while holding the battery lock), ``/dev/zero`` reads until memory runs
out, and a socket or directory fails with an error no loader expected. So every read goes
through ``read_bytes``/``read_text``: the path is opened with ``O_NONBLOCK | O_NOCTTY`` (a
FIFO opens at once, a terminal is never adopted), the *opened descriptor* is checked with
``fstat`` (no stat-then-open race: what was checked is what is read), anything but a regular
file is refused naming what it is, at most the kind's cap plus one byte is read, and text is
strict UTF-8 with the offset of the first bad byte in the error.

Writes go through ``atomic_write_text``: a temp file in the same folder, fsync, rename. Only
a regular file is ever replaced; a symbolic link, a device, a FIFO, a socket or a directory
where the file belongs is refused, since a rename over it would replace the link (or the
device node) and a write through it lands wherever the link points (as root: anywhere).
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.redaction import redact

MiB = 1024 * 1024

#: Largest file read, per kind of file. A profile or a password file is small; a kernel log
#: or a fleet report with series and matrices is large. A cap is a refusal, never a truncation.
LIMITS: dict[str, int] = {
    "profile": 1 * MiB,
    "site": 4 * MiB,
    "ansible": 4 * MiB,
    "scenario": 4 * MiB,
    "yaml": 4 * MiB,
    "poller": 1 * MiB,
    "credential": 64 * 1024,
    "capture": 32 * MiB,
    "kernel_log": 64 * MiB,
    "report": 256 * MiB,
    "summary": 1 * MiB,
    "cache": 64 * MiB,
    "config": 1 * MiB,
}

#: A temp file this old was left by a writer that was killed (SIGKILL, power loss); removed.
STALE_TMP_S = 600.0


#: File type test -> its name in the words an operator knows.
_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def describe_mode(mode: int) -> str:
    """What a non-regular file is, in the words an operator knows."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def _size_words(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB and limit % MiB == 0 else f"{limit} bytes"


def limit_for(kind: str) -> int:
    """The cap of one kind of file (``LIMITS``); an unknown kind is a defect, not input."""
    return LIMITS[kind]


def read_bytes(path: str | os.PathLike[str], *, kind: str, limit: int | None = None) -> bytes:
    """A regular file's bytes, at most the kind's cap; ConfigError naming the path otherwise.

    Never blocks on a FIFO and never reads a device: the descriptor is opened non-blocking
    and checked with ``fstat`` before the first read.
    """
    cap = limit_for(kind) if limit is None else limit
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError("file not found", file=where) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file", file=where) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=where) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError("is a directory, not a file", file=where)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"is {describe_mode(info.st_mode)}, not a regular file; not read",
                              file=where)
        if info.st_size > cap:
            raise ConfigError(f"larger than {_size_words(cap)} ({info.st_size} bytes); not read",
                              file=where)
        os.set_blocking(fd, True)
        data = _read_at_most(fd, cap + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=where) from None
    finally:
        os.close(fd)
    if len(data) > cap:  # it grew after fstat
        raise ConfigError(f"larger than {_size_words(cap)}; not read", file=where)
    return data


def _read_at_most(fd: int, most: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total < most:
        chunk = os.read(fd, min(most - total, 1 * MiB))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def decode_strict(data: bytes, *, source: str) -> str:
    """UTF-8 text, or a ConfigError naming the file, the byte and its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}",
                          file=source) from None


def read_text(path: str | os.PathLike[str], *, kind: str, limit: int | None = None) -> str:
    """``read_bytes`` decoded as strict UTF-8."""
    return decode_strict(read_bytes(path, kind=kind, limit=limit), source=str(path))


# --- the writer ----------------------------------------------------------------------------


def check_target(path: str | os.PathLike[str], *, make_parents: bool = True) -> Path:
    """The regular file that writing ``path`` will replace or create; ConfigError naming
    ``path`` when something else has the name (a symbolic link, a device, a FIFO, a socket,
    a directory) or, with ``make_parents`` False, when its folder does not exist."""
    target = Path(path)
    where = str(target)
    try:
        info: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=where) from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise ConfigError("cannot write: a symbolic link (not followed, not replaced); "
                          "name the file itself", file=where)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ConfigError("cannot write: is a directory", file=where)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"cannot write: not a regular file ({describe_mode(info.st_mode)}; "
                          "not replaced)", file=where)
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
        fd, tmp_name = _create_temp(target)
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(path)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp_name)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644,
                      make_parents: bool = True, sync_dir: bool = True) -> Path:
    """Write ``text`` to ``path`` so that no reader ever sees a partial file, every
    credential read masked first (``redact``): no secret reaches a file through here.

    The temp file is a dot-file ending in ``.tmp`` in the target's directory (same filesystem,
    so the rename is atomic; and node_exporter's textfile collector ignores it, as it only reads
    ``*.prom``). ``mode`` defaults to 0644 because mkstemp's 0600 would hide the file from a
    collector running as another user. Only a regular file is replaced (``check_target``);
    ``make_parents`` False: a missing folder is an error, not created. ``sync_dir`` False
    leaves persisting the rename to the caller (``fsync_dir`` once after several files in
    one folder: each file is still old or new after a crash, never half).
    """
    return atomic_write_bytes(path, redact(text, keep_length=True).encode("utf-8"), mode=mode,
                              make_parents=make_parents, sync_dir=sync_dir)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644,
                       make_parents: bool = True, sync_dir: bool = True) -> Path:
    """``atomic_write_text``'s guarantees for bytes written as given: a caller that writes
    bytes (an archive) masks what it holds itself before."""
    target = check_target(path, make_parents=make_parents)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(target)
        fd, tmp_name = _create_temp(target)
    except OSError as exc:
        raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        check_target(target, make_parents=False)  # nothing swapped in while we wrote
        os.replace(tmp_name, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if isinstance(exc, OSError):
            raise ConfigError(f"cannot write: {exc.strerror or exc}", file=str(target)) from None
        raise
    if sync_dir:
        fsync_dir(target.parent)
    return target


def atomic_link(source: str | os.PathLike[str], path: str | os.PathLike[str], *,
                sync_dir: bool = True) -> Path:
    """Make ``path`` a second name of the regular file ``source`` (written by
    ``atomic_write_text``), replacing ``path`` atomically as that writer does: a hard link under
    a temp name beside it, then a rename. The text is neither written nor redacted twice (a
    report's latest copy is its dated file), nor synced twice: ``source`` must be on disk.
    OSError where the folder's filesystem has no hard links; the caller writes a copy instead.
    """
    target = check_target(path, make_parents=False)
    _remove_stale(target)
    for _ in range(100):
        tmp_name = os.path.join(target.parent, f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            os.link(source, tmp_name, follow_symlinks=False)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {target}")
    try:
        # no fsync of the link: its data is the source's, on disk before the source's rename,
        # and its name is persisted with the folder (``sync_dir``); an fsync here synced only
        # the link count, a journal commit each (~0.3 ms idle, 5-13 ms on a busy disk)
        check_target(target, make_parents=False)  # nothing swapped in meanwhile
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    if sync_dir:
        fsync_dir(target.parent)
    return target


#: Flags of tempfile.mkstemp: a new file only this writer opened, not a link, not inherited.
_TEMP_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_CLOEXEC", 0))


def _create_temp(target: Path) -> tuple[int, str]:
    """``tempfile.mkstemp`` beside ``target`` (``.<name>.<random>.tmp``, mode 0600), without
    importing tempfile and random: ~5 ms of every cron health check."""
    for _ in range(100):
        name = os.path.join(target.parent, f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(name, _TEMP_FLAGS, 0o600), name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def _remove_stale(target: Path) -> None:
    """Temp files of this target left by a killed writer: nothing else will ever remove them."""
    cutoff = time.time() - STALE_TMP_S
    prefix, suffix = f".{target.name}.", ".tmp"
    # a scan, not glob: a report folder holds ~2000 files, and glob would read "[" in a name
    # as a pattern
    with contextlib.suppress(OSError), os.scandir(target.parent) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(prefix) and name.endswith(suffix) and \
                    len(name) >= len(prefix) + len(suffix):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def fsync_dir(directory: Path) -> None:
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
