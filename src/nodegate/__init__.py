"""nodegate: provision 8-GPU NVIDIA servers and gate them before they join a cluster."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from functools import cache

#: When nodegate runs from a tree no installer has seen (``PYTHONPATH=src``).
UNKNOWN_VERSION = "0+unknown"


@cache
def _installed_version() -> str:
    """The installed distribution's version, local label included (a lab node's build says
    ``0.1.0+src.<digest>``, the source it came from); pyproject.toml is the only place the
    release is written."""
    found = _dist_info_version(sys.path)
    if found is not None:
        return found
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nodegate")
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    """``__version__`` on first use: importlib.metadata costs tens of milliseconds that
    ``import nodegate`` should not pay for every command."""
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dist_info_version(entries: Iterable[str]) -> str | None:
    """The ``Version`` of the first ``nodegate-*.dist-info`` on ``entries``, found as
    importlib.metadata finds it but without importing it (csv, zipfile, email: ~20 ms of
    every cron run). None wherever the answer is not that plain (an egg-info, a zip on the
    path, two candidates in one folder, no Version line): the caller then asks
    importlib.metadata itself."""
    for entry in entries:
        if entry.lower().endswith(".egg"):  # an egg's EGG-INFO: importlib.metadata decides
            return None
        try:
            names = os.listdir(entry or ".")
        except FileNotFoundError:
            continue
        except OSError:  # a zip or a folder we cannot list: importlib.metadata decides
            return None
        found = [name for name in names if name.lower().endswith((".dist-info", ".egg-info"))
                 and re.sub(r"[-_.]+", "_", name.lower().rpartition(".")[0]
                            .partition("-")[0]) == "nodegate"]
        if not found:
            continue
        if len(found) > 1 or not found[0].lower().endswith(".dist-info"):
            return None
        return _metadata_version(os.path.join(entry or ".", found[0], "METADATA"))
    return None


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (headers end at the first blank line)."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                if name.lower() == "version":
                    return value.strip() or None
    except (OSError, UnicodeDecodeError):
        return None
    return None
