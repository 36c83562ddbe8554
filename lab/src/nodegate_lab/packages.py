"""Lab packages built with dpkg-deb under the real NVIDIA names and version relations.

They carry no NVIDIA code. The driver packages depend on ``libnvidia-ml1`` at their exact
version, which installs the simulated NVML library as the driver's ``libnvidia-ml.so.1``;
the fabric-manager packages ship ``nv-fabricmanager`` and the ``nvidia-fabricmanager`` unit,
which marks the simulated fabric completed only while it runs and only when its version
equals the installed driver's (the real one refuses to start on a mismatch).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

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


def _plain(version: str) -> str:
    return version.rsplit(":", maxsplit=1)[-1].split("-", maxsplit=1)[0]


def catalogue(nvml_lib: Path) -> list[Deb]:
    """Every lab package at every version the mirror offers."""
    debs: list[Deb] = []
    for dv in DRIVER_VERSIONS:
        v = f"{dv}-1"
        branch = dv.split(".")[0]
        debs.append(Deb("libnvidia-ml1", v, "NVIDIA Management Library (simulated by nodegate)",
                        files={f"{LIB_DIR}/libnvidia-ml.so.1": nvml_lib,
                               "usr/share/nodegate-lab/driver-version": f"{dv}\n".encode()}))
        flavours = {"": "proprietary kernel modules", "-open": "open kernel modules"}
        for suffix, what in flavours.items():
            sibling = "" if suffix else "-open"
            debs.append(Deb(f"nvidia-driver-{branch}-server{suffix}", v,
                            f"NVIDIA driver metapackage ({what}, lab)",
                            depends=[f"libnvidia-ml1 (= {v})"],
                            conflicts=[f"nvidia-driver-{branch}-server{sibling}"]))
        debs.append(Deb("nvidia-driver", v, "NVIDIA driver metapackage (lab)",
                        depends=[f"libnvidia-ml1 (= {v})"]))
        broken = BROKEN_DKMS.replace("@VERSION@", dv) if dv in BROKEN_DRIVER_VERSIONS else None
        debs.append(Deb("nvidia-kernel-open-dkms", v, "NVIDIA open kernel module (lab: no module)",
                        conflicts=["nvidia-kernel-dkms"], postinst=broken))
        debs.append(Deb("nvidia-kernel-dkms", v, "NVIDIA kernel module (lab: no module)",
                        conflicts=["nvidia-kernel-open-dkms"], postinst=broken))
        debs.append(Deb("nvidia-persistenced", v, "NVIDIA persistence daemon (lab: no-op unit)",
                        files={"usr/bin/nvidia-persistenced": b"#!/bin/sh\nexit 0\n",
                               "lib/systemd/system/nvidia-persistenced.service":
                               b"[Unit]\nDescription=NVIDIA persistence daemon (lab)\n"
                               b"[Service]\nType=oneshot\nRemainAfterExit=yes\n"
                               b"ExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}))
        fm_files: dict[str, bytes | Path] = {
            "usr/bin/nv-fabricmanager": FM_DAEMON.replace("@VERSION@", dv).encode(),
            "lib/systemd/system/nvidia-fabricmanager.service": FM_UNIT.encode()}
        nscq = "libnvidia-nscq" if int(branch) >= 580 else f"libnvidia-nscq-{branch}"
        fm = "nvidia-fabricmanager" if int(branch) >= 580 else f"nvidia-fabricmanager-{branch}"
        debs.append(Deb(nscq, v, "NVSwitch configuration and query library (lab)",
                        files={f"{LIB_DIR}/libnvidia-nscq.so.{dv}": b""}))
        debs.append(Deb(fm, v, "NVIDIA fabric manager (lab)", files=fm_files,
                        conflicts=["nvidia-fabricmanager"] if fm != "nvidia-fabricmanager"
                        else [f"nvidia-fabricmanager-{b}" for b in ("570",)],
                        prerm="#!/bin/sh\nsystemctl stop nvidia-fabricmanager 2>/dev/null || "
                              "true\n"))
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


def build(deb: Deb, out_dir: Path) -> Path:
    """dpkg-deb one package into ``out_dir`` (root-owned files, proper modes)."""
    with tempfile.TemporaryDirectory(prefix="deb-") as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        control = [f"Package: {deb.name}", f"Version: {deb.version}", "Architecture: amd64",
                   "Maintainer: nodegate lab <lab@nodegate.invalid>", "Section: non-free/libs",
                   "Priority: optional"]
        if deb.depends:
            control.append("Depends: " + ", ".join(deb.depends))
        if deb.conflicts:
            control.append("Conflicts: " + ", ".join(deb.conflicts))
        control.append(f"Description: {deb.description}")
        (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
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
