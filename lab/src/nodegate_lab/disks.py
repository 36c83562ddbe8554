"""Virtual NVMe disks: sparse files on loop devices, bound into the node with by-id names.

The NVMe role insists on stable ``/dev/disk/by-id/nvme-*`` names. Containers run no udev,
so the node gets a tmpfiles.d entry that makes the same symlinks at every boot, pointing at
the loop devices bound into it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nodegate_lab import config
from nodegate_lab.config import Member
from nodegate_lab.proc import run

MODEL = "Nodegate_Lab_NVMe_1G"


@dataclass(frozen=True)
class Disk:
    image: Path
    loop: str  # /dev/loopN
    by_id: str  # /dev/disk/by-id/nvme-...


def by_id(member: Member, n: int) -> str:
    return f"/dev/disk/by-id/nvme-{MODEL}_LAB{member.index:02d}{n:02d}"


def _attached(image: Path) -> str | None:
    out = run(["losetup", "--noheadings", "--output", "NAME", "--associated", str(image)]).stdout
    names = out.split()
    return names[0] if names else None


def ensure(member: Member, count: int = config.DISKS_PER_NODE) -> list[Disk]:
    """Create (once) and attach the node's disk images; returns them in slot order."""
    disk_dir = member.dir / "disks"
    disk_dir.mkdir(parents=True, exist_ok=True)
    disks = []
    for n in range(1, count + 1):
        image = disk_dir / f"nvme{n}.img"
        if not image.exists():
            with image.open("wb") as fh:
                fh.truncate(config.DISK_SIZE_MIB * 1024 * 1024)
        loop = _attached(image) or run(["losetup", "--find", "--show", str(image)]
                                       ).stdout.strip()
        disks.append(Disk(image, loop, by_id(member, n)))
    (member.dir / "disks.json").write_text(json.dumps(
        [{"image": str(d.image), "loop": d.loop, "by_id": d.by_id} for d in disks], indent=1))
    return disks


def tmpfiles(disks: list[Disk]) -> str:
    """tmpfiles.d lines that recreate the by-id links inside the node at every boot."""
    return "".join(f"L+ {d.by_id} - - - - {d.loop}\n" for d in disks)


def release(member: Member) -> None:
    """Detach every loop device backed by this node's images."""
    for image in sorted((member.dir / "disks").glob("*.img")):
        loop = _attached(image)
        while loop is not None:
            run(["losetup", "--detach", loop], check=False)
            again = _attached(image)
            if again == loop:
                break
            loop = again


def lab_loops() -> list[str]:
    """Loop devices whose backing file is under the lab dir (for status and the down check)."""
    out = run(["losetup", "--noheadings", "--output", "NAME,BACK-FILE", "--list"]).stdout
    prefix = str(config.lab_dir())
    return [line.split()[0] for line in out.splitlines()
            if len(line.split()) > 1 and line.split()[1].startswith(prefix + "/")]
