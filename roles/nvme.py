"""nvme: the local NVMe disks as one md RAID0 with xfs, mounted by UUID. Never recreated.

Layouts: ``raid0`` (md, the default for two or more disks) and ``single`` (xfs directly on
one disk: profile ``nvme.devices: 1``, a site listing one disk, or ``nvme_layout=single``;
also what a kernel without md, such as the lab machine's, allows).

Disks are named by ``/dev/disk/by-id`` (kernel names move between boots). An array that
exists, assembled or only as superblocks on its members, is kept: assembled if needed, never
re-created; disks with a foreign or partial superblock stop the host. mdadm.conf is written
and the initramfs rebuilt, or the array comes back as md127. xfs gets the stripe geometry
(su = chunk, sw = disks); the mount is a systemd unit with noatime,nofail; fstrim.timer on.
nvme-cli and fio, which the battery's SMART and throughput checks run, are installed with the
array's tools.
"""

from __future__ import annotations

from pyinfra import logger
from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.operations import files, systemd

from nodegate.facts.storage import Blkid, MdArrays, MdSuperblocks
from roles.defaults import role_defaults
from roles.ops.common import cmd, container, is_deploy_file, knob, profile, refuse, target_os
from roles.ops.packages import ensure_packages
from roles.ops.server import run_when
from roles.ops.storage import (
    filesystem,
    find_array,
    md_array,
    mdadm_conf,
    mount_unit,
    mount_unit_name,
)


def nvme_devices() -> list[str]:
    devices = [str(d) for d in knob("nvme_devices", site="nvme.devices") or []]
    if knob("nvme_require_by_id"):
        loose = [d for d in devices if not d.startswith("/dev/disk/by-id/")]
        if loose:
            raise DeployError(f"{host.name}: nvme devices must be /dev/disk/by-id names "
                              f"(kernel names move between boots): {', '.join(loose)}")
    return devices


LAYOUTS = ("raid0", "single")
#: What the battery's storage checks run on the node (nodegate.battery.storage): the SMART
#: log per drive and the array's throughput; both are packaged under these names on Debian,
#: Ubuntu and RHEL.
HEALTH_TOOLS = ("nvme-cli", "fio")


def nvme_layout(devices: list[str]) -> str:
    """``nvme_layout``, else ``single`` when the profile counts one disk or the site lists one,
    else ``raid0``."""
    layout = knob("nvme_layout")
    if layout is None:
        expected = (profile().get("nvme") or {}).get("devices")
        layout = "single" if expected == 1 or len(devices) == 1 else "raid0"
    if layout not in LAYOUTS:
        raise DeployError(f"{host.name}: nvme_layout must be one of {', '.join(LAYOUTS)}, "
                          f"not {layout!r}")
    return str(layout)


@deploy("nodegate nvme: NVMe RAID0, xfs, mounted by UUID", data_defaults=role_defaults("nvme"))
def nvme() -> None:
    devices = nvme_devices()
    if not devices:
        host.noop("no NVMe devices listed for this host (site nvme.devices)")
        return
    if nvme_layout(devices) == "single":
        _single(devices)
        return
    os_ = target_os()
    array = str(knob("nvme_array"))
    level = int(knob("nvme_raid_level", "nvme.raid_level") or 0)
    chunk = int(knob("nvme_chunk_kib"))
    mountpoint, fstype, options = _mount_settings()
    expected = (profile().get("nvme") or {}).get("devices")
    if isinstance(expected, int) and expected != len(devices):
        logger.warning(f"{host.name}: profile expects {expected} NVMe devices, site lists "
                       f"{len(devices)}")
    if level != 0:
        raise DeployError(f"{host.name}: nvme role builds RAID0 only (nvme.raid_level={level})")

    supers = host.get_fact(MdSuperblocks, devices=devices)
    assembled = find_array(host.get_fact(MdArrays), array, set(supers.values()))
    if supers and not assembled and (set(supers) != set(devices)
                                     or len(set(supers.values())) != 1):
        refuse(f"NVMe devices {', '.join(sorted(supers))} carry md superblocks that do not form "
               f"one array of all listed devices; nodegate never reuses disks that hold an "
               "array (inspect with mdadm --examine; wipe by hand only if the data is disposable)")
        return

    ensure_packages("nvme", ["mdadm", "xfsprogs" if fstype == "xfs" else "e2fsprogs",
                             *HEALTH_TOOLS],
                    name="nvme: mdadm, filesystem tools, nvme-cli and fio")
    md_array(name=f"nvme: md RAID{level} {array} from {len(devices)} disks", array=array,
             devices=devices, level=level, chunk_kib=chunk)
    conf = mdadm_conf(name=f"nvme: {array} in {os_.mdadm_conf}", array=array,
                      conf=os_.mdadm_conf)
    run_when(name="nvme: rebuild the initramfs with the array", _if=conf.did_change,
             command=cmd(*os_.initramfs))
    filesystem(name=f"nvme: {fstype} on {array} (su={chunk}k, sw={len(devices)})",
               device=array, fstype=fstype, stripe_unit_kib=chunk,
               stripe_width=len(devices))
    _mount(array, mountpoint, fstype, options)


def _mount_settings() -> tuple[str, str, list[str]]:
    """(mountpoint, filesystem, mount options with noatime,nofail always in)."""
    mountpoint = str(knob("nvme_mountpoint", "nvme.mountpoint") or "/raid")
    fstype = str(knob("nvme_filesystem", "nvme.filesystem") or "xfs")
    options = [str(o) for o in knob("nvme_mount_options", "nvme.mount_options")
               or ["noatime", "nofail"]]
    for required in ("noatime", "nofail"):
        if required not in options:
            options.append(required)
    return mountpoint, fstype, options


def _mount(device: str, mountpoint: str, fstype: str, options: list[str]) -> None:
    """The mount unit by filesystem UUID, mounted and enabled; fstrim.timer."""
    files.directory(name=f"nvme: {mountpoint}", path=mountpoint)
    unit = mount_unit_name(mountpoint)
    mount_unit(name=f"nvme: {unit} by UUID ({','.join(options)})", device=device,
               mountpoint=mountpoint, fstype=fstype, options=options,
               by_udev_link=container() is None)
    systemd.service(name=f"nvme: {unit} mounted and enabled", service=unit, running=True,
                    enabled=True)
    virt = container()
    if knob("nvme_fstrim") and virt:
        host.noop(f"fstrim.timer skipped: in a {virt} container TRIM of the disks is the "
                  "host's job")
    elif knob("nvme_fstrim"):
        systemd.service(name="nvme: fstrim.timer", service="fstrim.timer", running=True,
                        enabled=True)


def _single(devices: list[str]) -> None:
    """xfs directly on the first listed disk; a disk that holds anything else is refused."""
    device = devices[0]
    if len(devices) > 1:
        logger.warning(f"{host.name}: nvme layout single uses {device}; "
                       f"{len(devices) - 1} other listed disk(s) are left untouched")
    mountpoint, fstype, options = _mount_settings()
    found = host.get_fact(Blkid, device=device) or {}
    held = found.get("TYPE")
    if held and held != fstype:
        refuse(f"NVMe device {device} holds {held}, not {fstype}; nodegate never reformats a "
               "disk (inspect with blkid; wipe by hand only if the data is disposable)")
        return
    ensure_packages("nvme", ["xfsprogs" if fstype == "xfs" else "e2fsprogs", *HEALTH_TOOLS],
                    name="nvme: filesystem tools, nvme-cli and fio")
    filesystem(name=f"nvme: {fstype} on {device} (single disk)", device=device,
               fstype=fstype, stripe_unit_kib=0, stripe_width=1)
    _mount(device, mountpoint, fstype, options)


if is_deploy_file(globals()):
    nvme()
