"""Where nodegate keeps data on disk; one place so every module agrees."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository or installed package data root holding inventory/, templates/ and validation/.
PACKAGE_DIR = Path(__file__).resolve().parent


def env_path(name: str) -> Path | None:
    """The path an environment variable names, or None where it is unset *or empty*: a unit
    file's ``Environment=NODEGATE_REPORT_DIR=`` (an unset variable expanded) means the
    default everywhere, never the current directory."""
    value = os.environ.get(name)
    return Path(value) if value else None


#: The node's nodegate configuration (resolved profile, power wiring, credentials).
DEFAULT_CONFIG_DIR = Path("/etc/nodegate")


def config_dir() -> Path:
    """``/etc/nodegate``, or ``$NODEGATE_CONFIG_DIR`` (the test suite points it at a
    temporary folder: a test never reads the machine's own configuration)."""
    return env_path("NODEGATE_CONFIG_DIR") or DEFAULT_CONFIG_DIR


def cache_dir() -> Path:
    """Per-user cache (built simulator library, lab base image): NODEGATE_CACHE_DIR wins."""
    env = env_path("NODEGATE_CACHE_DIR")
    if env is not None:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "nodegate"


def project_root() -> Path | None:
    """The source checkout holding inventory/ and validation/, when running from one."""
    candidate = PACKAGE_DIR.parent.parent
    if (candidate / "inventory" / "profiles").is_dir():
        return candidate
    return None


def data_dir(name: str) -> Path:
    """A shipped data folder (the profiles): checkout first, then package. The wheel carries
    only what a node reads; templates and validation/ stay with the control side's checkout."""
    root = project_root()
    if root is not None:
        mapping = {
            "profiles": root / "inventory" / "profiles",
            "inventory": root / "inventory",
        }
        if name in mapping and mapping[name].exists():
            return mapping[name]
    return PACKAGE_DIR / "data" / name
