"""YAML loading that names the file on every error, rejects duplicate keys and bounds input.

PyYAML silently keeps the last of two equal keys; in a profile or site file that hides a
typo'd override, so duplicates are an error here. Input is bounded before anything walks it:
a size cap, strict UTF-8 (the byte offset of the first bad byte in the error), and a cap on
aliases, since a few lines of nested aliases (a "billion laughs") expand into a value that
exhausts memory as soon as a schema check or an error message walks it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.errors import ConfigError

if TYPE_CHECKING:
    import yaml

#: Largest YAML file read: profiles, site files and scenarios are a few KiB to a few hundred.
MAX_BYTES = 4 * 1024 * 1024
#: Aliases allowed in one document: anchors for shared blocks are fine, nesting bombs are not.
MAX_ALIASES = 128


@cache
def _loader_class() -> type[yaml.SafeLoader]:
    """The SafeLoader that counts aliases and refuses duplicate keys; PyYAML is imported on
    the first parse, not with this module (the cron health check reads its profile from a
    JSON cache and never parses YAML: importing PyYAML was ~15 ms of it)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        aliases_seen = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases_seen += 1
                if self.aliases_seen > MAX_ALIASES:
                    mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                    raise ConfigError(f"more than {MAX_ALIASES} YAML aliases (line "
                                      f"{mark.line + 1}); nested aliases can expand without "
                                      "bound", file=str(getattr(self, "name", None) or ""))
            return super().compose_node(parent, index)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                    _construct_mapping)
    return UniqueKeyLoader


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode,
                       deep: bool = False) -> Any:
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


def read_text_bounded(path: Path, *, limit: int = MAX_BYTES) -> str:
    """A text file's content: at most ``limit`` bytes, strict UTF-8; else a ConfigError."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    if len(data) > limit:
        raise ConfigError(f"larger than {limit // (1024 * 1024)} MiB; not read", file=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}",
                          file=str(path)) from None


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; any problem becomes a ConfigError naming the file."""
    return load_yaml_text(read_text_bounded(path), source=str(path))


def load_yaml_text(text: str, *, source: str) -> Any:
    import yaml

    loader = _loader_class()(text)
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


def shorten(text: str, limit: int = 200) -> str:
    """A value as an error message may quote it: one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def json_path(parts: Any) -> str:
    """Dotted path of a jsonschema error location: ``thresholds.p2p_unidir_gbps_min.min``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"
