"""Host ranges in a site file, so a 64-node pod is one entry, not 64.

``gpu-c[001-064]`` is gpu-c001 ... gpu-c064, in the order Slurm's hostlists write them: a
bracket holds comma-separated numbers or ``A-B`` spans; a zero-padded start keeps its width
(``[001-064]``: three digits); several brackets multiply (``r[1-2]-n[01-04]``: 8 names). The
same syntax works in a ranged host's ``address`` (``10.0.1.[11-74]``), ``slurm.node_name``,
``bmc.url`` and ``machine_id``, paired one to one with the host names (so the counts must
match), and in ``nvme.devices`` entries, where one entry becomes the listed disks
(``/dev/disk/by-id/nvme-..._S61ANE0R4010[01-08]``). A host's own entry beside its range
refines what the range gave it (deep-merged: its NVMe serials, which differ per machine). A
bad range is exit 2 naming the file and key; nothing is guessed.
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

from nodegate.errors import ConfigError
from nodegate.mapping import deep_merge

#: More names than this from one pattern is a typo (``[1-100000]``), not a pod.
MAX_EXPANSION = 10_000
#: Longer numbers are not host numbers (and Python refuses to read 4,300 digits).
MAX_DIGITS = 12
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_ITEM = re.compile(r"(\d+)(?:-(\d+))?")
#: The keys of a ranged host whose value pairs with the host names' expansion. Only a ranged
#: entry's: a single host's ``https://[fd00::5]`` BMC is an IPv6 address, not a range.
PAIRED: tuple[tuple[str, ...], ...] = (
    ("address",), ("machine_id",), ("slurm", "node_name"), ("bmc", "url"))


def has_range(text: str) -> bool:
    return "[" in text or "]" in text


def _numbers(body: str, *, file: str, key: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        match = _ITEM.fullmatch(item.strip())
        if match is None:
            raise ConfigError(f"bad range [{body}]: {item.strip()!r} is not N or N-M",
                              file=file, key=key)
        start, end = match.group(1), match.group(2) or match.group(1)
        if max(len(start), len(end)) > MAX_DIGITS:
            raise ConfigError(f"bad range [{body}]: numbers of more than {MAX_DIGITS} digits",
                              file=file, key=key)
        if int(end) < int(start):
            raise ConfigError(f"bad range [{body}]: {start}-{end} runs backwards",
                              file=file, key=key)
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        if width and len(end) != width:
            raise ConfigError(f"bad range [{body}]: {start}-{end} pads {start} to {width} "
                              f"digits but not {end}", file=file, key=key)
        if int(end) - int(start) + 1 + len(out) > MAX_EXPANSION:
            raise ConfigError(f"range [{body}] names more than {MAX_EXPANSION} items",
                              file=file, key=key)
        out += [str(n).zfill(width) for n in range(int(start), int(end) + 1)]
    return out


def expand(text: str, *, file: str, key: str) -> list[str]:
    """Every name ``text`` stands for, in order; ``[text]`` when it holds no range."""
    if not has_range(text):
        return [text]
    pieces = _BRACKET.split(text)  # literal, bracket body, literal, ...
    literals, bodies = pieces[0::2], pieces[1::2]
    if any(has_range(lit) for lit in literals):
        raise ConfigError(f"bad range in {text!r}: unbalanced or nested brackets",
                          file=file, key=key)
    choices = [_numbers(body, file=file, key=key) for body in bodies]
    total = 1
    for options in choices:
        total *= len(options)
    if total > MAX_EXPANSION:
        raise ConfigError(f"{text!r} names more than {MAX_EXPANSION} items", file=file, key=key)
    out = []
    for combo in itertools.product(*choices):
        out.append("".join(lit + num for lit, num in zip(literals, (*combo, ""), strict=True)))
    if len(set(out)) != len(out):
        raise ConfigError(f"{text!r} names one item twice", file=file, key=key)
    return out


def _paired(entry: dict[str, Any], names: list[str], *, file: str, pattern: str
            ) -> list[dict[str, Any]]:
    """One entry per name; a ranged ``address``/``machine_id``/``slurm.node_name``/``bmc.url``
    is paired with the names one to one."""
    columns: dict[tuple[str, ...], list[str]] = {}
    for path in PAIRED:
        section = entry.get(path[0]) if len(path) == 2 else None
        value = entry.get(path[0]) if len(path) == 1 else (
            section.get(path[1]) if isinstance(section, dict) else None)
        if isinstance(value, str) and has_range(value):
            key = ".".join(("hosts", pattern, *path))
            values = expand(value, file=file, key=key)
            if len(values) != len(names):
                raise ConfigError(f"{value!r} names {len(values)} values for {len(names)} "
                                  f"hosts of {pattern!r}; the counts must match",
                                  file=file, key=key)
            columns[path] = values
    out = []
    for i in range(len(names)):
        one = copy.deepcopy(entry)
        for path, values in columns.items():
            target = one
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = values[i]
        out.append(one)
    return out


def _expand_devices(entry: dict[str, Any], *, file: str, key: str) -> None:
    nvme = entry.get("nvme")
    if not isinstance(nvme, dict) or not isinstance(nvme.get("devices"), list):
        return
    devices: list[Any] = []
    for i, device in enumerate(nvme["devices"]):
        if isinstance(device, str):
            devices += expand(device, file=file, key=f"{key}.nvme.devices[{i}]")
        else:
            devices.append(device)  # the schema names what is wrong with it
    nvme["devices"] = devices


def expand_site(data: dict[str, Any], *, file: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The site mapping with every range written out (hosts, group members, paired keys,
    NVMe device lists), before the schema sees it, and each ranged host's pattern (so a
    message can name the key as the file writes it); ``data`` itself is left alone."""
    out = dict(data)
    origins: dict[str, str] = {}
    hosts = data.get("hosts")
    if isinstance(hosts, dict):
        out["hosts"] = _expand_hosts(hosts, origins, file=file)
    defaults = data.get("defaults")
    if isinstance(defaults, dict):
        out["defaults"] = copy.deepcopy(defaults)
        _expand_devices(out["defaults"], file=file, key="defaults")
    groups = data.get("groups")
    if isinstance(groups, dict):
        out["groups"] = {name: _expand_group(value, file=file, key=f"groups.{name}")
                         for name, value in groups.items()}
    return out, origins


def _expand_hosts(hosts: dict[str, Any], origins: dict[str, str], *, file: str
                  ) -> dict[str, Any]:
    """Ranged entries first; then a host's own entry refines what its range gave it (its
    NVMe serials, one address): a host in two ranges, or listed twice by name, is refused."""
    expanded: dict[str, Any] = {}
    ranged = [(str(p), e) for p, e in hosts.items() if has_range(str(p))]
    for pattern, entry in ranged:
        names = expand(pattern, file=file, key=f"hosts.{pattern}")
        entries = (_paired(entry, names, file=file, pattern=pattern)
                   if isinstance(entry, dict) else [entry] * len(names))
        for name, one in zip(names, entries, strict=True):
            if name in expanded:
                raise ConfigError(f"host {name} is in two ranges ({origins[name]!r} and "
                                  f"{pattern!r})", file=file, host=name, key=f"hosts.{pattern}")
            expanded[name], origins[name] = one, pattern
    for name, entry in hosts.items():
        if has_range(str(name)):
            continue
        one = copy.deepcopy(entry)
        if name in expanded and isinstance(entry, dict) and isinstance(expanded[name], dict):
            one = deep_merge(expanded[name], entry)
            del origins[name]
        expanded[name] = one
    for name, one in expanded.items():
        if isinstance(one, dict):
            try:
                _expand_devices(one, file=file, key=f"hosts.{origins.get(name, name)}")
            except ConfigError as exc:
                exc.host = name
                raise
    return expanded


def _expand_group(value: Any, *, file: str, key: str) -> Any:
    """A group's member list (or its ``hosts:`` list) with ranges written out."""
    if isinstance(value, dict):
        if isinstance(value.get("hosts"), list):
            return {**value, "hosts": _expand_members(value["hosts"], file=file,
                                                      key=f"{key}.hosts")}
        return value
    if isinstance(value, list):
        return _expand_members(value, file=file, key=key)
    return value


def _expand_members(members: list[Any], *, file: str, key: str) -> list[Any]:
    out: list[Any] = []
    for member in members:
        out += expand(member, file=file, key=key) if isinstance(member, str) else [member]
    return out
