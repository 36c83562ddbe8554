"""YAML loading that names the file on every error and rejects duplicate keys.

PyYAML silently keeps the last of two equal keys; in a profile or site file that hides a
typo'd override, so duplicates are an error here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nodegate.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"duplicate key at line {key_node.start_mark.line + 1}",
                file=str(loader.name) if hasattr(loader, "name") else None,
                key=str(key),
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; any problem becomes a ConfigError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    return load_yaml_text(text, source=str(path))


def load_yaml_text(text: str, *, source: str) -> Any:
    loader = _UniqueKeyLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    except ConfigError as exc:
        exc.file = source
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML{where}: {problem}", file=source) from None
    finally:
        loader.dispose()


def json_path(parts: Any) -> str:
    """Dotted path of a jsonschema error location: ``thresholds.p2p_unidir_gbps_min.min``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
