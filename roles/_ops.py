"""nodegate's own pyinfra operations: pure functions from arguments and facts to commands.

pyinfra runs an operation's generator twice: while preparing (to report what would change,
``--dry``) and again while executing, with fresh facts. The operations here rely on that:
the array's UUID, the loaded module and the gate's verdict are read when they exist.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from io import StringIO
from pathlib import Path
from typing import Any

import jinja2
from pyinfra import logger
from pyinfra.api.command import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.api.operation import operation
from pyinfra.api.util import get_file_sha1
from pyinfra.context import host
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, FindInFile, Sha1File
from pyinfra.facts.rpm import RpmPackages
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import files, server

from nodegate.facts.gate import GateReport, JoinDecision, MultinodeRun
from nodegate.facts.kernel import InstalledModule, LoadedModuleVersions
from nodegate.facts.packages import HeldPackages
from nodegate.facts.storage import Blkid, MdArray, MdArrays, MdSuperblocks
from nodegate.report.fleet_summary import write_copy
from nodegate.versions import Version, rpm_compare
from roles._common import TEMPLATES, TargetOS, cmd, container, mount_unit_name, q, target_os

REBOOT_MARKER = "/run/nodegate/reboot-required"
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True, lstrip_blocks=True,
                          autoescape=False)


def render(name: str, **values: Any) -> str:
    """Render templates/<name> with jinja2 (StrictUndefined: a missing value is an error)."""
    return _ENV.get_template(name).render(**values)


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


@operation()
def pinned_packages(packages: list[str], version: str, label: str) -> Generator[Any, None, None]:
    """Install ``packages`` at exactly ``version`` and hold them there (apt-mark hold / dnf
    versionlock), so no routine upgrade moves them. Downgrades are allowed: the profile wins.

    On apt the exact build comes from the role's apt preferences pin when ``version`` has no
    Debian revision (the driver: 570.133.20-*); a full version (libnccl2) is asked for as is.
    Not pyinfra's ``apt.packages``/``dnf.packages``: they neither hold a version nor allow the
    downgrade the profile may ask for.
    """
    os_ = target_os()
    wrong, unheld = package_plan(os_, packages, version)
    if not wrong and not unheld:
        host.noop(f"{label} {version} installed and held")
        return
    if os_.is_debian:
        if wrong:
            specs = [q(f"{p}={version}") if "-" in version else q(p) for p in wrong]
            yield cmd("apt-get", "update", "-q")
            yield cmd("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                      "--allow-downgrades", "--allow-change-held-packages",
                      "-o", "Dpkg::Options::=--force-confdef",
                      "-o", "Dpkg::Options::=--force-confold", *specs)
        to_hold = sorted(set(wrong) | set(unheld))
        yield cmd("apt-mark", "hold", *[q(p) for p in to_hold])
        return
    installed = host.get_fact(RpmPackages)
    held = host.get_fact(HeldPackages)
    relock = sorted(p for p in set(wrong) | set(unheld) if p in held)
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
def put_secret(dest: str, text: str) -> Generator[Any, None, None]:
    """Write a credentials file (root, 0600) compared by checksum only: unlike files.put it
    never prints a diff, so ``--diff`` cannot leak the secret into a terminal or CI log."""
    local = StringIO(text)
    remote_sum = host.get_fact(Sha1File, path=dest)
    if remote_sum and remote_sum == get_file_sha1(local):
        remote: dict[str, Any] = dict(host.get_fact(File, path=dest) or {})
        if remote.get("mode") == 600 and remote.get("user") == "root":
            host.noop(f"{dest} up to date (0600)")
            return
    else:
        yield cmd("install", "-d", "-m", "0755", q(str(Path(dest).parent)))
        yield cmd("install", "-m", "0600", "-o", "root", "-g", "root", "/dev/null", q(dest))
        yield FileUploadCommand(local, dest, remote_temp_filename=host.get_temp_filename(dest))
    yield cmd("chown", "root:root", q(dest))
    yield cmd("chmod", "600", q(dest))


# --- reboot ------------------------------------------------------------------------------


def reboot_reasons(module: str) -> list[str]:
    """Why this node needs a reboot: the loaded module is not the installed one, or a boot
    setting changed (base role marker). An absent module is not a reason: modprobe loads it."""
    reasons = []
    loaded = host.get_fact(LoadedModuleVersions).get(module)
    on_disk = host.get_fact(InstalledModule, module=module)
    if loaded and on_disk and on_disk["version"] and Version(loaded) != Version(on_disk["version"]):
        reasons.append(f"{module} {loaded} is loaded but {on_disk['version']} is installed")
    if host.get_fact(File, path=REBOOT_MARKER):
        reasons.append(f"boot settings changed ({REBOOT_MARKER})")
    return reasons


@operation()
def reboot_if_needed(allow: bool, module: str = "nvidia",
                     reboot_timeout: int = 900) -> Generator[Any, None, None]:
    """Reboot only when the node needs it and this run allows it; otherwise say so."""
    reasons = reboot_reasons(module)
    if not reasons:
        host.noop(f"no reboot needed ({module} loaded = installed)")
        return
    if not allow:
        message = (f"reboot needed but not allowed for this run: {'; '.join(reasons)} "
                   "(rerun with --data nvidia_driver_allow_reboot=true)")
        logger.warning(f"{host.name}: {message}")
        host.noop(message)
        return
    yield from server.reboot._inner(delay=30, interval=5, reboot_timeout=reboot_timeout)


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
    text = render("nvme/mount.unit.j2", what=what, mountpoint=mountpoint, fstype=fstype,
                  options=",".join(options))
    changes = list(files.put._inner(src=StringIO(text), dest=f"/etc/systemd/system/{unit}",
                                    mode="644"))
    yield from changes
    if changes:
        yield cmd("systemctl", "daemon-reload")


# --- the gate hook -----------------------------------------------------------------------


@operation()
def health_gate(nodegate_bin: str, profile_path: str, fetch_dir: str,
                extra_args: list[str], *, subcommand: str = "health",
                level: str = "quick", fail_host: bool = True) -> Generator[Any, None, None]:
    """Run ``nodegate health`` on the node once configured, keep its JSON report locally
    (``<fetch_dir>/<host>/quick-latest.json``), and fail the host if the verdict is not PASS.

    The check runs as a fact while executing (not while preparing, when the node is not yet
    configured), so a passing gate is not counted as a change.
    """
    if not host.state.is_executing:
        host.noop("validation gate runs after the roles (nodegate health)")
        return
    result = host.get_fact(GateReport, nodegate=nodegate_bin, profile=profile_path,
                           extra_args=extra_args, subcommand=subcommand)
    out = Path(fetch_dir) / host.name
    out.mkdir(parents=True, exist_ok=True)
    if result["report"] is not None:
        write_copy(out / f"{level}-latest.json", result["report"])  # with its fleet summary
    if result["exit"] == 0:
        host.noop(f"validation gate passed (report in {out})")
        return
    if not fail_host and result["exit"] == 1:
        host.noop(f"validation gate FAILED (report in {out}); the join gate drains the node")
        return
    message = (f"validation gate: nodegate {subcommand} exited {result['exit']} "
               f"(1 = a check failed, 2 = bad input, 3 = could not run); report in {out}")

    yield from fail_here(message)


def fail_here(message: str) -> Generator[Any, None, None]:
    """Fail this host at execution time with ``message`` (the other hosts carry on): the
    one way an operation here stops its host once the run executes. Before that, while
    operations are prepared, ``roles._common.refuse`` is the one way.

    pyinfra takes a Python command's return value as its status only when the function's
    parameters are literally named ``state`` and ``host``; any other signature's result is
    ignored. That convention is pyinfra's, not public API, so it lives here alone.
    """
    who = host.name

    def _fail(state: Any, host: Any) -> bool:
        logger.error(f"{who}: {message}")
        return False

    yield FunctionCommand(_fail, (), {})


__all__ = ["REBOOT_MARKER", "fail_here", "health_gate", "join_gate", "md_array",
           "mdadm_conf", "mount_unit", "multinode_pair", "os_packages", "pinned_packages",
           "put_secret", "put_text", "reboot_if_needed", "render", "run_when"]


@operation()
def multinode_pair(*, nodegate_bin: str, profile_path: str, report_dir: str, fetch_dir: str,
                   peer: str, new: str, addresses: dict[str, str], port: int,
                   join_timeout_s: float, fail_host: bool = True) -> Generator[Any, None, None]:
    """One pair of the multi-node check: ``new`` and the known-good ``peer`` run
    ``nodegate multinode`` at the same time (this operation runs on both hosts in parallel);
    every other host has nothing to do in it.

    The peer hosts the rendezvous and is never failed by its partner's result (it is the
    reference); the new node's report is fetched to ``<fetch_dir>/<new>/multinode-latest.json``
    and, like the battery's, fails the host unless ``fail_host`` is false (deploy.py: the join
    gate drains it instead).
    """
    if host.name not in (peer, new):
        host.noop(f"multinode: not in the pair {new} + {peer}")
        return
    if not host.state.is_executing:
        host.noop(f"multinode: all-reduce {new} + {peer} runs after validation")
        return
    partner = new if host.name == peer else peer
    gone = [h for h in host.state.failed_hosts if h.name == partner] or \
        [h for h in host.state.inventory if h.name == partner and h not in host.state.active_hosts]
    if gone:
        logger.warning(f"{host.name}: multinode: {partner} is not in the run any more; "
                       f"no pair run with it")
        host.noop(f"multinode: {partner} failed or left the run")
        return
    role = "host" if host.name == peer else "join"
    result = host.get_fact(MultinodeRun, nodegate=nodegate_bin, profile=profile_path, role=role,
                           endpoint=f"{addresses[peer]}:{port}", peer_name=partner,
                           rdzv_id=f"nodegate-{new}-{peer}", local_addr=addresses[host.name],
                           join_timeout_s=join_timeout_s, report_dir=report_dir)
    summary = f"multinode {new} + {peer}: nodegate multinode exited {result['exit']}"
    if role == "host":
        if result["exit"] != 0:
            logger.warning(f"{host.name}: {summary} (the node under test is judged, not this "
                           "one)")
        host.noop(summary)
        return
    out = Path(fetch_dir) / host.name
    out.mkdir(parents=True, exist_ok=True)
    if result["report"] is not None:
        write_copy(out / "multinode-latest.json", result["report"])  # with its fleet summary
    if result["exit"] == 0 or (not fail_host and result["exit"] == 1):
        host.noop(f"{summary} (report in {out})")
        return
    message = f"{summary} (1 = a check failed, 2 = bad input, 3 = could not run); report in {out}"
    yield from fail_here(message)


@operation()
def join_gate(nodegate_bin: str, level: str, node: str,
              report_dir: str, require: tuple[str, ...] = ()) -> Generator[Any, None, None]:
    """Resume the node in Slurm on a fresh passing ``level`` report, drain it otherwise.

    Runs at execution time on the node (its reports are there); an unchanged Slurm state is a
    no-op, a resume or drain counts as this deploy's change, and a gate that could not run
    (controller unreachable: exit 3) fails the host.
    """
    if not host.state.is_executing:
        host.noop(f"join gate runs after validation (level {level})")
        return
    result = host.get_fact(JoinDecision, nodegate=nodegate_bin, level=level, node=node,
                           report_dir=report_dir, require=list(require))
    decision = result["decision"] or {}
    summary = (f"join gate: {node} {decision.get('action', 'none')}: "
               f"{decision.get('why', '')} [{decision.get('after', '')}]")
    if result["exit"] != 0:
        message = (f"join gate: nodegate gate exited {result['exit']} (2 = bad input, "
                   "3 = scheduler unreachable; nothing was changed)")
    elif decision.get("action") == "drain":
        # the node did not pass its gate: drained (now or before), and the host fails
        message = summary
        if decision.get("changed"):
            def _drained() -> bool:
                logger.warning(f"{host.name}: {summary}")
                return True

            yield FunctionCommand(_drained, (), {})
    elif not decision.get("changed"):
        host.noop(summary)
        return
    else:
        def _log() -> bool:
            logger.info(f"{host.name}: {summary}")
            return True

        yield FunctionCommand(_log, (), {})
        return

    yield from fail_here(message)
