"""nvidia_driver: the NVIDIA driver at the profile's exact version, pinned and held.

Package source: NVIDIA's CUDA repository (with its keyring), the distribution's packages
(Ubuntu's server packages; Debian 12's own packaging from contrib, non-free and
non-free-firmware, which names and versions some packages differently: ``debian_distro``), or
an air-gapped mirror. Open or proprietary kernel modules per the profile; nvidia-persistenced
enabled. Any driver change is refused while GPU processes run, unless the
node is drained; a reboot happens only when the loaded module is not the installed one and the
run allows reboots (``--data nvidia_driver_allow_reboot=true``). GPUDirect RDMA per the
profile's ``host.gpudirect.mode``: ``peermem`` loads nvidia-peermem now and at every boot
(modules-load.d); ``dmabuf`` and ``none`` need no module, so no stale boot entry is left.
"""

from __future__ import annotations

import re

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.facts.files import File
from pyinfra.facts.server import KernelVersion
from pyinfra.operations import files, server

from nodegate.cluster.slurm import is_drained
from nodegate.facts.gpu import GpuProcesses, SlurmNodeState
from nodegate.facts.packages import AptSuiteComponents
from nodegate.profiles.gpudirect import MODES as GPUDIRECT_MODES
from nodegate.profiles.gpudirect import gpudirect
from roles.defaults import role_defaults
from roles.driver_pins import APT_PIN_PATTERNS, DEBIAN_OWN_VERSIONS, RPM_PIN_PATTERNS
from roles.ops.common import (
    TargetOS,
    cmd,
    container,
    is_deploy_file,
    knob,
    profile,
    q,
    refuse,
    target_os,
    template,
)
from roles.ops.files import put_text
from roles.ops.packages import (
    AptPin,
    ensure_packages,
    hold_matching,
    lock_matching,
    package_plan,
    stale_packages,
)
from roles.ops.repos import deb_from_url, dnf_module_stream, fetch_keyring
from roles.ops.server import module_loaded, reboot_if_needed, run_when
from roles.ops.slurm import slurm_node_name
from roles.ops.systemd import driver_service

SOURCES = ("cuda-repo", "distro", "mirror")
#: Ubuntu's branch metapackages (nvidia-driver-570-server-open...): another branch's are
#: replaced, not left held beside the new one.
STALE_METAPACKAGES = r"nvidia-driver-[0-9]+(-server)?(-open)?"
PEERMEM_CONF = "/etc/modules-load.d/nvidia-peermem.conf"
DEBIAN_SOURCES = "/etc/apt/sources.list.d/nodegate-debian-nvidia.sources"


def debian_distro(os_: TargetOS, source: str) -> bool:
    """Debian's own packaging of the driver (not Ubuntu's, not NVIDIA's repository): the open
    module is ``nvidia-open-kernel-dkms`` there, and nvidia-persistenced & co. are versioned
    on their own line (``driver_pins.DEBIAN_OWN_VERSIONS``)."""
    return os_.is_debian and os_.distro == "debian" and source == "distro"


def driver_packages(os_: TargetOS, source: str, branch: str, modules: str) -> list[str]:
    """The packages that carry one driver branch and module flavour on this OS and source."""
    open_ = modules == "open"
    if os_.is_debian and os_.distro == "ubuntu":
        if source == "distro":
            return [f"nvidia-driver-{branch}-server" + ("-open" if open_ else "")]
        return [f"nvidia-driver-{branch}" + ("-open" if open_ else "")]
    if debian_distro(os_, source):
        # Debian's names (tests/roles/data/driver-packages/debian12.json): the open module is
        # contrib's nvidia-open-kernel-dkms; nvidia-persistenced has its own version line, so
        # it is installed unpinned beside them (distro_companions)
        return ["nvidia-driver", "nvidia-open-kernel-dkms" if open_ else "nvidia-kernel-dkms"]
    if os_.is_debian:  # NVIDIA's CUDA repository: the flavour is the kernel package
        return ["nvidia-driver", "nvidia-kernel-open-dkms" if open_ else "nvidia-kernel-dkms",
                "nvidia-persistenced"]
    if source == "distro":
        raise DeployError(f"{host.name}: RHEL has no distribution NVIDIA packages; use "
                          "nvidia_driver_source=cuda-repo or mirror")
    # nvidia-modprobe by name: nvidia-kmod-common requires it without a version, so dnf
    # would take the stream's newest build, outside the version lock (RHEL9.md)
    return ["nvidia-driver", "nvidia-driver-cuda",
            "kmod-nvidia-open-dkms" if open_ else "kmod-nvidia-latest-dkms",
            "nvidia-persistenced", "nvidia-modprobe"]


def distro_companions(os_: TargetOS, source: str) -> list[str]:
    """Packages installed from the distribution without the driver's pin: Debian 12's
    nvidia-persistenced is 535.171.04-1~deb12u1 beside the driver's 535.261.03/535.309.01,
    so pinning it at the driver's version could never succeed."""
    return ["nvidia-persistenced"] if debian_distro(os_, source) else []


def desired() -> tuple[str, str, str]:
    """(branch, version, modules) from knobs or the profile; missing ones stop the host."""
    version = knob("nvidia_driver_version", "driver.version")
    branch = knob("nvidia_driver_branch", "driver.branch")
    if host.data.get("nvidia_driver_version") and not host.data.get("nvidia_driver_branch"):
        # --data nvidia_driver_version=580.65.06 alone: the branch is the version's
        branch = str(host.data.get("nvidia_driver_version")).split(".")[0]
    modules = knob("nvidia_driver_kernel_modules", "driver.kernel_modules") or "open"
    if not branch or not version:
        raise DeployError(f"{host.name}: no driver branch/version (profile driver.branch and "
                          "driver.version, or nvidia_driver_branch/nvidia_driver_version)")
    if not str(version).startswith(f"{branch}."):
        raise DeployError(f"{host.name}: driver version {version} is not on branch {branch}")
    if modules not in ("open", "proprietary"):
        raise DeployError(f"{host.name}: nvidia_driver_kernel_modules must be open or "
                          f"proprietary, not {modules!r}")
    return str(branch), str(version), str(modules)


def gpu_busy_reason(python: str) -> str | None:
    """Why changing the driver now is unsafe (GPU processes, or no way to tell), or None.

    A drained node may change its packages while its last processes finish; the reboot that
    swaps the loaded module waits for them (ops.server.reboot_refusal)."""
    if knob("nvidia_driver_drained"):
        return None
    if is_drained(host.get_fact(SlurmNodeState, node=slurm_node_name()) or ""):
        return None
    processes = host.get_fact(GpuProcesses, python=python)
    if processes is None:
        if module_loaded("nvidia"):
            return ("the nvidia module is loaded but GPU processes cannot be listed "
                    "(no nvidia-smi, no NVML)")
        return None
    if processes:
        listed = ", ".join(f"pid {p['pid']} {p['name']}" for p in processes[:5])
        return f"{len(processes)} GPU process(es) running ({listed})"
    return None


@deploy("nodegate nvidia_driver: NVIDIA driver pinned to the profile",
        data_defaults=role_defaults("nvidia_driver"))
def nvidia_driver() -> None:
    os_ = target_os()
    branch, version, modules = desired()
    rdma = gpudirect_mode(modules)
    source = knob("nvidia_driver_source")
    if source not in SOURCES:
        raise DeployError(f"{host.name}: nvidia_driver_source must be one of {SOURCES}")
    chosen = knob("nvidia_driver_packages")
    packages = list(chosen or driver_packages(os_, source, branch, modules))
    companions = [] if chosen else distro_companions(os_, source)
    own = DEBIAN_OWN_VERSIONS if debian_distro(os_, source) else None
    wrong, _unheld = package_plan(os_, packages, version)
    if wrong:
        busy = gpu_busy_reason(str(knob("nvidia_driver_python")))
        if busy:
            refuse(f"driver change to {version} ({', '.join(wrong)}) refused: {busy}. "
                   "Drain the node first (deploy/drain.py, or scontrol update "
                   "state=DRAIN) and wait for its jobs, then rerun; "
                   "--data nvidia_driver_drained=true overrides")
            return

    _repository(os_, source)
    stream = dnf_stream(os_, source, branch, modules)
    if stream:
        dnf_module_stream(name=f"nvidia_driver: DNF module stream nvidia-driver:{stream}",
                          module="nvidia-driver", stream=stream)
    virt = container()
    if virt:
        host.noop(f"running in a {virt} container: no kernel module build (dkms, headers); "
                  "the kernel is the host's")
    else:  # DKMS builds the module while the driver installs: the headers go first
        kernel = host.get_fact(KernelVersion)
        headers = ([os_.kernel_headers.format(kernel=kernel)]
                   if kernel and knob("nvidia_driver_kernel_headers") else [])
        ensure_packages("nvidia_driver", ["dkms", *headers],
                        name="nvidia_driver: kernel headers for DKMS")
    ensure_packages("nvidia_driver", packages, version, label="NVIDIA driver",
                    apt_pin=AptPin(sorted(set(APT_PIN_PATTERNS) | set(packages)),
                                   f"{version}-*", label="the NVIDIA driver"),
                    guard=APT_PIN_PATTERNS if os_.is_debian else None,
                    replaces=stale_packages(os_, STALE_METAPACKAGES, packages),
                    locked_set=None if os_.is_debian else RPM_PIN_PATTERNS,
                    own_versions=own)
    if companions:
        ensure_packages("nvidia_driver", companions,
                        name=f"nvidia_driver: {', '.join(companions)} from the distribution "
                             "(its own version line)")
    if os_.is_debian:
        hold_matching(name=f"nvidia_driver: every driver package at {version} held",
                      patterns=APT_PIN_PATTERNS, version=version)
    else:
        lock_matching(name=f"nvidia_driver: every driver package at {version} "
                           "version-locked",
                      patterns=RPM_PIN_PATTERNS, version=version)
    if knob("nvidia_driver_persistenced", "driver.persistenced"):
        driver_service(name="nvidia_driver: nvidia-persistenced enabled and running",
                       unit="nvidia-persistenced.service")
    _gpudirect(rdma, virt, replacing=bool(wrong))
    reboot_if_needed(name="nvidia_driver: reboot if the loaded module is stale",
                     allow=bool(knob("nvidia_driver_allow_reboot")),
                     python=str(knob("nvidia_driver_python")),
                     slurm_node=slurm_node_name(),
                     drained_override=bool(knob("nvidia_driver_drained")),
                     driver_version=version,
                     reboot_timeout=int(knob("nvidia_driver_reboot_timeout")))


def dnf_stream(os_: TargetOS, source: str, branch: str, modules: str) -> str | None:
    """The ``nvidia-driver`` module stream for this branch on EL9 (NVIDIA's driver
    installation guide: ``dnf module enable nvidia-driver:<branch>-open``; ``-dkms`` for the
    proprietary modules). The knob ``nvidia_driver_dnf_stream`` overrides it or, set to
    ``none``, turns it off (a mirror without modules metadata); default on with the CUDA
    repository only."""
    if os_.is_debian:
        return None
    wanted = knob("nvidia_driver_dnf_stream")
    if wanted is not None:
        text = str(wanted)
        if text.lower() in ("none", "false", ""):
            return None
        if not re.fullmatch(r"[A-Za-z0-9._-]+", text):
            raise DeployError(f"{host.name}: nvidia_driver_dnf_stream {text!r} is not a "
                              "module stream name")
        return text
    if source != "cuda-repo":
        return None
    return f"{branch}-open" if modules == "open" else f"{branch}-dkms"


def gpudirect_mode(modules: str) -> str:
    """The GPUDirect RDMA mode: the knob, else the profile's ``host.gpudirect`` (or its
    default); dmabuf with the proprietary modules cannot work, so it stops the host."""
    mode = knob("nvidia_driver_gpudirect") or gpudirect(profile()).mode
    if mode not in GPUDIRECT_MODES:
        raise DeployError(f"{host.name}: nvidia_driver_gpudirect must be one of "
                          f"{GPUDIRECT_MODES}, not {mode!r}")
    if mode == "dmabuf" and modules != "open":
        raise DeployError(f"{host.name}: GPUDirect RDMA over DMA-BUF needs the open kernel "
                          "modules; set driver.kernel_modules: open or host.gpudirect.mode: "
                          "peermem")
    return str(mode)


def _gpudirect(mode: str, virt: str | None, *, replacing: bool) -> None:
    """peermem: loaded at boot (modules-load.d) and now; other modes: no boot entry left."""
    if mode != "peermem":
        files.file(name="nvidia_driver: no nvidia-peermem boot entry (GPUDirect RDMA: "
                        f"{mode})", path=PEERMEM_CONF, present=False)
        return
    if virt:
        host.noop(f"running in a {virt} container: nvidia-peermem belongs to the host's kernel")
        return
    files.put(name="nvidia_driver: load nvidia-peermem at boot",
              src=template("nvidia_driver", "nvidia-peermem.conf"), dest=PEERMEM_CONF,
              mode="644")
    if replacing and module_loaded("nvidia"):
        host.noop("nvidia-peermem loads at the next boot: the loaded nvidia module is being "
                  "replaced, and peermem must match the new one")
        return
    server.modprobe(name="nvidia_driver: nvidia-peermem loaded", module="nvidia_peermem")


def _repository(os_: TargetOS, source: str) -> None:
    """Where the packages come from: CUDA repo + keyring, a mirror, or the distribution."""
    if debian_distro(os_, source):
        _debian_components(os_)
        return
    if source == "distro":
        host.noop("driver from the distribution's repositories")
        return
    base = str(knob("nvidia_driver_cuda_repo_url")).rstrip("/")
    if os_.is_debian:
        if source == "cuda-repo":
            kv = knob("nvidia_driver_cuda_keyring_version")
            deb_from_url(name="nvidia_driver: NVIDIA CUDA repository keyring",
                         package="cuda-keyring",
                         url=f"{base}/{os_.cuda_slug}/x86_64/cuda-keyring_{kv}_all.deb")
            return
        mirror = _mirror_url()
        keyring_url = knob("nvidia_driver_mirror_keyring_url")
        keyring = "/usr/share/keyrings/nodegate-nvidia-mirror.gpg"
        if keyring_url:
            fetch_keyring(name="nvidia_driver: mirror keyring", url=keyring_url,
                          dest=keyring)
        opts = f"signed-by={keyring}" if keyring_url else "trusted=yes"
        put_text(name="nvidia_driver: mirror apt source",
                 dest="/etc/apt/sources.list.d/nodegate-nvidia.list",
                 text=f"# Managed by nodegate (roles/nvidia_driver.py)\n"
                      f"deb [{opts}] {mirror} /\n")
        return
    if source == "cuda-repo":
        repo_file = f"/etc/yum.repos.d/cuda-{os_.cuda_slug}.repo"
        if host.get_fact(File, path=repo_file):
            host.noop(f"{repo_file} present")
        else:
            run_when(name="nvidia_driver: NVIDIA CUDA repository",
                     command=cmd("dnf", "config-manager", "--add-repo",
                                 q(f"{base}/{os_.cuda_slug}/x86_64/cuda-{os_.cuda_slug}.repo")))
        return
    mirror = _mirror_url()
    keyring_url = knob("nvidia_driver_mirror_keyring_url")
    gpg = f"gpgcheck=1\ngpgkey={keyring_url}\n" if keyring_url else "gpgcheck=0\n"
    put_text(name="nvidia_driver: mirror dnf repository",
             dest="/etc/yum.repos.d/nodegate-nvidia.repo",
             text=f"# Managed by nodegate (roles/nvidia_driver.py)\n[nodegate-nvidia]\n"
                  f"name=NVIDIA (nodegate mirror)\nbaseurl={mirror}\nenabled=1\n{gpg}")


def _debian_components(os_: TargetOS) -> None:
    """Debian's driver spans contrib (nvidia-support, nvidia-persistenced,
    nvidia-open-kernel-dkms), non-free (nvidia-graphics-drivers) and non-free-firmware
    (firmware-nvidia-gsp, which both kernel module packages depend on); a Debian 12 install
    enables main and non-free-firmware only, so apt would find no ``nvidia-driver``. The
    release, its updates and its security suite (the newest 535 build is in -security) get
    the components the node's own sources lack, in the role's file; none lacking, no file."""
    components = knob("nvidia_driver_debian_components")
    if not components:
        host.noop("Debian components for the driver: the node's own apt sources")
        return
    names = ([str(c) for c in components] if isinstance(components, list | tuple)
             else re.split(r"[,\s]+", str(components).strip()))
    urls = {k: str(knob(k)).rstrip("/") for k in ("nvidia_driver_debian_url",
                                                   "nvidia_driver_debian_security_url")}
    bad = [f"{k}={v!r}" for k, v in urls.items() if not v or any(c in v for c in " \n\"'\\")]
    bad += [f"nvidia_driver_debian_components={c!r}" for c in names
            if not re.fullmatch(r"[a-z0-9-]+", c)]
    if bad:
        raise DeployError(f"{host.name}: {', '.join(bad)}: not a plain URL or component name")
    if not os_.codename:
        raise DeployError(f"{host.name}: no VERSION_CODENAME in /etc/os-release: cannot name "
                          "the Debian suites for nvidia_driver_source=distro")
    have = host.get_fact(AptSuiteComponents, exclude=DEBIAN_SOURCES)
    suites = [(urls["nvidia_driver_debian_url"], os_.codename),
              (urls["nvidia_driver_debian_url"], f"{os_.codename}-updates"),
              (urls["nvidia_driver_debian_security_url"], f"{os_.codename}-security")]
    stanzas = [(url, suite, [c for c in names if c not in have.get(suite, [])])
               for url, suite in suites]
    stanzas = [s for s in stanzas if s[2]]
    if not stanzas:
        files.file(name="nvidia_driver: Debian components already in the node's apt sources",
                   path=DEBIAN_SOURCES, present=False)
        return
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    text = "# Managed by nodegate (roles/nvidia_driver.py): Debian's NVIDIA driver packages\n"
    text += "\n".join(f"Types: deb\nURIs: {url}\nSuites: {suite}\n"
                      f"Components: {' '.join(missing)}\nSigned-By: {keyring}\n"
                      for url, suite, missing in stanzas)
    put_text(name="nvidia_driver: Debian apt components for the driver",
             dest=DEBIAN_SOURCES, text=text)


def _mirror_url() -> str:
    mirror = knob("nvidia_driver_mirror_url")
    if not mirror:
        raise DeployError(f"{host.name}: nvidia_driver_source=mirror needs "
                          "nvidia_driver_mirror_url")
    text = str(mirror)
    if any(c in text for c in " \n\"'\\"):
        raise DeployError(f"{host.name}: nvidia_driver_mirror_url {text!r} is not a plain URL")
    return text


if is_deploy_file(globals()):
    nvidia_driver()
