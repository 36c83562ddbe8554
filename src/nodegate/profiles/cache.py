"""A cache of resolved profiles, keyed by the content of every profile file.

Resolving means parsing YAML and running the JSON Schema validator over each layer; on the
cron health path that is most of the start-up time. The key hashes every file under the
profiles directory (and the overrides), so any edit misses the cache and is validated again.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from nodegate import __version__, paths
from nodegate.errors import ConfigError
from nodegate.fileio import atomic_write_text, read_bytes, read_text
from nodegate.profiles.loader import Profile, profiles_dir, resolve_profile, sha256_hex


def _key(name: str, base: Path, extra: Any) -> str:
    parts = [f"{__version__}\0{name}\0".encode()]
    for path in sorted(base.rglob("*.yaml")):
        parts.append(str(path.relative_to(base)).encode() + b"\0")
        parts.append(read_bytes(path, kind="profile") + b"\0")
    parts.append(json.dumps(extra, sort_keys=True, default=str).encode())
    return sha256_hex(b"".join(parts))[:32]


def resolve_profile_cached(name: str, **kwargs: Any) -> Profile:
    base = kwargs.get("base") or profiles_dir()
    overrides = {k: kwargs.get(k) for k in ("site_overrides", "host_overrides")}
    cache = paths.cache_dir() / "profiles" / f"{_key(name, base, overrides)}.json"
    try:
        data = json.loads(read_text(cache, kind="cache"))
        return Profile(name=data["name"], data=data["data"], origins=data["origins"],
                       layers=data["layers"])
    except (OSError, ValueError, KeyError, ConfigError):
        pass
    profile = resolve_profile(name, **kwargs)
    with contextlib.suppress(OSError, ConfigError):  # a read-only cache only costs speed
        atomic_write_text(cache, json.dumps({"name": profile.name, "data": profile.data,
                                             "origins": profile.origins,
                                             "layers": profile.layers}))
    return profile
