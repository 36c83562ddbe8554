"""Fast checks of the per-host cgroups (each host's guests in a tree of their own): no root,
no containers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodegate_lab import cgroups, config
from nodegate_lab.supervisor import Supervisor

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
cgroup /var/lib/x/root/sys/fs/cgroup/systemd cgroup ro,nosuid,name=systemd 0 0
"""


def test_hierarchies_are_the_writable_ones_systemd_uses() -> None:
    assert cgroups.hierarchies(HYBRID) == [Path("/sys/fs/cgroup/systemd"),
                                          Path("/sys/fs/cgroup/unified")]
    assert cgroups.hierarchies("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n") == \
        [Path("/sys/fs/cgroup")]


def test_each_host_gets_its_own_group_per_instance() -> None:
    one, two = cgroups.host_group("node1"), cgroups.host_group("node2")
    assert one != two
    assert one == f"nodegate-lab{config.INSTANCE}/node1"
    assert one.startswith(cgroups.instance_group() + "/")


def test_enter_writes_the_pid_into_every_hierarchy(tmp_path: Path) -> None:
    roots = [tmp_path / "systemd", tmp_path / "unified"]
    for root in roots:
        root.mkdir()
    joined = cgroups.enter("nodegate-lab9/node3", pid=4242, roots=roots)
    assert joined == [r / "nodegate-lab9/node3" for r in roots]
    assert all((j / "cgroup.procs").read_text() == "4242\n" for j in joined)


def test_supervisor_never_boots_into_the_shared_root(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A cgroup that cannot be joined stops the host before nspawn runs."""
    blocker = tmp_path / "not-a-hierarchy"
    blocker.write_text("a file, so no cgroup can be made under it\n")
    monkeypatch.setattr(cgroups, "hierarchies", lambda mounts=None: [blocker])
    marker = tmp_path / "nspawn-ran"
    spec = {"argv": ["sh", "-c", f"touch {marker}"], "board": None,
            "cgroup": "nodegate-lab9/node1"}
    (tmp_path / "supervisor.json").write_text(json.dumps(spec))
    assert Supervisor(tmp_path).run() == 1
    assert not marker.exists()
    assert (tmp_path / "last-exit").read_text() == "1\n"
