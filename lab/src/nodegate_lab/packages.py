"""Lab packages built with dpkg-deb under the real NVIDIA names and version relations.

They carry no NVIDIA code. What they model, per lab driver version (``DRIVER_VERSIONS``, two
branches served at once so a pin gap can reach the other one):

- The Debian 12 driver package set the role installs on the lab's Debian 12 nodes
  (``nvidia-driver``, ``nvidia-kernel-open-dkms``/``nvidia-kernel-dkms``,
  ``nvidia-persistenced``) with the names, Pre-Depends, Depends, Recommends and Provides of
  Debian's real index, derived at mirror build from the recorded snapshot
  (nodegate_lab.driver_graph; 32 recorded packages per version, with ``nvidia-alternative``,
  ``libcuda1``, plain ``xserver-xorg-video-nvidia`` and their exact-version Depends).
- The payload: ``libnvidia-ml1`` installs the simulated NVML library as the driver's
  ``libnvidia-ml.so.1``; the fabric-manager packages ship ``nv-fabricmanager`` and the
  ``nvidia-fabricmanager`` unit, which marks the simulated fabric completed only while it runs
  and only when its version equals the installed driver's (the real one refuses to start on a
  mismatch); the kernel module packages of ``BROKEN_DRIVER_VERSIONS`` fail their DKMS build;
  ``nvidia-persistenced`` has a no-op unit.

What they do not model: Ubuntu's and RHEL's package names (the lab has no such nodes; RHEL 9
repodata was never recorded); the contrib and non-free-firmware packages the snapshot lacks
(``firmware-nvidia-gsp``, ``nvidia-support``, ``nvidia-modprobe``...), relations to them and
to a display stack the mirror does not serve (dropped, with reasons, by driver_graph);
Conflicts/Breaks/Replaces (not recorded; only the kernel flavours conflict here); the open
module, persistence daemon, fabric manager and NSCQ relations of NVIDIA's own repository
(not recorded: those packages have no relations here).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodegate_lab import driver_graph
from nodegate_lab.driver_graph import Graph
from nodegate_lab.proc import run

DRIVER_VERSIONS = ("570.124.06", "570.133.20", "580.65.06", "580.76.05")
#: Builds the mirror serves broken: their kernel module fails to build at install, as a DKMS
#: build against a kernel it does not support fails (the upgrade tests' failing target).
BROKEN_DRIVER_VERSIONS = ("580.76.05",)
BROKEN_DKMS = """#!/bin/sh
echo "Building module(s)....(bad exit status: 2)" >&2
echo "Error! Bad return status for module build on kernel: $(uname -r) (x86_64)" >&2
echo "Consult /var/lib/dkms/nvidia/@VERSION@/build/make.log for more information." >&2
exit 10
"""
NCCL_VERSIONS = ("2.21.5-1+cuda12.4", "2.26.2-1+cuda12.8")
DCGM_VERSIONS = ("1:4.1.1-1", "1:4.2.3-1")
LIB_DIR = "usr/lib/x86_64-linux-gnu"

FM_DAEMON = r'''#!/usr/bin/python3
"""nodegate lab fabric manager: completes the simulated NVSwitch fabric while it runs."""
import os, signal, subprocess, sys, time

MINE = "@VERSION@"
STATE = os.path.join(os.environ.get("NODEGATE_SIM_DIR", "/var/lib/nodegate-sim/board"), "state")


def driver_version():
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libnvidia-ml1"],
                         capture_output=True, text=True, check=False).stdout
    return out.split("-")[0] if out else None


def mark(state, status):
    if not os.path.exists(STATE):
        return
    lines = open(STATE).read().splitlines()
    out = [f"fabric_state={state}" if l.startswith("fabric_state=") else
           f"fabric_status={status}" if l.startswith("fabric_status=") else l for l in lines]
    tmp = STATE + ".fm"
    with open(tmp, "w") as fh:
        fh.write("\n".join(out) + "\n")
    os.replace(tmp, STATE)


def main():
    driver = driver_version()
    if driver != MINE:
        print(f"nv-fabricmanager {MINE}: driver version is {driver or 'not installed'}; "
              "fabric manager and driver versions must match", file=sys.stderr)
        return 1
    if sys.argv[1:] == ["--check"]:
        return 0
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    mark(3, 0)  # completed, success
    print(f"nv-fabricmanager {MINE}: fabric completed", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        mark(1, 27)  # not started, not ready


sys.exit(main())
'''

FM_UNIT = """[Unit]
Description=NVIDIA fabric manager service (nodegate lab)
After=network-online.target

[Service]
EnvironmentFile=-/etc/environment
ExecStartPre=/usr/bin/nv-fabricmanager --check
ExecStart=/usr/bin/nv-fabricmanager
Restart=no

[Install]
WantedBy=multi-user.target
"""


@dataclass
class Deb:
    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    files: dict[str, bytes | Path] = field(default_factory=dict)  # path in package -> content
    postinst: str | None = None
    prerm: str | None = None
    pre_depends: list[str] = field(default_factory=list)
    recommends: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)


def _plain(version: str) -> str:
    return version.rsplit(":", maxsplit=1)[-1].split("-", maxsplit=1)[0]


#: The virtual name the recorded ``nvidia-driver`` accepts for an open kernel module
#: (``nvidia-kernel-dkms (= V) | nvidia-kernel-U | nvidia-open-kernel-U``; Debian's
#: nvidia-open-kernel-dkms provides it). The lab's open module package, under the CUDA
#: repository's name the role installs, provides it too.
OPEN_KERNEL_VIRTUAL = "nvidia-open-kernel-{version}"
PERSISTENCED_UNIT = (b"[Unit]\nDescription=NVIDIA persistence daemon (lab)\n"
                     b"[Service]\nType=oneshot\nRemainAfterExit=yes\n"
                     b"ExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")


def _extras(dv: str) -> dict[str, list[str]]:
    """The lab's driver packages outside the recorded graph (name -> provides): the CUDA
    repository's open module and persistence daemon names the role installs on Debian 12, and
    the fabric manager and NSCQ (NVIDIA's repository only; not recorded)."""
    branch = dv.split(".", maxsplit=1)[0]
    return {"nvidia-kernel-open-dkms": [OPEN_KERNEL_VIRTUAL.format(version=dv)],
            "nvidia-persistenced": [], _nscq(branch): [], _fabric_manager(branch): []}


def _nscq(branch: str) -> str:
    return "libnvidia-nscq" if int(branch) >= 580 else f"libnvidia-nscq-{branch}"


def _fabric_manager(branch: str) -> str:
    return "nvidia-fabricmanager" if int(branch) >= 580 else f"nvidia-fabricmanager-{branch}"


def driver_graphs(snapshot: Path, served: Mapping[str, list[str]]) -> dict[str, Graph]:
    """Each lab driver version's packages as the recorded Debian 12 graph relates them."""
    template = driver_graph.load(snapshot)
    return {dv: driver_graph.derive(template, dv, extra=_extras(dv), served=served)
            for dv in DRIVER_VERSIONS}


def catalogue(nvml_lib: Path, snapshot: Path, served: Mapping[str, list[str]]) -> list[Deb]:
    """Every lab package at every version the mirror offers; ``served``: the Debian packages
    beside them (name -> versions), which the driver graph's outside relations must resolve
    from (nodegate_lab.driver_graph)."""
    debs: list[Deb] = []
    for dv, graph in driver_graphs(snapshot, served).items():
        debs.extend(_driver_debs(dv, graph, nvml_lib))
    for nv in NCCL_VERSIONS:
        debs.append(Deb("libnccl2", nv, "NVIDIA Collective Communication Library (lab stub)",
                        files={f"{LIB_DIR}/libnccl.so.{_plain(nv)}": b""}))
        debs.append(Deb("libnccl-dev", nv, "NCCL development files (lab stub)",
                        depends=[f"libnccl2 (= {nv})"],
                        files={"usr/include/nccl.h": f"/* NCCL {nv} (lab) */\n".encode()}))
    for dcgm in DCGM_VERSIONS:
        debs.append(Deb("datacenter-gpu-manager-4-core", dcgm, "DCGM core (lab stub)"))
        debs.append(Deb("datacenter-gpu-manager-4-cuda12", dcgm, "DCGM for CUDA 12 (lab stub)",
                        depends=[f"datacenter-gpu-manager-4-core (= {dcgm})"]))
        debs.append(Deb("datacenter-gpu-manager", dcgm, "DCGM 3-style name (lab stub)",
                        depends=[f"datacenter-gpu-manager-4-core (= {dcgm})"]))
    return debs


def _driver_debs(dv: str, graph: Graph, nvml_lib: Path) -> list[Deb]:
    """The recorded packages with their relations, then the lab's extras; the functional
    payload goes to the package that carries it on a real node."""
    v = f"{dv}-1"
    branch = dv.split(".", maxsplit=1)[0]
    debs = [Deb(s.name, s.version, f"{s.name} (nodegate lab: Debian 12's relations, no NVIDIA "
                                   "code)",
                depends=s.relations.get("depends", []),
                pre_depends=s.relations.get("pre_depends", []),
                recommends=s.relations.get("recommends", []), provides=s.provides)
            for s in graph.stanzas]
    extras = _extras(dv)
    debs += [Deb(name, v, f"{name} (nodegate lab)", provides=provides)
             for name, provides in extras.items()]
    by_name = {d.name: d for d in debs}
    ml = by_name["libnvidia-ml1"]
    ml.description = "NVIDIA Management Library (simulated by nodegate)"
    ml.files = {f"{LIB_DIR}/libnvidia-ml.so.1": nvml_lib,
                "usr/share/nodegate-lab/driver-version": f"{dv}\n".encode()}
    broken = BROKEN_DKMS.replace("@VERSION@", dv) if dv in BROKEN_DRIVER_VERSIONS else None
    for name, other in (("nvidia-kernel-open-dkms", "nvidia-kernel-dkms"),
                        ("nvidia-kernel-dkms", "nvidia-kernel-open-dkms")):
        by_name[name].description = f"{name} (nodegate lab: no module)"
        by_name[name].conflicts = [other]
        by_name[name].postinst = broken
    by_name["nvidia-persistenced"].files = {
        "usr/bin/nvidia-persistenced": b"#!/bin/sh\nexit 0\n",
        "lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT}
    fm = by_name[_fabric_manager(branch)]
    fm.files = {"usr/bin/nv-fabricmanager": FM_DAEMON.replace("@VERSION@", dv).encode(),
                "lib/systemd/system/nvidia-fabricmanager.service": FM_UNIT.encode()}
    fm.conflicts = (["nvidia-fabricmanager"] if fm.name != "nvidia-fabricmanager"
                    else [f"nvidia-fabricmanager-{b}" for b in ("570",)])
    fm.prerm = "#!/bin/sh\nsystemctl stop nvidia-fabricmanager 2>/dev/null || true\n"
    by_name[_nscq(branch)].files = {f"{LIB_DIR}/libnvidia-nscq.so.{dv}": b""}
    return debs


def control(deb: Deb) -> str:
    """The package's control file (dpkg-scanpackages copies it into the index)."""
    lines = [f"Package: {deb.name}", f"Version: {deb.version}", "Architecture: amd64",
             "Maintainer: nodegate lab <lab@nodegate.invalid>", "Section: non-free/libs",
             "Priority: optional"]
    for key, values in (("Pre-Depends", deb.pre_depends), ("Depends", deb.depends),
                        ("Recommends", deb.recommends), ("Conflicts", deb.conflicts),
                        ("Provides", deb.provides)):
        if values:
            lines.append(f"{key}: " + ", ".join(values))
    lines.append(f"Description: {deb.description}")
    return "\n".join(lines) + "\n"


def build(deb: Deb, out_dir: Path) -> Path:
    """dpkg-deb one package into ``out_dir`` (root-owned files, proper modes)."""
    with tempfile.TemporaryDirectory(prefix="deb-") as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        (root / "DEBIAN/control").write_text(control(deb))
        for name, script in (("postinst", deb.postinst), ("prerm", deb.prerm)):
            if script:
                (root / "DEBIAN" / name).write_text(script)
                (root / "DEBIAN" / name).chmod(0o755)
        for rel, content in deb.files.items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, dest)
            else:
                dest.write_bytes(content)
            dest.chmod(0o755 if rel.startswith("usr/bin/") or rel.endswith(".so.1") else 0o644)
        target = out_dir / f"{deb.name}_{deb.version.replace(':', '%3a')}_amd64.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(target)])
    return target
