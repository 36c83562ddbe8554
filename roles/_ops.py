"""nodegate's own pyinfra operations: pure functions from arguments and facts to commands.

pyinfra runs an operation's generator twice: while preparing (to report what would change,
``--dry``) and again while executing, with fresh facts. The operations here rely on that:
the array's UUID, the loaded module and the join plan are read when they exist. Facts only
read; what changes the node (the battery, the all-reduce, a drain) is a command yielded here,
and its verdict a command that runs after it (``verdict``, ``roles/_gate.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from fnmatch import fnmatchcase
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any

import jinja2
from pyinfra import logger
from pyinfra.api.command import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.api.host import Host
from pyinfra.api.operation import operation
from pyinfra.api.util import get_file_sha1
from pyinfra.context import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, FindInFile, Sha1File
from pyinfra.facts.rpm import RpmPackages
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import files

from nodegate.cluster.slurm import is_drained
from nodegate.facts.gate import JoinPlan, RecordedRun, join_argv
from nodegate.facts.gpu import GpuProcesses, SlurmNodeState, scontrol_failure
from nodegate.facts.kernel import (
    BootId,
    InstalledModule,
    LoadedModuleVersions,
    RunningDriverVersion,
)
from nodegate.facts.packages import DnfModuleState, HeldPackages
from nodegate.facts.storage import Blkid, MdArray, MdArrays, MdSuperblocks
from nodegate.versions import Version, rpm_compare
from roles import _gate, driver_pins
from roles._common import TEMPLATES, TargetOS, cmd, container, mount_unit_name, q, target_os

REBOOT_MARKER = "/run/nodegate/reboot-required"


def jinja_env() -> dict[str, Any]:
    """jinja2 settings for pyinfra's ``files.template`` on nodegate's templates.

    Its own environment already renders with StrictUndefined (a missing value stops the host
    with the template's line, never an empty string in a config file), keeps the trailing
    newline and does not autoescape; these add block trimming, which the templates are written
    for, and templates/ for includes. A new dict each call: pyinfra pops the loader out of it.
    """
    return {"trim_blocks": True, "lstrip_blocks": True,
            "loader": jinja2.FileSystemLoader(str(TEMPLATES))}


def put_template(name: str, src: str, dest: str, mode: str = "644", **values: Any) -> Any:
    """pyinfra's ``files.template`` for templates/<src>, with nodegate's jinja settings and a
    mode always set (pyinfra leaves an existing file's mode alone without one)."""
    return files.template(name=name, src=str(TEMPLATES / src), dest=dest, mode=mode,
                          jinja_env_kwargs=jinja_env(), **values)


# --- packages ---------------------------------------------------------------------------


def version_matches(installed: Iterable[str] | None, wanted: str) -> bool:
    """Installed at the wanted version? Upstream compared as versions (570.86.10 <
    570.133.20); a wanted Debian revision (2.26.2-1+cuda12.8) must match too."""
    want = Version(wanted)
    for text in installed or ():
        have = Version(text)
        if have == want and (not want.revision or have.revision.split(".el")[0]
                             == want.revision.split(".el")[0]):
            return True
    return False


def package_plan(os_: TargetOS, packages: list[str], version: str) -> tuple[list[str], list[str]]:
    """(packages not at ``version``, packages not held at it), from facts."""
    installed = host.get_fact(DebPackages) if os_.is_debian else host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    wrong = [p for p in packages if not version_matches(installed.get(p), version)]
    unheld = []
    for p in packages:
        if p not in held or (not os_.is_debian and rpm_compare(str(held.get(p)), version) != 0):
            unheld.append(p)
    return wrong, unheld


def stale_packages(os_: TargetOS, pattern: str, wanted: list[str]) -> list[str]:
    """Installed packages whose name matches ``pattern`` (a full-match regex) but that are not
    ``wanted``: another branch's names (nvidia-fabricmanager-570 once 580 is wanted), which
    conflict with the wanted ones and are held, so apt would refuse the change."""
    import re

    if not os_.is_debian:
        return []
    installed = host.get_fact(DebPackages)
    return sorted(p for p in installed if re.fullmatch(pattern, p) and p not in wanted)


@operation()
def pinned_packages(packages: list[str], version: str, label: str,
                    guard: list[str] | None = None,
                    replaces: list[str] | None = None, *,
                    locked_set: list[str] | None = None,
                    own_versions: list[str] | None = None) -> Generator[Any, None, None]:
    """Install ``packages`` at exactly ``version`` and hold them there (apt-mark hold / dnf
    versionlock), so no routine upgrade moves them. Downgrades are allowed: the profile wins.
    ``replaces`` (apt): installed packages the new ones take over from (another branch's
    names), unheld and removed in the same transaction.

    On apt the exact build comes from the role's apt preferences pin when ``version`` has no
    Debian revision (the driver: 570.133.20-*); a full version (libnccl2) is asked for as is.
    Not pyinfra's ``apt.packages``/``dnf.packages``: they neither hold a version nor allow the
    downgrade the profile may ask for. ``guard`` (apt globs of the set the pin covers): the
    install is simulated first and the host stops, naming them, when any package of the set
    would land at another version (roles/driver_pins.py); on a version change every installed
    package of the set is named too, so none stays behind at the old build. ``locked_set``
    (dnf globs, ``driver_pins.RPM_PIN_PATTERNS``): the whole set is version-locked after the
    install (``lock_matching``), so a version change releases every lock of it first.
    ``own_versions`` (apt): names the globs match that the repository versions on their own
    line (``driver_pins.DEBIAN_OWN_VERSIONS``): the guard does not count them. The guard also
    stops the host when one of ``packages`` has no build at ``version`` at all.
    """
    os_ = target_os()
    wrong, unheld = package_plan(os_, packages, version)
    if not wrong and not unheld and not replaces:
        host.noop(f"{label} {version} installed and held")
        return
    if os_.is_debian:
        # the whole driver set is held (hold_matching): a version change must release the
        # held dependencies too, or apt keeps libnvidia-ml1 & co. at the old version and
        # refuses the new metapackages' exact-version Depends; they are held again after
        released = sorted(
            n for n in (host.get_fact(HeldPackages) or {})
            if guard and wrong and any(fnmatchcase(n, p) for p in guard))
        unhold = sorted(set(released) | set(replaces or []))
        if unhold:
            yield cmd("apt-mark", "unhold", *[q(p) for p in unhold])
        # the set's packages no exact-version Depends reaches (nvidia-egl-common,
        # nvidia-legacy-check) would stay at the old build: they move with the rest
        behind = ([p for p in driver_pins.behind(host.get_fact(DebPackages) or {}, guard,
                                                 version, packages)
                   if p not in (replaces or []) and p not in (own_versions or [])]
                  if guard and wrong else [])
        if wrong or replaces:
            specs = [q(f"{p}={version}") if "-" in version else q(p) for p in wrong]
            specs += [q(p) for p in behind]
            specs += [q(f"{p}-") for p in replaces or []]
            yield cmd("apt-get", "update", "-q")
            if guard:
                plain = [f"{p}={version}" if "-" in version else p for p in wrong]
                plain += behind
                plain += [f"{p}-" for p in replaces or []]
                yield StringCommand(driver_pins.guard_script(
                    plain, guard, version, required=[] if "-" in version else wrong,
                    own=own_versions or ()))
            yield cmd("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                      "--allow-downgrades", "--allow-change-held-packages",
                      "-o", "Dpkg::Options::=--force-confdef",
                      "-o", "Dpkg::Options::=--force-confold", *specs)
        to_hold = sorted(set(wrong) | set(unheld))
        yield cmd("apt-mark", "hold", *[q(p) for p in to_hold])
        return
    installed = host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    # the whole driver set is locked (lock_matching): a version change must release the
    # locked dependencies too, or dnf's versionlock hides every other build of
    # libnvidia-ml & co. and the new nvidia-driver's "= 3:V" Requires cannot resolve;
    # they are locked again after
    set_locks = {n for n in held
                 if locked_set and wrong and any(fnmatchcase(n, p) for p in locked_set)}
    relock = sorted(set_locks | {p for p in set(wrong) | set(unheld) if p in held})
    if relock:
        yield cmd("dnf", "-q", "versionlock", "delete", *[q(p) for p in relock])
    downgrade = [p for p in wrong
                 if any(rpm_compare(v, version) > 0 for v in installed.get(p) or ())]
    install = [p for p in wrong if p not in downgrade]
    if install:
        yield cmd("dnf", "-y", "-q", "install", *[q(f"{p}-{version}") for p in install])
    if downgrade:
        yield cmd("dnf", "-y", "-q", "downgrade", *[q(f"{p}-{version}") for p in downgrade])
    yield cmd("dnf", "-q", "versionlock", "add",
              *[q(f"{p}-{version}") for p in sorted(set(wrong) | set(unheld))])


@operation()
def os_packages(packages: list[str]) -> Generator[Any, None, None]:
    """Install the (unpinned) packages that are missing; refresh the index only then, so a
    converged node costs no change."""
    os_ = target_os()
    installed = host.get_fact(DebPackages) if os_.is_debian else host.get_fact(RpmPackages)
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"installed: {', '.join(packages)}")
        return
    if os_.is_debian:
        yield cmd("apt-get", "update", "-q")
        yield cmd("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                  "--no-install-recommends", *[q(p) for p in missing])
    else:
        yield cmd("dnf", "-y", "-q", "install", *[q(p) for p in missing])


@operation()
def put_text(dest: str, text: str, mode: str = "644") -> Generator[Any, None, None]:
    """Write ``text`` to ``dest`` when it differs (pyinfra's put: compared by checksum)."""
    yield from files.put._inner(src=StringIO(text), dest=dest, mode=mode)


@operation()
def run_when(command: StringCommand) -> Generator[Any, None, None]:
    """One quoted command, for ``_if=other_op.did_change`` follow-ups (update-grub...)."""
    yield command


@operation()
def deb_from_url(package: str, url: str) -> Generator[Any, None, None]:
    """Install a .deb from a URL once (NVIDIA's cuda-keyring), when the package is absent.

    Not pyinfra's ``apt.deb``: it keeps the download in /tmp and reads its version on every run
    to upgrade; a keyring only has to be present, and nothing is left behind."""
    if package in host.get_fact(DebPackages):
        host.noop(f"{package} installed")
        return
    tmp = f"/tmp/nodegate-{package}.deb"
    yield cmd("curl", "-fsSL", "-o", q(tmp), q(url))
    yield cmd("dpkg", "-i", q(tmp))
    yield cmd("rm", "-f", q(tmp))


@operation()
def fetch_keyring(url: str, dest: str) -> Generator[Any, None, None]:
    """An apt keyring from a URL (armoured or not), once."""
    if host.get_fact(File, path=dest):
        host.noop(f"{dest} present")
        return
    yield cmd("mkdir", "-p", q(str(Path(dest).parent)))
    yield cmd("curl", "-fsSL", q(url), "|", "gpg", "--dearmor", "--yes", "-o", q(dest))


@operation()
def put_secret(dest: str, text: str | bytes, owner: str = "root",
               mode: str = "600") -> Generator[Any, None, None]:
    """Write a credentials file (``owner``, ``mode``: root 0600 by default; munge's key is
    munge 0400) compared by checksum only: unlike files.put it never prints a diff, so
    ``--diff`` cannot leak the secret into a terminal or CI log."""
    local = BytesIO(text) if isinstance(text, bytes) else StringIO(text)
    remote_sum = host.get_fact(Sha1File, path=dest)
    if remote_sum and remote_sum == get_file_sha1(local):
        remote: dict[str, Any] = dict(host.get_fact(File, path=dest) or {})
        if remote.get("mode") == int(mode) and remote.get("user") == owner:
            host.noop(f"{dest} up to date ({owner} 0{mode})")
            return
    else:
        yield cmd("install", "-d", "-m", "0755", q(str(Path(dest).parent)))
        yield cmd("install", "-m", f"0{mode}", "-o", q(owner), "-g", q(owner), "/dev/null",
                  q(dest))
        yield FileUploadCommand(local, dest, remote_temp_filename=host.get_temp_filename(dest))
    yield cmd("chown", q(f"{owner}:{owner}"), q(dest))
    yield cmd("chmod", q(mode), q(dest))


# --- reboot ------------------------------------------------------------------------------


def reboot_reasons(module: str, driver_version: str | None = None,
                   python: str | None = None) -> list[str]:
    """Why this node needs a reboot: the loaded module is not the installed one, the running
    driver is not ``driver_version`` (the version the role just installed), or a boot setting
    changed (base role marker). An absent module is not a reason: modprobe loads it."""
    reasons = []
    loaded = host.get_fact(LoadedModuleVersions).get(module)
    on_disk = host.get_fact(InstalledModule, module=module)
    if loaded and on_disk and on_disk["version"] and Version(loaded) != Version(on_disk["version"]):
        reasons.append(f"{module} {loaded} is loaded but {on_disk['version']} is installed")
    elif driver_version and python:
        running = host.get_fact(RunningDriverVersion, python=python)
        if running and Version(running) != Version(driver_version):
            reasons.append(f"driver {running} is running but {driver_version} is installed")
    if host.get_fact(File, path=REBOOT_MARKER):
        reasons.append(f"boot settings changed ({REBOOT_MARKER})")
    return reasons


def reboot_refusal(python: str, slurm_node: str, drained_override: bool = False) -> str | None:
    """Why rebooting this node now would hurt work on it, or None when it is safe.

    Safe means no compute process on any GPU and, for a node Slurm knows, drained (any drain
    reason: nodegate's or an administrator's). A node Slurm does not know (no ``scontrol``,
    or not in the cluster yet: a bring-up) runs no jobs. GPU processes that cannot be listed
    while the module is loaded refuse too: unknown is not idle. ``drained_override``
    (``nvidia_driver_drained``) vouches for the drain, never for the processes.
    """
    processes = host.get_fact(GpuProcesses, python=python)
    if processes is None and module_loaded("nvidia"):
        return ("GPU processes cannot be listed (no nvidia-smi, no NVML) while the nvidia "
                "module is loaded")
    if processes:
        listed = ", ".join(f"pid {p['pid']} {p['name']}" for p in processes[:5])
        return f"{len(processes)} GPU process(es) running ({listed}); drain first"
    if drained_override:
        return None
    state = host.get_fact(SlurmNodeState, node=slurm_node)
    failure = scontrol_failure(state)
    if failure:
        return f"Slurm cannot say whether {slurm_node} is drained ({failure}); not rebooting"
    if state and not is_drained(state):
        return f"Slurm node {slurm_node} is {state}, not drained; drain first"
    return None


def module_loaded(module: str) -> bool:
    """Whether ``module`` is loaded in the node's kernel now."""
    return module in host.get_fact(LoadedModuleVersions)


def slurm_node_name() -> str:
    """This host's name in Slurm (the site's ``slurm.node_name``, else the inventory name, as
    slurm_controller lists it). What Slurm says of it is read by this name before any drain,
    wait or reboot; a host Slurm does not know reads as not in Slurm."""
    return str((host.data.get("nodegate_slurm") or {}).get("node_name") or host.name)


def slurm_member() -> str | None:
    """``slurm_node_name()`` where this host is a Slurm node by its data (a site
    ``slurm.node_name``, or the slurm_node role configures its slurmd), else None: where the
    gate is scheduled and the join runs."""
    if (host.data.get("nodegate_slurm") or {}).get("node_name") or \
            host.data.get("slurm_node_controller"):
        return slurm_node_name()
    return None


@operation()
def reboot_if_needed(allow: bool, python: str, slurm_node: str, *, drained_override: bool = False,
                     module: str = "nvidia", driver_version: str | None = None,
                     reboot_timeout: int = 900) -> Generator[Any, None, None]:
    """Reboot only when the node needs it, this run allows it, and nothing is running on it.

    The GPU processes and the Slurm state are read in this operation, so while executing they
    are read right before the reboot (they are never kept: nodegate.fact_cache); a busy
    node fails this host with the reason instead.
    """
    reasons = reboot_reasons(module, driver_version, python)
    if not reasons:
        host.noop(f"no reboot needed ({module} loaded = installed)")
        return
    if not allow:
        message = (f"reboot needed but not allowed for this run: {'; '.join(reasons)} "
                   "(rerun with --data nvidia_driver_allow_reboot=true)")
        logger.warning(f"{host.name}: {message}")
        host.noop(message)
        return
    refusal = reboot_refusal(python, slurm_node, drained_override)
    if refusal:
        yield from fail_here(f"reboot refused ({'; '.join(reasons)}): {refusal}")
        return
    yield from reboot_and_wait(reboot_timeout)


def reboot_and_wait(timeout_s: int, interval_s: float = 2.0) -> Generator[Any, None, None]:
    """Reboot and wait, at most ``timeout_s``, until the node answers with a new boot id.

    Not pyinfra's ``server.reboot``: it proves the reboot by a smaller uptime, which never
    comes where /proc/uptime is the host kernel's (a container: the lab), so it waited out
    its whole timeout there. The boot id is new after every boot, on metal and in containers.
    """
    before: list[str | None] = []

    def remember(state: Any, host: Host) -> bool:
        before.append(host.get_fact(BootId))
        return before[0] is not None

    yield FunctionCommand(remember, (), {})
    yield StringCommand("( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &")

    def wait(state: Any, host: Host) -> bool:
        deadline = time.monotonic() + timeout_s
        time.sleep(min(5.0, timeout_s))
        host.disconnect()
        while time.monotonic() < deadline:
            host.connect(show_errors=False)
            if host.connected:
                now = host.get_fact(BootId)
                if now and now != before[0]:
                    logger.info(f"{host.name}: back after the reboot (boot id {now[:8]})")
                    return True
                host.disconnect()  # still going down: this connection is the old boot's
            time.sleep(interval_s)
        logger.error(f"{host.name}: did not come back with a new boot id within "
                     f"{timeout_s}s of the reboot")
        return False

    yield FunctionCommand(wait, (), {})


# --- services ----------------------------------------------------------------------------

JOURNAL_LINES = 20


def start_or_explain(unit: str, lines: int = JOURNAL_LINES) -> StringCommand:
    """``systemctl start`` that, when the unit fails, prints which unit and its last journal
    lines to stderr (pyinfra shows a failed command's output) and fails the host."""
    why = f"nodegate: {unit} failed to start; its last {lines} journal lines:"
    return cmd("systemctl", "start", q(unit), "||", "{", "echo", q(why), ">&2", ";",
               "journalctl", "--no-pager", "-o", "short-precise", "-n", str(lines), "-u",
               q(unit), ">&2", ";", "exit", "1", ";", "}")


@operation()
def driver_service(unit: str, module: str = "nvidia") -> Generator[Any, None, None]:
    """Start and enable a unit that needs the NVIDIA kernel module (nvidia-persistenced).

    Ordered after the driver: on metal the module is loaded first (``modprobe``), and while
    a stale module is loaded (a driver change waiting for its reboot) the unit is only
    enabled, since the new daemon cannot talk to the old module; it starts at that boot.
    A start that fails names the unit and its journal lines and fails the host.
    """
    start = not host.get_fact(SystemdStatus, services=[unit]).get(unit)
    if not start:
        host.noop(f"{unit} is running")
    elif not container():
        loaded = host.get_fact(LoadedModuleVersions).get(module)
        on_disk = host.get_fact(InstalledModule, module=module)
        if loaded and on_disk and on_disk["version"] and \
                Version(loaded) != Version(on_disk["version"]):
            host.noop(f"{unit} starts at the next boot: {module} {loaded} is loaded but "
                      f"{on_disk['version']} is installed")
            start = False
        elif not loaded:
            yield cmd("modprobe", q(module))
    if start:
        yield start_or_explain(unit)
    if not host.get_fact(SystemdEnabled, services=[unit]).get(unit):
        yield cmd("systemctl", "enable", q(unit))
    else:
        host.noop(f"{unit} is enabled")


# --- storage -----------------------------------------------------------------------------


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


# --- the gate hook -----------------------------------------------------------------------


@operation()
def health_gate(nodegate_bin: str, profile_path: str, fetch_dir: str,
                extra_args: list[str], *, subcommand: str = "health",
                level: str = "quick", fail_host: bool = True) -> Generator[Any, None, None]:
    """Run the battery on the node (``nodegate health|validate --json``, its report and exit
    code recorded there), bring the report to ``<fetch_dir>/<host>/<level>-latest.json``, and
    fail the host if the verdict is not PASS.

    Running the battery is this operation's change, on every run (it writes the node's
    reports), so a converged node counts it too. The fetch and the verdict follow it while
    executing; prepared, the operation shows only the run.
    """
    at = _gate.stem(level)
    yield _gate.recorded(at, *_gate.battery_argv(nodegate_bin, subcommand, profile_path,
                                                  extra_args))
    if not host.state.is_executing:
        return
    out = Path(fetch_dir) / host.name
    staging = out / f".{level}"
    yield from _gate.fetch(at, staging)

    def decide(me: Host) -> str | None:
        result = _gate.take(staging)
        _gate.keep(result, out / f"{level}-latest.json")
        return _gate.battery_verdict(me, result, out, subcommand=subcommand,
                                     fail_host=fail_host)

    yield verdict(decide)


#: Why a host was failed by ``verdict`` in this run, by host name (a rollout's summary).
FAILURES: dict[str, str] = {}


def verdict(decide: Callable[[Host], str | None]) -> FunctionCommand:
    """A command that, when it runs, asks ``decide`` and fails this host with the message it
    returns (None: the host carries on). The one way an operation here stops its host once
    the run executes; before that, while operations are prepared, ``roles._common.refuse``
    is the one way.

    pyinfra takes a Python command's return value as its status only when the function's
    parameters are literally named ``state`` and ``host``; any other signature's result is
    ignored. That convention is pyinfra's, not public API, so it lives here alone.
    """

    def _verdict(state: Any, host: Host) -> bool:
        message = decide(host)
        if message is None:
            return True
        logger.error(f"{host.name}: {message}")
        FAILURES[host.name] = message
        return False

    return FunctionCommand(_verdict, (), {})


def fail_here(message: str) -> Generator[Any, None, None]:
    """Fail this host at execution time with ``message`` (the other hosts carry on)."""
    yield verdict(lambda _host: message)


__all__ = ["FAILURES", "REBOOT_MARKER", "fail_here", "health_gate", "join_gate", "md_array",
           "mdadm_conf", "module_loaded", "mount_unit", "multinode_group", "os_packages",
           "pinned_packages", "put_secret", "put_template", "put_text", "reboot_and_wait",
           "reboot_if_needed", "reboot_refusal", "run_when", "slurm_member",
           "slurm_node_name", "verdict"]


@operation()
def multinode_group(*, nodegate_bin: str, profile_path: str, report_dir: str, fetch_dir: str,
                    peer: str, members: list[str], addresses: dict[str, str], port: int,
                    join_timeout_s: float,
                    fail_host: bool = True) -> Generator[Any, None, None]:
    """One group of the multi-node check: the new nodes ``members`` and the known-good ``peer``
    run ``nodegate multinode`` at the same time (this operation runs on all hosts in
    parallel); every other host has nothing to do in it. A member that failed earlier in the
    run is left out of the group (every host sees the same failed set, so all agree on it).

    The peer hosts the rendezvous and is never failed by the group's result (it is the
    reference); each new node's report is fetched to ``<fetch_dir>/<new>/multinode-latest.json``
    and, like the battery's, fails the host unless ``fail_host`` is false (deploy.py: the join
    gate drains it instead). Running the collectives is the change, on every host.
    """
    label = " + ".join([*members, peer])
    if host.name != peer and host.name not in members:
        host.noop(f"multinode: not in the group {label}")
        return
    executing = host.state.is_executing
    gone = [m for m in [peer, *members] if m != host.name and executing and _left_the_run(m)]
    active = [m for m in members if m not in gone]
    if peer in gone or not active:
        for partner in gone:
            logger.warning(f"{host.name}: multinode: {partner} is not in the run any more; "
                           f"no group run with it")
        host.noop(f"multinode: {', '.join(gone)} failed or left the run")
        return
    for partner in gone:
        logger.warning(f"{host.name}: multinode: {partner} is not in the run any more; "
                       f"the group runs without it")
    role = "host" if host.name == peer else "join"
    label = " + ".join([*active, peer])
    at = _gate.stem("multinode")
    yield _gate.recorded(at, *_gate.multinode_argv(
        nodegate_bin, profile=profile_path, role=role, endpoint=f"{addresses[peer]}:{port}",
        peer_name=",".join(active) if role == "host" else peer,
        rdzv_id=f"nodegate-{'-'.join(active)}-{peer}", local_addr=addresses[host.name],
        join_timeout_s=join_timeout_s, report_dir=report_dir, nnodes=len(active) + 1,
        group_index=active.index(host.name) if role == "join" else 0))
    if not executing:
        return
    out = Path(fetch_dir) / host.name
    staging = out / ".multinode"
    yield from _gate.fetch(at, staging, report=role == "join")

    def decide(me: Host) -> str | None:
        result = _gate.take(staging)
        summary = f"multinode {label}: nodegate multinode exited {result['exit']}"
        if role == "join":
            _gate.keep(result, out / "multinode-latest.json")
        return _gate.multinode_verdict(me, result, out if role == "join" else None,
                                       summary=summary, fail_host=fail_host)

    yield verdict(decide)


def _left_the_run(name: str) -> bool:
    """Has inventory host ``name`` failed, or left this run (no longer active)?"""
    state = host.state
    return any(h.name == name for h in state.failed_hosts) or \
        any(h.name == name and h not in state.active_hosts for h in state.inventory)


@operation()
def join_gate(nodegate_bin: str, level: str, node: str,
              report_dir: str, require: tuple[str, ...] = ()) -> Generator[Any, None, None]:
    """Resume the node in Slurm on a fresh passing ``level`` report, drain it otherwise.

    At execution time (the node's reports are there) the ``JoinPlan`` fact reads what the
    join would do; only a plan that changes the Slurm state (resume, drain) runs the real
    ``nodegate gate --mode join``, so a converged node counts no change. A node the join keeps
    out (drained now, or by an earlier run and still failing) fails the host with the same
    message either way (``_gate.held_message``), so the deploy's exit code follows the fleet's
    state, not whether this run changed it; a gate that could not run (controller
    unreachable: exit 3) fails it too, with nothing changed.
    """
    if not host.state.is_executing:
        host.noop(f"join gate runs after validation (level {level})")
        return
    args: dict[str, Any] = {"nodegate": nodegate_bin, "level": level, "node": node,
                            "report_dir": report_dir, "require": list(require)}
    plan = host.get_fact(JoinPlan, **args)
    if plan["exit"] != 0:
        yield from fail_here(_gate.join_exit_message(plan["exit"]))
        return
    if not _gate.join_changes(plan["decision"]):
        if _gate.held_out(plan["decision"]):  # drained by an earlier run: still a failure
            yield from fail_here(_gate.held_message(node, plan["decision"] or {}))
            return
        host.noop(_gate.join_summary(node, plan["decision"] or {}))
        return
    at = _gate.stem("join")
    yield _gate.recorded(at, *join_argv(**args))
    yield verdict(lambda me: _gate.join_verdict(me, node, me.get_fact(RecordedRun, stem=at)))


@operation()
def hold_matching(patterns: list[str], version: str) -> Generator[Any, None, None]:
    """Hold every installed package matching ``patterns`` at ``version`` (apt): the driver's
    whole set, not only the metapackages the role names, so no routine upgrade moves one
    library alone. The list is read on the node after the install (``driver_pins``)."""
    installed = host.get_fact(DebPackages)
    held = host.get_fact(HeldPackages)
    pin = f"{version}-*"
    at_version = [n for n, versions in installed.items()
                  if any(fnmatchcase(n, p) for p in patterns)
                  and any(fnmatchcase(v, pin) for v in versions)]
    if at_version and all(n in held for n in at_version):
        host.noop(f"{len(at_version)} package(s) at {version} held")
        return
    yield StringCommand(driver_pins.hold_script(patterns, version))


@operation()
def lock_matching(patterns: list[str], version: str) -> Generator[Any, None, None]:
    """Version-lock every installed package matching ``patterns`` at ``version`` (dnf): the
    driver's whole set, as ``hold_matching`` holds it on apt, not only the packages the
    role names (tests/roles/data/driver-packages/RHEL9.md). Read on the node after the
    install (``driver_pins.lock_script``); no change when all of them are locked there."""
    installed = host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    at_version = [n for n, versions in installed.items()
                  if any(fnmatchcase(n, p) for p in patterns)
                  and any(rpm_compare(str(v), version) == 0 for v in versions or ())]
    if at_version and all(held.get(n) is not None and rpm_compare(str(held.get(n)), version) == 0
                          for n in at_version):
        host.noop(f"{len(at_version)} package(s) at {version} version-locked")
        return
    yield StringCommand(driver_pins.lock_script(patterns, version))


@operation()
def dnf_module_stream(module: str, stream: str) -> Generator[Any, None, None]:
    """Enable ``module:stream`` (EL8/9 modularity), resetting another enabled stream first:
    NVIDIA's EL9 repository publishes each driver branch as a stream of ``nvidia-driver``
    (``570-open``, ``570-dkms``), and without it dnf offers only the default stream's
    packages. Not pyinfra's ``dnf.packages``: it has no module support."""
    state = host.get_fact(DnfModuleState, module=module)
    if state.get("stream") == stream and state.get("state") == "enabled":
        host.noop(f"{module}:{stream} enabled")
        return
    if state.get("state") == "enabled":
        yield cmd("dnf", "-y", "-q", "module", "reset", q(module))
    yield cmd("dnf", "-y", "-q", "module", "enable", q(f"{module}:{stream}"))
