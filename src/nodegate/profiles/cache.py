"""A cache of resolved profiles, keyed by the content of every profile file.

Resolving means parsing YAML and running the JSON Schema validator over each layer; on the
cron health path that is most of the start-up time. The key hashes every file under the
profiles directory (and the overrides), so any edit misses the cache and is validated again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nodegate import __version__, paths
from nodegate.profiles.loader import Profile, profiles_dir, resolve_profile


def _key(name: str, base: Path, extra: Any) -> str:
    digest = hashlib.sha256(f"{__version__}\0{name}\0".encode())
    for path in sorted(base.rglob("*.yaml")):
        digest.update(str(path.relative_to(base)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(json.dumps(extra, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def resolve_profile_cached(name: str, **kwargs: Any) -> Profile:
    base = kwargs.get("base") or profiles_dir()
    overrides = {k: kwargs.get(k) for k in ("site_overrides", "host_overrides")}
    cache = paths.cache_dir() / "profiles" / f"{_key(name, base, overrides)}.json"
    try:
        data = json.loads(cache.read_text())
        return Profile(name=data["name"], data=data["data"], origins=data["origins"],
                       layers=data["layers"])
    except (OSError, ValueError, KeyError):
        pass
    profile = resolve_profile(name, **kwargs)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"name": profile.name, "data": profile.data,
                                   "origins": profile.origins, "layers": profile.layers}))
        tmp.replace(cache)
    except OSError:
        pass  # a read-only cache only costs speed
    return profile
