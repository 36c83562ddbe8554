"""How the slow part runs on several pytest-xdist workers without two tests sharing a lab.

The slow tests mostly wait: on VM boots, systemd in the lab's containers, apt, Slurm and
deadlines. ``make test`` runs them on a few workers (``-n``, ``--dist loadgroup``); these rules
keep that honest:

- Each worker has its own lab instance (``NODEGATE_LAB_INSTANCE``: its own network names,
  subnet, lab directory, Soft-RoCE VMs and lock), so two workers never meet in one lab.
  Instances 0 (the demo's), 2 and 4 (fixed by tests that run a second lab) are left out.
- Every test file is one group (its module fixtures are built once, on one worker). The files
  that bring up ``nodegate-lab`` on the worker's instance are put in groups that keep the
  order the serial run has (the session lab first, then the files that reshape it).
- Groups go out longest first (``--no-loadscope-reorder`` keeps this order): the run lasts as
  long as its busiest worker.

Without xdist nothing changes: instance 3, collection order as written.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: Lab instances for workers gw0, gw1, ... (10.77.(7+N).0/24 each).
WORKER_INSTANCES: tuple[int, ...] = (3, 5, 6, 7, 8, 9)
#: The instance a serial run uses.
SERIAL_INSTANCE = 3

#: Files that share one worker's lab, in the order they must run there (the tests/lab session
#: lab refuses to come up over another lab, so it goes first).
LAB_GROUPS: dict[str, tuple[str, ...]] = {
    "lab-session": ("tests/lab/test_lab_hosts.py", "tests/roles/test_lab_e2e.py",
                    "tests/roles/test_lab_slurm.py"),
    "lab-upgrade": ("tests/roles/test_lab_upgrade.py", "tests/roles/test_lab_slurm_hooks.py",
                    "tests/roles/test_lab_drain_budget.py", "tests/roles/test_lab_sweep.py",
                    "tests/roles/test_lab_remediation.py"),
    "lab-multinode": ("tests/roles/test_lab_multinode.py",
                      "tests/roles/test_lab_multinode_group.py",
                      "tests/roles/test_lab_scale.py"),
    # one md VM (tests/shared_md_vm.py): the md role first, the NVMe file (pulls disks) last
    "md-vm": ("tests/roles/test_md_vm.py", "tests/storage/test_nvme_vm.py"),
}
#: Groups in the order they are handed out: longest first (measured durations, in
#: docs/dev/testing.md; the workers' timeline after each run shows them): the md VM and the
#: lab-upgrade group's lab (five files since the sweep and remediation tests joined it) start
#: at once, building the VM image and the lab base side by side, with lab-multinode on the
#: third worker. The Soft-RoCE VMs come next, on the first worker free: by then the md VM's
#: image is built (they boot from it), and their two boots no longer land on the md VM's own
#: (three TCG guests at once, beside two lab bring-ups, was the slowest stretch of the run).
#: Groups not named here follow, in collection order.
GROUP_ORDER: tuple[str, ...] = (
    "md-vm", "lab-upgrade", "lab-multinode", "tests/roles/test_softroce_vm.py", "lab-session",
    "tests/battery/test_front_ends.py", "tests/test_readme_demo.py",
)


def worker_index() -> int | None:
    """This process's xdist worker number (gw3 -> 3), or None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def set_lab_instance() -> None:
    """Give this worker its own lab instance; a serial run keeps the caller's or 3. Runs before
    any test imports nodegate_lab.config, which reads the variable once."""
    index = worker_index()
    if index is None:
        os.environ.setdefault("NODEGATE_LAB_INSTANCE", str(SERIAL_INSTANCE))
        return
    if index >= len(WORKER_INSTANCES):
        raise pytest.UsageError(f"at most {len(WORKER_INSTANCES)} xdist workers: each needs "
                                "its own lab instance")
    os.environ["NODEGATE_LAB_INSTANCE"] = str(WORKER_INSTANCES[index])


def group_of(path: str) -> str:
    """The xdist group of a slow test in ``path`` (relative to the checkout)."""
    for group, files in LAB_GROUPS.items():
        if path in files:
            return group
    return path


def _rank(group: str, path: str) -> tuple[int, int]:
    files = LAB_GROUPS.get(group, (path,))
    order = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
    return order, files.index(path) if path in files else 0


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler with our groups as its scopes: a test's scope is its file's
    group (a file, or one of ``LAB_GROUPS``), so a group runs whole on one worker.

    Why not ``@pytest.mark.xdist_group``: xdist 3.8 applies that mark by rewriting
    ``item._nodeid``, which pytest 9 no longer reads, so the mark silently groups nothing.
    Only for ``--dist loadgroup``; None leaves xdist's own scheduler."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0])

    return ByGroup(config, log)


def order_slow(items: list[pytest.Item], root: str) -> None:
    """Sort the slow tests by group order, in place (stable: within a file, the written
    order); fast tests keep their places. Only for xdist workers: a serial run keeps the
    order as written."""
    keyed: list[tuple[tuple[int, int], int, pytest.Item]] = []
    for position, item in enumerate(items):
        if item.get_closest_marker("slow") is None:
            continue
        path = os.path.relpath(str(item.path), root)
        keyed.append((_rank(group_of(path), path), position, item))
    slow_positions = [position for _, position, _ in keyed]
    for position, (_, _, item) in zip(slow_positions, sorted(keyed, key=lambda k: k[:2]),
                                      strict=True):
        items[position] = item


class Timeline:
    """Where each worker's time went: per worker, each group's first start and last stop (test
    reports' own start/stop, set-up to teardown), printed after the run. It is how the slow
    part's critical path is found in a CI log; it judges nothing."""

    def __init__(self) -> None:
        self.spans: dict[str, dict[str, list[float]]] = {}  # worker -> group -> [start, stop]

    def add(self, worker: str, nodeid: str, start: float, stop: float) -> None:
        group = group_of(nodeid.split("::", 1)[0])
        span = self.spans.setdefault(worker, {}).setdefault(group, [start, stop])
        span[0], span[1] = min(span[0], start), max(span[1], stop)

    def lines(self) -> list[str]:
        """One line per worker: its groups in the order it ran them, offsets in seconds from
        the first test's start."""
        if not self.spans:
            return []
        origin = min(s[0] for groups in self.spans.values() for s in groups.values())
        out = []
        for worker in sorted(self.spans):
            groups = sorted(self.spans[worker].items(), key=lambda kv: kv[1][0])
            busy = sum(stop - start for _, (start, stop) in groups)
            shown = ", ".join(f"{name} {start - origin:.0f}-{stop - origin:.0f}"
                              for name, (start, stop) in groups if stop - start >= 20)
            last = max(stop for _, stop in self.spans[worker].values()) - origin
            out.append(f"{worker}: ends at {last:.0f} s, {busy:.0f} s in {len(groups)} groups "
                       f"(those of 20 s or more: {shown})")
        return out
