"""Which profile a run on this node judges against: the one named, else ``$NODEGATE_PROFILE``,
else the resolved profile the agent role installed (``/etc/nodegate/profile.json``).

Every front end picks it here (``nodegate health``/``validate``/``netload``/``multinode``, the
pytest plugin, ``nodegate gate --mode join``), so they all judge against the same profile.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nodegate.errors import ConfigError
from nodegate.fileio import read_text
from nodegate.profiles import Profile

NODE_PROFILE_FILE = Path("/etc/nodegate/profile.json")


def node_profile_file() -> Path:
    """The installed resolved profile: ``profile.json`` in ``paths.config_dir()``."""
    from nodegate.paths import config_dir

    return config_dir() / NODE_PROFILE_FILE.name


def select_profile(value: str | None) -> Profile:
    from nodegate.profiles.cache import resolve_profile_cached

    value = value or os.environ.get("NODEGATE_PROFILE") or None
    if value is None:
        installed = node_profile_file()
        if installed.is_file():
            value = str(installed)
        else:
            raise ConfigError(f"no profile given and {installed} is absent", key="--profile")
    if value.endswith(".json"):
        return _profile_from_json(Path(value))
    return resolve_profile_cached(value)


def _profile_from_json(path: Path) -> Profile:
    """A resolved profile the agent role installed; validated again, it is cheap insurance."""
    from nodegate.profiles.loader import _validate
    from nodegate.profiles.schema import resolved_schema

    try:
        data = json.loads(read_text(path, kind="profile"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read resolved profile: {exc}", file=str(path)) from None
    _validate(data, resolved_schema(), file=str(path))
    return Profile(name=str(data["name"]), data=data, layers=[str(path)])
