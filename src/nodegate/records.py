"""``record``: a mutable record class declared as a dataclass is, for the cron path's start-up.

``@dataclass`` writes and compiles an ``__init__``, ``__repr__`` and ``__eq__`` for each class
when its module is imported: the board read's four records (a 54-field ``GpuState`` among
them) cost the cron health check ~3 ms of that before anything was read. ``@record`` takes the
same declaration (annotated fields, plain defaults, ``dataclasses.field(default_factory=...)``)
and gives the same constructor (positional or keyword, defaults, a fresh default from each
factory), value equality and repr through one shared implementation: no code is generated, so
creating the class costs next to nothing.

What it is not: a dataclass. ``dataclasses.replace``, ``asdict`` and ``fields`` refuse it, so a
record is for classes nothing walks by their fields (the report's ``CheckResult`` and
``NodeReport``, which ``replace`` and ``asdict`` reach, stay dataclasses). Type checkers read
it as a dataclass (``dataclass_transform``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typing's own from Python 3.11; what it does is only for type checkers
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_specifiers: Any) -> Callable[[T], T]:
        return lambda decorated: decorated

T = TypeVar("T")


@dataclass_transform(field_specifiers=(field, Field))
def record(cls: type[T]) -> type[T]:
    """``cls`` with a dataclass's ``__init__``, ``__eq__`` and ``__repr__`` (unhashable, as
    a mutable dataclass is), from its annotations in declaration order."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: a record runs no __post_init__ (make it a dataclass)")
    names = tuple(inspect.get_annotations(cls))
    defaults, factories = _defaults(cls, names)
    for method in (_init(cls, names, defaults, factories), _eq(names), _repr(names)):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    cls.__hash__ = None  # type: ignore[assignment]  # equal by value and mutable
    setattr(cls, "__match_args__", names)  # noqa: B010  (not a known attribute of a type)
    return cls


@dataclass_transform(field_specifiers=(field, Field), frozen_default=True)
def frozen_record(cls: type[T]) -> type[T]:
    """``record``, frozen as ``@dataclass(frozen=True)``: assigning or deleting a field raises
    ``dataclasses.FrozenInstanceError``, and equal records hash alike."""
    record(cls)
    names: tuple[str, ...] = cls.__match_args__  # type: ignore[attr-defined]

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self: Any) -> int:
        return hash(tuple(self.__dict__[name] for name in names))

    for method in (__setattr__, __delattr__, __hash__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        setattr(cls, method.__name__, method)
    return cls


def _defaults(cls: type, names: tuple[str, ...]) -> tuple[dict[str, Any],
                                                          dict[str, Callable[[], Any]]]:
    """Each field's default (left on the class, as a dataclass leaves it) or factory."""
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for name in names:
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            if value.default_factory is not MISSING:
                factories[name] = value.default_factory
                delattr(cls, name)
                continue
            value = value.default
            if value is not MISSING:
                setattr(cls, name, value)
        if value is not MISSING:
            defaults[name] = value
        elif defaults or factories:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    return defaults, factories


def _init(cls: type, names: tuple[str, ...], defaults: dict[str, Any],
          factories: dict[str, Callable[[], Any]]) -> Callable[..., None]:
    unset = object()

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments but "
                            f"{len(args)} were given")
        values = dict(zip(names, args, strict=False))
        for name in names[len(args):]:
            value = kwargs.pop(name, unset)
            if value is unset:
                if name in factories:
                    value = factories[name]()
                elif name in defaults:
                    value = defaults[name]
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
            values[name] = value
        if kwargs:
            word = next(iter(kwargs))
            how = "multiple values for" if word in values else "an unexpected keyword"
            raise TypeError(f"{cls.__name__}() got {how} argument {word!r}")
        self.__dict__.update(values)

    return __init__


def _eq(names: tuple[str, ...]) -> Callable[[Any, object], bool]:
    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        return tuple(mine[name] for name in names) == tuple(theirs[name] for name in names)

    return __eq__


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={self.__dict__[name]!r}" for name in names)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__
