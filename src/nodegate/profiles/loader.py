"""Load, layer and validate hardware profiles.

Layer order (later wins, dicts merge key by key, lists and scalars are replaced):

1. the layers a profile ``extends`` (GPU model, then platform), each resolved recursively;
2. the named profile itself;
3. the site's ``profile_overrides``;
4. the host's ``profile_overrides``.

Every leaf remembers which layer set it, so ``nodegate profiles show`` can say where each
number came from. The merged result is validated against the resolved schema before any
host is touched.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from nodegate import paths, records
from nodegate.errors import ConfigError
from nodegate.profiles.threshold_keys import THRESHOLD_KEYS, Key, key_named
from nodegate.yamlio import json_path, load_yaml, shorten


class Threshold(NamedTuple):
    """One bound with its unit and provenance."""

    name: str
    bound: str  # "min" or "max"
    value: float
    unit: str
    source: str

    def describe(self) -> str:
        op = ">=" if self.bound == "min" else "<="
        return f"{op} {self.value:g} {self.unit}"


@records.record
class Profile:
    """A fully layered, validated profile: plain data plus where each leaf came from."""

    name: str
    data: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)
    layers: list[str] = field(default_factory=list)
    source: str | None = None  # the profile's file, when resolved from one

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name, {})
        return value if isinstance(value, dict) else {}

    def threshold(self, key: Key) -> Threshold | None:
        """The threshold ``key``; None only where no check that runs needs it (the battery
        refuses a profile without one a running check needs: ``registry.require_thresholds``)."""
        name = str(key)  # a Key's str() is its name (an untyped caller's plain name works too)
        raw = self.data.get("thresholds", {}).get(name)
        return None if raw is None else parse_threshold(name, raw)

    def thresholds(self) -> list[Threshold]:
        return list(thresholds_of(self.data).values())

    def file(self) -> str:
        """Where this profile came from, for an error message: its file, else its name."""
        return self.source or (self.layers[0] if self.layers else self.name)

    def digest(self) -> str:
        """``sha256:<hex>`` of the resolved data (canonical JSON): a report records it, so
        which thresholds judged a run can be told apart without trusting the profile's name."""
        text = json.dumps(self.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + sha256_hex(text.encode("utf-8"))


def sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()``, from the interpreter's built-in SHA-256 where it
    has one: the cron health check hashes a few KB (the profile cache key, the profile
    digest), and ``hashlib`` loads OpenSSL's libcrypto for that (~2-3 ms of its start-up)."""
    import importlib

    for name in ("_sha2", "_sha256"):  # CPython 3.12+, 3.11
        with contextlib.suppress(ImportError):
            return str(importlib.import_module(name).sha256(data).hexdigest())
    import hashlib

    return hashlib.sha256(data).hexdigest()


def parse_threshold(name: str, raw: Mapping[str, Any]) -> Threshold:
    """One ``{min|max, unit, source}`` entry of a profile's thresholds."""
    bound = "min" if "min" in raw else "max"
    return Threshold(name, bound, float(raw[bound]), str(raw.get("unit", "")),
                     str(raw.get("source", "")))


def thresholds_of(data: Mapping[str, Any]) -> dict[str, Threshold]:
    """name -> threshold of a resolved profile's data, in name order (one parser for the judge
    and ``nodegate profiles show``)."""
    raw = data.get("thresholds") or {}
    return {name: parse_threshold(name, raw[name]) for name in sorted(raw)}


def profiles_dir() -> Path:
    return paths.data_dir("profiles")


def _validate(data: Any, schema: dict[str, Any], *, file: str, host: str | None = None) -> None:
    # the schema modules are imported where a profile is resolved, not by every importer:
    # the cron health check reads its profile from the cache (nodegate.profiles.cache)
    from nodegate.schema_check import NON_FINITE, first_problem, non_finite_path

    bad = non_finite_path(data)
    if bad is not None:
        raise ConfigError(NON_FINITE, file=file, host=host, key=json_path(bad))
    problem = first_problem(schema, data)
    if problem is None:
        return
    err = problem.error
    key = json_path(problem.path)
    message = shorten(problem.message)
    path = problem.path
    catalogued = key_named(str(path[1])) if len(path) >= 2 and path[0] == "thresholds" else None
    threshold = THRESHOLD_KEYS[catalogued] if catalogued is not None else None
    if threshold is not None and len(path) == 3 and path[2] in ("min", "max", "unit") and \
            problem.validator in ("additionalProperties", "const", "required"):
        # the catalogue fixes each threshold's bound and unit (nodegate profiles show)
        message = (f"{path[1]} is judged as a '{threshold.bound}' in {threshold.unit} "
                   f"(threshold_keys.py): set '{threshold.bound}' and unit "
                   f"{threshold.unit!r}")
    elif problem.validator == "additionalProperties":
        message = "unknown key" if problem.unknown_key else f"unknown key ({err.message})"
    elif err.validator == "pattern" and "source" in key:
        message = (
            f"{shorten(repr(err.instance))}: a source must start with 'datasheet:', 'peer-tool:', "
            "'measured:' or 'policy:'"
        )
    raise ConfigError(message, file=file, host=host, key=key)


@lru_cache(maxsize=64)
def _load_layer_cached(path: Path) -> dict[str, Any]:
    data = load_yaml(path, kind="profile")
    if not isinstance(data, dict):
        raise ConfigError("a profile must be a mapping", file=str(path))
    from nodegate.profiles.schema import layer_schema

    _validate(data, layer_schema(), file=str(path))
    return data


def load_layer(path: Path) -> dict[str, Any]:
    """One profile file, parsed and validated as a layer (copy: callers may mutate)."""
    return copy.deepcopy(_load_layer_cached(path.resolve()))


def _layer_path(name: str, base: Path) -> Path:
    """A layer by name: beside the file being resolved first, then the shipped profiles."""
    for root in dict.fromkeys((base, profiles_dir())):
        path = root / f"{name}.yaml"
        if path.is_file():
            return path
    raise ConfigError(f"unknown profile {name!r} (looked in {base})", key="profile")


def list_profiles(base: Path | None = None) -> list[tuple[str, str]]:
    """(name, description) of every selectable profile (layer: profile) under ``base``."""
    base = base or profiles_dir()
    out = []
    for path in sorted(base.glob("*.yaml")):
        data = load_layer(path)
        if data.get("layer", "profile") == "profile":
            out.append((path.stem, str(data.get("description", ""))))
    return out


def _merge(
    target: dict[str, Any], layer: Mapping[str, Any], origins: dict[str, str], label: str,
    prefix: str = "",
) -> None:
    for key, value in layer.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, Mapping):
            existing = target.get(key)
            if not isinstance(existing, dict):
                existing = target[key] = {}
            if prefix == "thresholds" and ("min" in value or "max" in value):
                # a threshold's bound is one unit: a layer setting max must drop an old min
                existing.pop("min", None)
                existing.pop("max", None)
            _merge(existing, value, origins, label, dotted)
        else:
            target[key] = copy.deepcopy(value)
            origins[dotted] = label


def _collect(name: str, base: Path, chain: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    if name in chain:
        raise ConfigError(
            f"profile inheritance loop: {' -> '.join((*chain, name))}",
            file=str(base / f"{name}.yaml"), key="extends",
        )
    path = _layer_path(name, base)
    data = load_layer(path)
    out: list[tuple[str, dict[str, Any]]] = []
    for parent in data.get("extends", []):
        try:
            out.extend(_collect(parent, base, (*chain, name)))
        except ConfigError as exc:
            if exc.file is None:
                exc.file, exc.key = str(path), "extends"
            raise
    out.append((name, data))
    return out


_META_KEYS = ("schema", "layer", "extends", "description", "source", "name")


def resolve_profile(
    name: str,
    *,
    site_overrides: Mapping[str, Any] | None = None,
    host_overrides: Mapping[str, Any] | None = None,
    site_file: str | None = None,
    host: str | None = None,
    base: Path | None = None,
) -> Profile:
    """Layer ``name`` with its parents and the site/host overrides, then validate the result."""
    base = base or profiles_dir()
    try:
        layers = _collect(name, base, ())
    except ConfigError as exc:
        if exc.file is None:
            exc.file = site_file
        exc.host = exc.host or host
        raise
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    labels: list[str] = []
    for label, data in layers:
        body = {k: v for k, v in data.items() if k not in _META_KEYS}
        _merge(merged, body, origins, label)
        labels.append(label)
    top = layers[-1][1]
    merged["name"] = name
    if "description" in top:
        merged["description"] = top["description"]
    from nodegate.profiles.schema import override_schema, resolved_schema

    for label, overrides in (("site", site_overrides), ("host", host_overrides)):
        if overrides:
            _validate(dict(overrides), override_schema(), file=site_file or "<overrides>",
                      host=host)
            _merge(merged, overrides, origins, label)
            labels.append(label)
    _validate(merged, resolved_schema(), file=str(base / f"{name}.yaml"), host=host)
    _check_consistency(merged, file=str(base / f"{name}.yaml"), host=host)
    return Profile(name=name, data=merged, origins=origins, layers=labels,
                   source=str(_layer_path(name, base)))


def _check_consistency(data: Mapping[str, Any], *, file: str, host: str | None) -> None:
    """Rules a schema can't say: versions that must agree, links that must exist."""
    driver = data["driver"]
    if not str(driver["version"]).startswith(f"{driver['branch']}."):
        raise ConfigError(
            f"driver version {driver['version']} is not on branch {driver['branch']}",
            file=file, host=host, key="driver.version",
        )
    if data["nvlink"]["nvswitch"] and not driver["fabricmanager"]:
        raise ConfigError(
            "an NVSwitch board needs the fabric manager (CUDA error 802 otherwise)",
            file=file, host=host, key="driver.fabricmanager",
        )
    if data["nvlink"].get("generation", 0) >= 5 and not driver.get("nvlsm", False):
        raise ConfigError("NVLink5 boards need nvlsm", file=file, host=host, key="driver.nvlsm")
    power = data["power"]
    if power["psu_redundant"] >= power["psu_count"]:
        raise ConfigError(
            "psu_redundant must be below psu_count", file=file, host=host,
            key="power.psu_redundant",
        )


def check_files(files: Iterable[Path]) -> list[str]:
    """Validate profile files (a layer each; a selectable one resolved too). Returns names."""
    checked = []
    for path in files:
        data = load_layer(path)
        if data.get("layer", "profile") == "profile":
            resolve_profile(path.stem, base=path.resolve().parent)
        checked.append(str(path))
    return checked
