"""Local storage: the md array (assembled or created once, never over a disk that holds data),
its mdadm.conf line, the filesystem (never forced) and its systemd mount unit by UUID."""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.files import FindInFile
from pyinfra.operations import files

from nodegate.facts.storage import Blkid, MdArray, MdArrays, MdSuperblocks
from roles.ops.common import TEMPLATES, cmd, q
from roles.ops.files import jinja_env


def find_array(arrays: dict[str, MdArray], array: str, uuids: set[str]) -> str | None:
    """The assembled array that is ours: by device path, md name, or a member's UUID."""
    base = Path(array).name
    for device, info in arrays.items():
        name = (info.get("name") or "").rsplit(":", 1)[-1]
        if device == array or name == base or info.get("uuid") in uuids:
            return device
    return None


@operation()
def md_array(array: str, devices: list[str], level: int, chunk_kib: int) -> \
        Generator[Any, None, None]:
    """Create the md array once. Disks that carry a superblock are never reused: a complete
    set is assembled, a partial or foreign one stops the host with a message."""
    supers = host.get_fact(MdSuperblocks, devices=devices)
    present = find_array(host.get_fact(MdArrays), array, set(supers.values()))
    if present:
        host.noop(f"md array {present} is assembled; never recreated")
        return
    if supers:
        if set(supers) == set(devices) and len(set(supers.values())) == 1:
            yield cmd("mdadm", "--assemble", q(array), *[q(d) for d in devices])
            return
        message = (f"devices {', '.join(sorted(supers))} carry md superblocks that do not form "
                   f"{array} from all of {', '.join(devices)}; nodegate never reuses such disks")
        yield cmd("echo", q(message), ">&2;", "exit", "1")
        return
    yield cmd("mdadm", "--create", q(array), "--run", "--metadata=1.2",
              q(f"--level={level}"), q(f"--chunk={chunk_kib}"),
              q(f"--raid-devices={len(devices)}"), q(f"--name={Path(array).name}"),
              *[q(d) for d in devices])


@operation()
def mdadm_conf(array: str, conf: str) -> Generator[Any, None, None]:
    """Record the array in mdadm.conf (else it comes back as md127 after a reboot)."""
    supers_uuid = None
    found = find_array(host.get_fact(MdArrays), array, set())
    if found:
        supers_uuid = host.get_fact(MdArrays)[found].get("uuid")
    if supers_uuid and host.get_fact(FindInFile, path=conf, pattern=f"UUID={supers_uuid}"):
        host.noop(f"{conf} lists {array}")
        return
    yield cmd("mkdir", "-p", q(str(Path(conf).parent)))
    yield cmd("mdadm", "--detail", "--brief", q(found or array), ">>", q(conf))


@operation()
def filesystem(device: str, fstype: str, stripe_unit_kib: int, stripe_width: int,
               label: str = "nodegate") -> Generator[Any, None, None]:
    """Make a filesystem on a device that holds none (never ``-f``: an existing one stays)."""
    found = host.get_fact(Blkid, device=device)
    if found and found.get("TYPE"):
        if found["TYPE"] != fstype:
            logger.warning(f"{host.name}: {device} holds {found['TYPE']}, not {fstype}; kept")
        host.noop(f"{device} already holds {found['TYPE']}")
        return
    mkfs = f"mkfs.{fstype}" if fstype.isalnum() else "false"
    if not stripe_unit_kib:  # one disk: no stripe geometry
        yield cmd(mkfs, "-q", "-L", q(label), q(device))
    elif fstype == "xfs":
        yield cmd("mkfs.xfs", "-q", "-L", q(label), "-d",
                  q(f"su={stripe_unit_kib}k,sw={stripe_width}"), q(device))
    else:
        stride = max(1, stripe_unit_kib // 4)
        yield cmd(mkfs, "-q", "-L", q(label),
                  "-E", q(f"stride={stride},stripe_width={stride * stripe_width}"), q(device))


@operation()
def mount_unit(device: str, mountpoint: str, fstype: str, options: list[str],
               by_udev_link: bool = True) -> Generator[Any, None, None]:
    """A systemd mount unit naming the filesystem by UUID (device names move, UUIDs do not).

    ``What=/dev/disk/by-uuid/...`` (systemd waits for the device); without udev (a container)
    ``What=UUID=...``, which mount(8) resolves itself.
    """
    found = host.get_fact(Blkid, device=device) or {}
    uuid = found.get("UUID", "UUID-OF-THE-NEW-FILESYSTEM")
    unit = mount_unit_name(mountpoint)
    what = f"/dev/disk/by-uuid/{uuid}" if by_udev_link else f"UUID={uuid}"
    changes = list(files.template._inner(
        src=str(TEMPLATES / "nvme/mount.unit.j2"), dest=f"/etc/systemd/system/{unit}",
        mode="644", jinja_env_kwargs=jinja_env(), what=what, mountpoint=mountpoint,
        fstype=fstype, options=",".join(options)))
    yield from changes
    if changes:
        yield cmd("systemctl", "daemon-reload")


_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.]")


def mount_unit_name(path: str) -> str:
    """``systemd-escape --path --suffix=mount``: /raid -> raid.mount, /mnt/a b -> mnt-a\\x20b."""
    trimmed = path.strip("/") or "-"
    out = []
    for index, char in enumerate(trimmed):
        if char == "/":
            out.append("-")
        elif _UNIT_SAFE.match(char) and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{b:02x}" for b in char.encode())
    return "".join(out) + ".mount"


__all__ = ["filesystem", "find_array", "md_array", "mdadm_conf", "mount_unit",
           "mount_unit_name"]
