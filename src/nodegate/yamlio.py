"""YAML loading that names the file on every error, rejects duplicate keys and bounds input.

PyYAML silently keeps the last of two equal keys; in a profile or site file that hides a
typo'd override, so duplicates are an error here. Input is bounded before anything walks it:

- the file comes through ``nodegate.fileio`` (regular files only, never blocking on a FIFO,
  a size cap per kind of file, strict UTF-8 with the offset of the first bad byte);
- while the document is *composed* (before any Python object is built), each node's
  expanded size (a node plus everything under it, every alias counted at its full size) is
  added up, and a document larger than ``MAX_NODES`` is refused: a "billion laughs" of nine
  levels of nine aliases stays under any alias count yet expands to 9**9 leaves, which a
  schema check or an error message then walks for minutes; merge keys (``<<``) expand the
  same way and are counted the same way. An alias to a node still being composed (a
  self-referencing document) is refused, so is nesting deeper than ``MAX_DEPTH`` (Python's
  recursion limit otherwise ends the run with a traceback) and more than ``MAX_ALIASES``;
- an integer or float scalar longer than ``MAX_NUMBER_CHARS`` is refused before ``int()``
  sees it (Python refuses 4,300 digits with a ValueError no loader expected).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate.errors import ConfigError
from nodegate.fileio import LIMITS, read_text

if TYPE_CHECKING:
    import yaml

#: Largest YAML file read when no kind is named (profiles, site files and scenarios are a few
#: KiB to a few hundred; each kind's own cap is in ``nodegate.fileio.LIMITS``).
MAX_BYTES = LIMITS["yaml"]
#: Aliases allowed in one document: anchors for shared blocks are fine, nesting bombs are not.
MAX_ALIASES = 128
#: Nodes in the document once every alias is expanded: a site of thousands of hosts fits.
MAX_NODES = 200_000
#: Nesting depth of collections: profiles and sites nest a handful of levels.
MAX_DEPTH = 64
#: Characters in one integer or float scalar: a counter or a threshold needs a few dozen.
MAX_NUMBER_CHARS = 64


def _refuse(loader: Any, message: str, mark: Any) -> ConfigError:
    line = f" (line {mark.line + 1})" if mark is not None else ""
    return ConfigError(message + line, file=str(getattr(loader, "name", None) or ""))


def _check_alias(loader: Any, event: Any) -> None:
    """Refuse the alias ``event`` past ``MAX_ALIASES``, or when it names a node still being
    composed (a self-referencing document)."""
    if loader.aliases_seen > MAX_ALIASES:
        raise _refuse(loader, f"more than {MAX_ALIASES} YAML aliases; nested aliases can "
                      "expand without bound", event.start_mark)
    target = loader.anchors.get(event.anchor)
    if target is not None and id(target) not in loader.sizes:
        raise _refuse(loader, f"YAML alias *{event.anchor} refers to the node that holds it "
                      "(a self-referencing document)", event.start_mark)


def _expanded_size(sizes: dict[int, int], node: Any) -> int:
    """A node plus everything under it, each alias at the full size of its anchor (its
    children's sizes are already in ``sizes``: nodes are composed bottom up)."""
    value = node.value
    if not isinstance(value, list):
        return 1
    if value and isinstance(value[0], tuple):  # a mapping: (key, value) pairs
        return 1 + sum(sizes[id(k)] + sizes[id(v)] for k, v in value)
    return 1 + sum(sizes[id(item)] for item in value)


@cache
def _loader_class() -> type[yaml.SafeLoader]:
    """The bounded SafeLoader below; PyYAML is imported on the first parse, not with this
    module (the cron health check reads its profile from a JSON cache and never parses YAML:
    importing PyYAML was ~15 ms of it)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        aliases_seen = 0
        depth = 0

        def compose_document(self) -> Any:
            self.sizes: dict[int, int] = {}
            return super().compose_document()

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases_seen += 1
                _check_alias(self, self.peek_event())  # type: ignore[no-untyped-call]
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise _refuse(self, f"YAML nested deeper than {MAX_DEPTH} levels",
                                  self.peek_event().start_mark)  # type: ignore[no-untyped-call]
                node: Any = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            self.sizes[id(node)] = size = _expanded_size(self.sizes, node)
            if size > MAX_NODES:
                raise _refuse(self, f"YAML expands to more than {MAX_NODES} nodes once its "
                              "aliases are followed (nested aliases or merge keys)",
                              node.start_mark)
            return node

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                    _construct_mapping)
    for tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        UniqueKeyLoader.add_constructor(tag, _bounded_number(tag))
    return UniqueKeyLoader


def _bounded_number(tag: str) -> Any:
    """SafeLoader's constructor for ``tag``, refusing a scalar longer than
    ``MAX_NUMBER_CHARS`` before ``int()``/``float()`` sees it."""
    import yaml

    parent = yaml.SafeLoader.yaml_constructors[tag]

    def construct(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _refuse(loader, f"a number of {len(node.value)} characters (at most "
                          f"{MAX_NUMBER_CHARS})", node.start_mark)
        return parent(loader, node)

    return construct


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
    """A text file's content: a regular file of at most ``limit`` bytes, strict UTF-8; else a
    ConfigError (``nodegate.fileio.read_text``)."""
    return read_text(path, kind="yaml", limit=limit)


def load_yaml(path: Path, *, kind: str = "yaml") -> Any:
    """Parse one YAML file of a kind (``fileio.LIMITS``); any problem is a ConfigError
    naming the file."""
    return load_yaml_text(read_text(path, kind=kind), source=str(path))


def load_yaml_text(text: str, *, source: str) -> Any:
    """Parse YAML text under the limits above; any problem is a ConfigError naming ``source``."""
    import yaml

    loader: yaml.SafeLoader | None = None
    try:
        loader = _loader_class()(text)  # its reader refuses control characters at once
        loader.name = source
        return loader.get_single_data()
    except ConfigError as exc:
        exc.file = source
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML{where}: {problem}", file=source) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a constructor's own refusal
        raise ConfigError(f"invalid YAML: {type(exc).__name__}: {exc}"[:300],
                          file=source) from None
    finally:
        if loader is not None:
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
