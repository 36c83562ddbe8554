"""Compile the simulator's C source into a cached ``libnvidia-ml.so.1``.

No binary is committed: the library is built with the system C compiler on first use into
``cache_dir()/sim/<source hash>/``, so a changed source gets a fresh directory and concurrent
builders never see a half-written file (each compiles to a temp name, then renames).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nodegate.errors import CannotRunError
from nodegate.paths import cache_dir

SOURCE = Path(__file__).resolve().parent / "csrc" / "nvml_sim.c"
LIBRARY_NAME = "libnvidia-ml.so.1"
CFLAGS = ("-O2", "-Wall", "-Wextra", "-fPIC", "-shared", "-fvisibility=hidden")


def compiler() -> str:
    """The C compiler: $CC when set, else the first of cc/gcc/clang on PATH."""
    env = os.environ.get("CC")
    if env:
        return env
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    raise CannotRunError("no C compiler found (install gcc or set CC) to build the NVML simulator")


def source_hash() -> str:
    """Short digest of the C source and flags: the cache key."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(" ".join(CFLAGS).encode())
    return digest.hexdigest()[:16]


def library_dir() -> Path:
    """Directory that holds (or will hold) the library for the current source."""
    return cache_dir() / "sim" / source_hash()


def ensure_built(*, force: bool = False) -> Path:
    """Build the library if needed and return the directory holding ``libnvidia-ml.so.1``."""
    out_dir = library_dir()
    target = out_dir / LIBRARY_NAME
    if target.is_file() and not force:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [compiler(), *CFLAGS, "-o", tmp_name, str(SOURCE), "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CannotRunError(
                f"building the NVML simulator failed ({' '.join(cmd)}):\n{proc.stderr.strip()}",
                file=str(SOURCE),
            )
        if proc.stderr.strip():
            # -Wall -Wextra must stay clean; surface warnings rather than hide them.
            (out_dir / "build.log").write_text(proc.stderr)
        os.replace(tmp_name, target)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return out_dir
