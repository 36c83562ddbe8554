"""``nodegate profiles list|show NAME|check FILE...``: inspect and validate hardware profiles."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("profiles", help="list, show and check hardware profiles")
    sub = parser.add_subparsers(dest="profiles_command", metavar="ACTION")
    sub.required = True
    p_list = sub.add_parser("list", help="list the selectable profiles")
    p_list.set_defaults(func=run_list)
    p_show = sub.add_parser("show", help="print a resolved profile with every threshold's source")
    p_show.add_argument("name", help="a profile name (`nodegate profiles list`)")
    p_show.add_argument("--json", action="store_true", help="print the resolved data as JSON")
    p_show.set_defaults(func=run_show)
    p_check = sub.add_parser("check", help="validate profile files (exit 2 naming the bad key)")
    p_check.add_argument("files", nargs="+", type=Path, metavar="FILE",
                         help="profile YAML files to validate")
    p_check.set_defaults(func=run_check)
    p_schema = sub.add_parser("schema", help="print the JSON Schema of a resolved profile")
    p_schema.set_defaults(func=run_schema)


def run_list(args: argparse.Namespace) -> int:
    from nodegate.profiles import list_profiles

    rows = list_profiles()
    width = max((len(name) for name, _ in rows), default=0)
    for name, description in rows:
        print(f"{name:<{width}}  {description}")
    return 0


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        out: list[tuple[str, Any]] = []
        for key, value in data.items():
            out.extend(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return [(prefix, data)]


def run_show(args: argparse.Namespace) -> int:
    from nodegate.profiles import resolve_profile

    profile = resolve_profile(args.name)
    if args.json:
        print(json.dumps(profile.data, indent=2, sort_keys=True))
        return 0
    print(f"profile {profile.name}: {profile.data.get('description', '')}")
    print(f"layers (later wins): {' -> '.join(profile.layers)}")
    for section, body in profile.data.items():
        if section in ("thresholds", "name", "description") or not isinstance(body, dict):
            continue
        print(f"\n[{section}]")
        for key, value in _flatten(body):
            shown = f"0x{value:04X}" if key == "pci_device_id" else value
            print(f"  {key:<22} {shown!s:<28} ({profile.origins.get(f'{section}.{key}', '?')})")
    print("\n[thresholds]")
    for threshold in profile.thresholds():
        print(f"  {threshold.name:<28} {threshold.describe():<16} {threshold.source}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Each file checked as the battery will read it: a resolved profile (``.json``, what
    ``profiles show NAME --json`` prints and ``health --profile FILE`` reads) as JSON, not
    YAML 1.1 (``3e-07`` is a number there); a layer validated, and a selectable profile
    resolved and required to hold every threshold each level's checks need
    (``registry.require_thresholds``: exit 2 naming the file, the key and the level), or the
    first ``health`` would refuse it."""
    from nodegate.profiles.installed import select_profile
    from nodegate.profiles.loader import check_files, load_layer, resolve_profile

    for path in args.files:
        if path.suffix == ".json":
            _complete_at_every_level(select_profile(str(path)))
        else:
            check_files([path])
            if load_layer(path).get("layer", "profile") == "profile":
                _complete_at_every_level(resolve_profile(path.stem,
                                                         base=path.resolve().parent))
        print(f"ok  {path}")
    return 0


def _complete_at_every_level(profile: Any) -> None:
    """Each level's required thresholds, with the groups a run of that level runs by default
    (``health``: the quick groups; ``validate``: every group)."""
    from nodegate.battery.registry import require_thresholds
    from nodegate.vocabulary import ALL_GROUPS, LEVELS, QUICK_GROUPS

    for level in LEVELS:
        require_thresholds(profile, level, QUICK_GROUPS if level == LEVELS[0] else ALL_GROUPS)


def run_schema(args: argparse.Namespace) -> int:
    from nodegate.profiles.schema import resolved_schema

    print(json.dumps(resolved_schema(), indent=2))
    return 0
