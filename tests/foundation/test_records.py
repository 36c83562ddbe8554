"""``nodegate.records.record`` behaves as the dataclass it replaces on the cron path: the same
declaration gives the same constructor, equality, repr, pickling and match arguments."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from nodegate.battery.registry import CHECKS
from nodegate.probes.nvml import BoardSnapshot, GpuState, NvLinkState
from nodegate.records import frozen_record, record


@record
class Rec:
    index: int
    name: str | None = None
    links: list[int] = dataclasses.field(default_factory=list)
    flag: bool = dataclasses.field(default=False)


@dataclasses.dataclass
class Dc:
    index: int
    name: str | None = None
    links: list[int] = dataclasses.field(default_factory=list)
    flag: bool = dataclasses.field(default=False)


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}), ((1, "a"), {}), ((1, "a", [2], True), {}), ((), {"index": 3, "flag": True}),
    ((1,), {"links": [4, 5]}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_built_read_and_shown_as_the_dataclass(args: tuple[Any, ...],
                                               kwargs: dict[str, Any]) -> None:
    mine, theirs = Rec(*args, **kwargs), Dc(*args, **kwargs)
    assert vars(mine) == vars(theirs)
    assert repr(mine) == repr(theirs).replace("Dc(", "Rec(")
    assert mine == Rec(*args, **kwargs) and mine != Rec(99)
    assert mine != theirs  # another class is never equal, as between dataclasses
    assert pickle.loads(pickle.dumps(mine)) == mine
    assert Rec.__match_args__ == Dc.__match_args__


@pytest.mark.parametrize(("args", "kwargs"), [
    ((), {}), ((1, "a", [], True, 5), {}), ((1,), {"index": 2}), ((1,), {"nope": 1}),
])
def test_refused_where_the_dataclass_refuses(args: tuple[Any, ...],
                                             kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        Dc(*args, **kwargs)
    with pytest.raises(TypeError):
        Rec(*args, **kwargs)


def test_defaults_stay_on_the_class_and_factories_give_fresh_values() -> None:
    first, second = Rec(1), Rec(2)
    first.links.append(1)
    assert second.links == [] and Rec.name is None and Rec.flag is False
    assert not hasattr(Rec, "links")
    with pytest.raises(TypeError):
        hash(first)
    with pytest.raises(TypeError, match="non-default argument"):
        @record
        class Bad:
            a: int = 1
            b: int


def test_the_board_records_compare_by_value_and_survive_the_child_s_pickle() -> None:
    gpu = GpuState(index=0, uuid="GPU-0", nvlinks=[NvLinkState(link=0, active=True)])
    board = BoardSnapshot("570.133.20", None, 12080, 1, [gpu])
    again = pickle.loads(pickle.dumps(board))
    assert again == board and again.gpus[0].nvlinks[0].crc_errors is None
    assert GpuState(index=0) != GpuState(index=1)
    assert repr(GpuState(index=0)).startswith("GpuState(index=0, lost=False, ")
    assert not dataclasses.is_dataclass(gpu)  # replace/asdict refuse it: none is used on it


@frozen_record
class Frozen:
    code: int
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class FrozenDc:
    code: int
    tags: tuple[str, ...] = ()


def test_a_frozen_record_is_frozen_and_hashed_as_the_frozen_dataclass() -> None:
    mine, theirs = Frozen(1, ("a",)), FrozenDc(1, ("a",))
    assert repr(mine) == repr(theirs).replace("FrozenDc(", "Frozen(")
    assert hash(mine) == hash(Frozen(1, ("a",))) and len({mine, Frozen(1, ("a",))}) == 1
    for record_ in (mine, theirs):
        with pytest.raises(dataclasses.FrozenInstanceError):
            record_.code = 2  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del record_.code  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(mine)) == mine
    assert len(set(CHECKS.values())) == len(CHECKS)  # the check declarations hash as before


def test_a_record_refuses_a_post_init_it_would_not_run() -> None:
    with pytest.raises(TypeError, match="__post_init__"):
        @record
        class Late:
            a: int

            def __post_init__(self) -> None:
                pass
