"""The many-host bench's deploy: a converged node's reads, where nothing changes.

It asks the kinds of questions deploy.py's no-op rerun asks of a lab node (recorded by the
fact cache: packages, holds, directories, files and their digests, the distribution, kernel
modules, the container check) of files the shared base root holds, so every operation finds
nothing to do and the run measures pyinfra's cost per host. The systemd facts are left out:
these hosts run sshd alone, no systemd. ``nodegate.pyinfra_compat`` installs the fact cache as
deploy.py does.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.context import host
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt, files

import nodegate.pyinfra_compat  # noqa: F401  (the fact cache, as in deploy.py)
from nodegate.facts.kernel import InstalledModule, LoadedModuleVersions
from nodegate.facts.packages import HeldPackages
from nodegate.facts.virt import Container

#: The lab base image's sshd drop-in (nodegate_lab.base._customise writes it).
SSHD_DROP_IN = "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n"
DIRECTORIES = ("/etc/apt/preferences.d", "/etc/apt/sources.list.d", "/etc/security/limits.d",
               "/etc/sysctl.d", "/etc/systemd/system", "/etc/modules-load.d",
               "/etc/ssh/sshd_config.d")

host.get_fact(LinuxDistribution)
host.get_fact(Container)
host.get_fact(HeldPackages)
host.get_fact(LoadedModuleVersions)
host.get_fact(InstalledModule, module="nvidia")

apt.packages(name="base packages present",
             packages=["openssh-server", "python3", "iproute2", "kmod", "procps"])
for path in DIRECTORIES:
    files.directory(name=f"directory {path}", path=path, present=True)
files.put(name="sshd drop-in", src=StringIO(SSHD_DROP_IN),
          dest="/etc/ssh/sshd_config.d/nodegate-lab.conf")
files.line(name="sshd: no DNS", path="/etc/ssh/sshd_config.d/nodegate-lab.conf",
           line="UseDNS no")
files.file(name="hostname present", path="/etc/hostname", present=True)
files.file(name="no reboot flag", path="/run/nodegate/reboot-required", present=False)
