"""The rules that keep a parallel test run honest (tests/parallel.py): every worker its own lab
instance, never one a fixed-instance test or the demo uses; the files that share a lab on one
worker, in their order; slow groups handed out longest first; fast tests where they were."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests import parallel
from tests.conftest import ROOT

#: Instances others hold: the demo's lab (0) and the tests that run a second lab (2, 4).
TAKEN = {0, 2, 4}


def test_worker_instances_are_distinct_and_never_one_others_hold() -> None:
    instances = parallel.WORKER_INSTANCES
    assert len(set(instances)) == len(instances)
    assert not TAKEN & set(instances)
    assert parallel.SERIAL_INSTANCE not in TAKEN
    assert parallel.WORKER_INSTANCES[0] == parallel.SERIAL_INSTANCE


@pytest.mark.parametrize(("worker", "instance"), [("gw0", "3"), ("gw1", "5"), ("gw3", "7")])
def test_each_worker_gets_its_own_instance(monkeypatch: pytest.MonkeyPatch, worker: str,
                                           instance: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("NODEGATE_LAB_INSTANCE", "0")
    parallel.set_lab_instance()
    assert parallel.worker_index() == int(worker[2:])
    assert os.environ["NODEGATE_LAB_INSTANCE"] == instance


def test_a_serial_run_keeps_the_callers_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setenv("NODEGATE_LAB_INSTANCE", "4")
    parallel.set_lab_instance()
    assert os.environ["NODEGATE_LAB_INSTANCE"] == "4"
    monkeypatch.delenv("NODEGATE_LAB_INSTANCE")
    parallel.set_lab_instance()
    assert os.environ["NODEGATE_LAB_INSTANCE"] == str(parallel.SERIAL_INSTANCE)


def test_more_workers_than_instances_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{len(parallel.WORKER_INSTANCES)}")
    with pytest.raises(pytest.UsageError, match="own lab instance"):
        parallel.set_lab_instance()


def test_every_named_file_and_group_exists() -> None:
    named = [f for files in parallel.LAB_GROUPS.values() for f in files]
    assert len(named) == len(set(named)), "a file in two lab groups"
    for path in named:
        assert (ROOT / path).is_file(), path
    for group in parallel.GROUP_ORDER:
        assert group in parallel.LAB_GROUPS or (ROOT / group).is_file(), group
    assert set(parallel.LAB_GROUPS) <= set(parallel.GROUP_ORDER)


def test_a_file_is_its_own_group_unless_it_shares_a_lab() -> None:
    assert parallel.group_of("tests/roles/test_lab_slurm_hooks.py") == "lab-upgrade"
    assert parallel.group_of("tests/roles/test_softroce_vm.py") == \
        "tests/roles/test_softroce_vm.py"
    # the md VM's files share one boot: the md role first, the NVMe file (pulls disks) last
    assert parallel.LAB_GROUPS["md-vm"] == ("tests/roles/test_md_vm.py",
                                            "tests/storage/test_nvme_vm.py")
    assert parallel.group_of("tests/storage/test_nvme_vm.py") == "md-vm"


def _item(path: str, slow: bool) -> Any:
    marker = object() if slow else None
    return SimpleNamespace(path=ROOT / path, name=path,
                           get_closest_marker=lambda name: marker if name == "slow" else None)


def test_slow_tests_go_out_by_group_order_and_fast_ones_keep_their_places() -> None:
    fast = _item("tests/foundation/test_layers.py", slow=False)
    demo = _item("tests/test_readme_demo.py", slow=True)
    hooks = _item("tests/roles/test_lab_slurm_hooks.py", slow=True)
    upgrade = _item("tests/roles/test_lab_upgrade.py", slow=True)
    other = _item("tests/load/test_fsdp.py", slow=True)
    items = [demo, fast, other, hooks, upgrade]
    parallel.order_slow(cast(list[pytest.Item], items), str(ROOT))
    assert items[1] is fast
    # lab-upgrade is first in GROUP_ORDER, its files in LAB_GROUPS order; unnamed files last
    assert [i for i in items if i is not fast] == [upgrade, hooks, demo, other]


def test_the_scheduler_groups_only_under_loadgroup() -> None:
    def config(dist: str) -> Any:
        return SimpleNamespace(getoption=lambda name, default=None: dist)

    assert parallel.make_scheduler(config("load"), None) is None
    assert parallel.make_scheduler(config("no"), None) is None


def test_the_makefile_never_asks_for_more_workers_than_instances() -> None:
    text = Path(ROOT / "Makefile").read_text(encoding="utf-8")
    for knob in ("FAST_WORKERS", "TEST_WORKERS"):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{knob} ?="))
        assert 0 < int(line.split("?=")[1]) <= len(parallel.WORKER_INSTANCES), line


def test_the_timeline_gives_each_worker_its_groups_in_order_from_the_first_start() -> None:
    timeline = parallel.Timeline()
    timeline.add("gw1", "tests/roles/test_lab_e2e.py::test_a", 130.0, 400.0)
    timeline.add("gw0", "tests/roles/test_md_vm.py::test_a", 100.0, 600.0)
    timeline.add("gw0", "tests/storage/test_nvme_vm.py::test_b", 600.0, 700.0)
    timeline.add("gw0", "tests/load/test_x.py::test_c", 700.0, 710.0)
    assert timeline.lines() == [
        "gw0: ends at 610 s, 610 s in 2 groups (those of 20 s or more: md-vm 0-600)",
        "gw1: ends at 300 s, 270 s in 1 groups (those of 20 s or more: lab-session 30-300)",
    ]
    assert parallel.Timeline().lines() == []
