"""A lab node boots the driver it has installed, as a real node loads the installed module.

The simulated board's driver version comes from its scenario. Without this a lab node would
run that version whatever apt installed, so a driver upgrade could never be seen to take
effect after the reboot. At each boot the supervisor calls :func:`follow_installed`: when the
node's root holds the lab driver package's version file (``libnvidia-ml1`` ships it), the
board's ``driver``/``nvml``/``cuda`` lines and the kernel log's NVRM line say that version.
Nothing installed: the scenario's version stays (a fresh node, as it was booted).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: Written by the lab's libnvidia-ml1 package (nodegate_lab.packages).
VERSION_FILE = "usr/share/nodegate-lab/driver-version"

#: CUDA driver API version (NVML's encoding: major * 1000 + minor * 10) per driver branch,
#: from NVIDIA's CUDA release notes (Table 3, toolkit and minimum driver versions): R570
#: ships CUDA 12.8, R575 12.9, R580 13.0. Unknown branches keep the scenario's value.
CUDA_BY_BRANCH = {"570": 12080, "575": 12090, "580": 13000}


def installed_version(root: Path) -> str | None:
    try:
        text = (root / VERSION_FILE).read_text().strip()
    except OSError:
        return None
    return text if re.fullmatch(r"\d+\.\d+(\.\d+)?", text) else None


def follow_installed(root: Path, state_dir: Path) -> str | None:
    """Rewrite the prepared board to the installed driver; return it (None: left as is)."""
    version = installed_version(root)
    state = state_dir / "state"
    if version is None or not state.is_file():
        return None
    cuda = CUDA_BY_BRANCH.get(version.split(".")[0])
    out = []
    for line in state.read_text().splitlines():
        new = line
        if line.startswith("driver="):
            new = f"driver={version}"
        elif line.startswith("cuda=") and cuda is not None:
            new = f"cuda={cuda}"
        elif line.startswith("nvml="):
            major = (cuda or int(line.split("=", 1)[1].split(".")[0]) * 1000) // 1000
            new = f"nvml={major}.{version}"
        out.append(new)
    _replace(state, "\n".join(out) + "\n")
    log = state_dir / "kernel.log"
    if log.is_file():
        text = re.sub(r"(NVRM: loading NVIDIA UNIX .*?Kernel Module for x86_64\s+)\S+",
                      lambda m: m.group(1) + version, log.read_text())
        _replace(log, text)
    return version


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".driver")
    tmp.write_text(text)
    os.replace(tmp, path)
