"""base: the host settings every GPU node needs before the driver goes in.

nouveau blacklisted (initramfs rebuilt), ``iommu=pt`` through a boot-loader drop-in, PCIe ACS
disabled above the GPUs at every boot (a systemd unit), NUMA balancing off, memlock unlimited
for RDMA, and nvidia-persistenced settings. Boot-time changes leave a marker that the driver
role's reboot step honours (only when reboots are allowed for the run).
"""

from __future__ import annotations

from pyinfra.api.deploy import deploy
from pyinfra.context import host
from pyinfra.facts.server import Command
from pyinfra.operations import files, server, systemd

from nodegate.facts.pcie import AcsState
from roles.defaults import role_defaults
from roles.ops.common import cmd, container, is_deploy_file, knob, profile, q, target_os, template
from roles.ops.files import put_template
from roles.ops.packages import ensure_packages
from roles.ops.server import REBOOT_MARKER, run_when

MARK_REBOOT = cmd("mkdir", "-p", "/run/nodegate", "&&", "touch", q(REBOOT_MARKER))


@deploy("nodegate base: kernel and host settings for GPU nodes",
        data_defaults=role_defaults("base"))
def base() -> None:
    os_ = target_os()
    prof = profile()
    packages = list(knob("base_packages") or [])
    if not os_.is_debian:
        packages.append("python3-dnf-plugin-versionlock")
    ensure_packages("base", packages, name="base: packages")
    virt = container()
    if virt:
        host.noop(f"running in a {virt} container: nouveau blacklist, initramfs, kernel "
                  "arguments, PCIe ACS and kernel.numa_balancing belong to the host's kernel; "
                  "skipped")

    if knob("base_blacklist_nouveau") and not virt:
        blacklist = files.put(name="base: blacklist nouveau",
                              src=template("base", "blacklist-nouveau.conf"),
                              dest="/etc/modprobe.d/nodegate-blacklist-nouveau.conf", mode="644")
        run_when(name="base: rebuild the initramfs without nouveau",
                 command=cmd(*os_.initramfs), _if=blacklist.did_change)
        run_when(name="base: a reboot unloads nouveau", command=MARK_REBOOT,
                 _if=blacklist.did_change)

    kernel_args = knob("base_kernel_args")
    if kernel_args is None:
        iommu = (prof.get("host") or {}).get("iommu")
        kernel_args = [f"iommu={iommu}"] if iommu in ("pt", "on", "off") else []
    if kernel_args and not virt:
        _kernel_args(os_.is_debian, [str(a) for a in kernel_args])

    disable_acs = knob("base_disable_acs", "host.acs_disabled")
    if disable_acs and not virt:
        _acs(list(knob("base_acs_bridge_vendors") or []))

    put_template(name="base: NUMA balancing", dest="/etc/sysctl.d/90-nodegate.conf",
                 src="base/sysctl-nodegate.conf.j2",
                 numa_balancing=bool(knob("base_numa_balancing")))
    if not virt:
        server.sysctl(name="base: NUMA balancing now", key="kernel.numa_balancing",
                      value=1 if knob("base_numa_balancing") else 0)

    if knob("base_memlock_unlimited"):
        files.put(name="base: memlock unlimited (PAM)",
                  src=template("base", "limits-nodegate.conf"),
                  dest="/etc/security/limits.d/90-nodegate-memlock.conf", mode="644")
        files.put(name="base: memlock unlimited (systemd services)",
                  src=template("base", "systemd-memlock.conf"),
                  dest="/etc/systemd/system.conf.d/90-nodegate-memlock.conf", mode="644")

    persistenced = files.put(name="base: nvidia-persistenced settings",
                             src=template("base", "nvidia-persistenced.conf"),
                             dest="/etc/systemd/system/nvidia-persistenced.service.d/nodegate.conf",
                             mode="644")
    systemd.daemon_reload(name="base: systemd reload", _if=persistenced.did_change)


def _kernel_args(debian: bool, args: list[str]) -> None:
    """Debian/Ubuntu: a /etc/default/grub.d drop-in + update-grub; RHEL: grubby on every entry."""
    if debian:
        dropin = put_template(name="base: kernel arguments (grub drop-in)",
                              dest="/etc/default/grub.d/90-nodegate.cfg",
                              src="base/grub-nodegate.cfg.j2", kernel_args=args)
        run_when(name="base: update-grub", _if=dropin.did_change,
                 command=cmd("if", "command", "-v", "update-grub", ">/dev/null;", "then",
                             "update-grub;", "else", "grub-mkconfig", "-o",
                             "/boot/grub/grub.cfg;", "fi"))
        run_when(name="base: a reboot applies the kernel arguments", command=MARK_REBOOT,
                 _if=dropin.did_change)
        return
    current = host.get_fact(Command, command="grubby --info=DEFAULT 2>/dev/null | "
                            "sed -n 's/^args=//p' | tr -d '\"'") or ""
    missing = [a for a in args if a not in current.split()]
    if not missing:
        host.noop(f"kernel arguments present: {' '.join(args)}")
        return
    run_when(name="base: kernel arguments (grubby)",
             command=cmd("grubby", "--update-kernel=ALL", q(f"--args={' '.join(missing)}"),
                         "&&", MARK_REBOOT.get_raw_value()))


def _acs(vendors: list[str]) -> None:
    """A oneshot unit that clears ACS at every boot; run now if a bridge still has it on."""
    files.directory(name="base: /usr/local/sbin", path="/usr/local/sbin")
    script = put_template(name="base: ACS disable script",
                          dest="/usr/local/sbin/nodegate-acs-disable",
                          src="base/nodegate-acs-disable.sh.j2", mode="755", vendors=vendors)
    unit = files.put(name="base: ACS disable unit",
                     src=template("base", "nodegate-acs-disable.service"),
                     dest="/etc/systemd/system/nodegate-acs-disable.service", mode="644")
    systemd.daemon_reload(name="base: systemd reload (ACS unit)", _if=unit.did_change)
    systemd.service(name="base: ACS disable at boot", service="nodegate-acs-disable.service",
                    running=None, enabled=True)
    still_on = sorted(bdf for bdf, flags in host.get_fact(AcsState).items() if flags)
    if still_on:
        run_when(name=f"base: disable ACS now on {len(still_on)} bridges",
                 command=cmd("/usr/local/sbin/nodegate-acs-disable"))
    else:
        run_when(name="base: disable ACS after a script change",
                 command=cmd("/usr/local/sbin/nodegate-acs-disable"), _if=script.did_change)


if is_deploy_file(globals()):
    base()
