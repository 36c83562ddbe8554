"""nodegate: provision 8-GPU NVIDIA servers and gate them before they join a cluster."""

from __future__ import annotations

from functools import cache

#: When nodegate runs from a tree no installer has seen (``PYTHONPATH=src``).
UNKNOWN_VERSION = "0+unknown"


@cache
def _installed_version() -> str:
    """The installed distribution's version, local label included (a lab node's build says
    ``0.1.0+src.<digest>``, the source it came from); pyproject.toml is the only place the
    release is written."""
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
