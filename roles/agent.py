"""agent: nodegate on the node, in its own virtual environment, with the node's profile.

Installs nodegate's node side (``pip install nodegate[extras]``: the battery, probes, judge,
gate and CLI; never the ``deploy`` extra's pyinfra and ansible-core) from a wheelhouse or an
index into a dedicated venv, writes this host's resolved profile as /etc/nodegate/profile.json
(so the node never needs the profile tree), schedules ``nodegate health`` every 5 minutes
(a systemd timer where systemd is init, else cron with its daemon installed and enabled; the
schedule is verified enabled, active and run once before the role succeeds:
roles/ops/schedule.py), and creates the report and node_exporter textfile directories.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pyinfra.api.command import QuoteString
from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from nodegate.facts.packages import VenvDistributions
from nodegate.facts.schedule import SystemdBooted
from nodegate.versions import Version
from roles.defaults import DEFAULTS, role_defaults
from roles.ops.common import cmd, is_deploy_file, knob, profile, q, refuse, target_os
from roles.ops.files import put_template, put_text
from roles.ops.packages import ensure_packages
from roles.ops.schedule import (
    TIMER,
    cron_body,
    cron_daemon,
    first_run_steps,
    schedule_in_effect,
    schedule_kind,
)
from roles.ops.slurm import gate_args, slurm_member, slurm_name_mismatch


def parse_requirement(text: str) -> tuple[str, str | None] | None:
    """(normalized name, exact ``==`` pin or None) of a plain requirement, as pip reads it
    (``packaging``); None for anything else (a URL, a path, a range), which pip then decides."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if req.url or req.marker:
        return None
    specs = list(req.specifier)
    if not specs:
        return canonicalize_name(req.name), None
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return canonicalize_name(req.name), specs[0].version
    return None


def satisfied(installed: list[str], pin: str | None) -> bool:
    """Whether an installed version meets the requirement's ``==pin`` (any version when
    unpinned), compared as versions the way pip compares them: the lab pins its build
    ``0.1.0+src.<digest>``, so a node with another digest's build is reinstalled, one with
    this build is left alone (a second deploy changes nothing)."""
    if pin is None:
        return bool(installed)
    return any(Version(v).matches(pin) for v in installed)


@operation()
def venv_package(venv: str, python: str, requirement: str, find_links: str | None,
                 index_url: str | None, *, needs: tuple[str, ...] = (),
                 compile_: bool = True) -> Generator[Any, None, None]:
    """Create the venv once; pip-install ``requirement`` when missing or at another version.

    ``needs``: distributions an extra brings (``torch``). pip leaves an installed requirement of
    the same version alone, extras or not, so a node that got nodegate before it needed torch
    gets the missing ones installed on their own.

    Not pyinfra's ``pip.venv``/``pip.packages``: they compare a pin's text with the installed
    version, so ``nodegate==0.1.0`` would never match an installed ``0.1.0+src.<digest>`` build
    (PEP 440 says it does), and an extra missing beside a same-version install goes unseen; here
    the pin is compared as pip does (``packaging``). ``compile_`` False: ``--no-compile``
    (``agent_pip_compile``), the byte-code written on first import instead."""
    if not host.get_fact(File, path=f"{venv}/pyvenv.cfg"):  # bin/python is a symlink
        yield cmd(q(python), "-m", "venv", q(venv))
    targets = [requirement]
    parsed = parse_requirement(requirement)
    installed = host.get_fact(VenvDistributions, pip=f"{venv}/bin/pip") or {}
    if parsed is not None:
        name, pin = parsed
        have = installed.get(name) or []
        if satisfied(have, pin):
            missing = [n for n in needs if not installed.get(n)]
            if not missing:
                host.noop(f"{requirement} installed in {venv}")
                return
            targets = missing
    source: list[str | QuoteString] = []
    if find_links:
        source += ["--no-index", "--find-links", q(find_links)]
    elif index_url:
        source += ["--index-url", q(index_url)]
    url = urlsplit(find_links or index_url or "")
    if url.scheme == "http" and url.netloc:  # the operator named a plain-http wheelhouse
        source += ["--trusted-host", q(url.netloc)]
    yield cmd(q(f"{venv}/bin/pip"), "install", "--quiet", "--upgrade",
              *([] if compile_ else ["--no-compile"]), *source, *[q(t) for t in targets])


#: The distribution each extra is known by in ``pip list`` (what ``venv_package`` checks).
EXTRA_NEEDS = {"torch": "torch", "power": "pysnmp"}


def agent_extras() -> list[str]:
    """``agent_extras``, or when None: ``power`` where the power poller runs (the host has PDUs
    or a BMC and ``pdu_monitor_enabled`` is not false), ``torch`` where the gate loads the GPUs
    (``gate_level`` standard/acceptance, or a multi-node check with ``gate_multinode_peer``)
    or where remediation is on (``remediate_enabled``, else the profile's
    ``remediation.enabled``: its re-qualification runs the standard level's load)."""
    extras = knob("agent_extras")
    if extras is not None:
        return [str(e) for e in extras]
    out = []
    poller = host.data.get("pdu_monitor_enabled")
    has_devices = bool(host.data.get("nodegate_pdus") or host.data.get("nodegate_bmc"))
    if poller is not False and (poller or has_devices):
        out.append("power")
    gate = host.data.get("gate_enabled", DEFAULTS["gate_enabled"])
    level = host.data.get("gate_level", DEFAULTS["gate_level"])
    remediates = knob("remediate_enabled", "remediation.enabled")  # re-qualifies at standard
    if (gate and (level in ("standard", "acceptance")
                  or host.data.get("gate_multinode_peer"))) or remediates:
        out.append("torch")
    return out


def agent_requirement() -> str:
    """``agent_package`` with ``agent_extras()``."""
    requirement = str(knob("agent_package"))
    extras = agent_extras()
    if extras and "[" not in requirement and parse_requirement(requirement) is not None:
        name, sep, pin = requirement.partition("==")
        requirement = f"{name}[{','.join(sorted(str(e) for e in extras))}]{sep}{pin}"
    return requirement


def health_args() -> list[Any]:
    """``agent_schedule_health_args``, else ``agent_health_args`` (which the gate also uses:
    deploy/validate.py runs over SSH without the poller's EnvironmentFile, so ``--checks
    ...,power`` with ``env:`` credentials belongs in the scheduled check's knob)."""
    args = knob("agent_schedule_health_args")
    return list((knob("agent_health_args") or []) if args is None else args)


def health_command() -> str:
    """The scheduled command line (goes into a cron/systemd file, so every word is quoted)."""
    from shlex import quote

    extra = [str(a) for a in health_args()]
    # the report names the node as Slurm does (the gate asks for that name; uname may be
    # an FQDN)
    node = slurm_member()
    named = ["--node-name", node] if node and not any(
        a == "--node-name" or a.startswith("--node-name=") for a in extra) else []
    words = [f"{knob('agent_venv')}/bin/nodegate", "health", "--quiet", "--color", "never",
             "--profile", str(knob("agent_profile_path")),
             "--report-dir", str(knob("agent_report_dir")),
             "--textfile-dir", str(knob("agent_textfile_dir")), *named, *extra]
    line = " ".join(quote(w) for w in words)
    if "%" in line or "\n" in line:  # cron turns % into newlines
        raise DeployError(f"{host.name}: agent health command may not contain % or newlines")
    return line


def gate_command() -> str | None:
    """``nodegate gate`` after each scheduled health run on a Slurm node (``slurm_member``
    names it): a FAIL drains the node, a PASS lifts only nodegate's own health drain. None
    where the host is no Slurm node or ``agent_schedule_gate`` is false."""
    from shlex import quote

    node = slurm_member()
    if not knob("agent_schedule_gate") or not node:
        return None
    words = [f"{knob('agent_venv')}/bin/nodegate", "gate", "--node", node,
             "--report-dir", str(knob("agent_report_dir"))]
    words += gate_args()  # its metrics always; the site file's slurm.drain_budget where set
    line = " ".join(quote(w) for w in words)
    if "%" in line or "\n" in line:
        raise DeployError(f"{host.name}: agent gate command may not contain % or newlines")
    return line


def _remediate_knob(name: str) -> Any:
    """A ``remediate_*`` knob here, where the agent role's defaults do not carry it."""
    value = knob(name)
    return DEFAULTS[name] if value is None else value


def remediate_words(node: str, *, enable: bool) -> list[str]:
    """``nodegate remediate`` for ``node``: one step (docs/remediation.md). The scheduled
    entry and ``deploy/remediate.py`` run the same words."""
    words = [f"{knob('agent_venv')}/bin/nodegate", "remediate", "--node", node,
             "--profile", str(knob("agent_profile_path")),
             "--report-dir", str(knob("agent_report_dir")),
             "--textfile-dir", str(knob("agent_textfile_dir")),
             "--duration-scale", f"{float(_remediate_knob('remediate_duration_scale')):g}"]
    if enable:
        words.append("--enable")
    if _remediate_knob("remediate_dry_run"):
        words.append("--dry-run")
    return words


def remediate_command() -> str | None:
    """``nodegate remediate`` after the scheduled gate, where remediation is on
    (``remediate_enabled``, else the profile's ``remediation.enabled``) on a Slurm node whose
    gate is scheduled: a node the gate drained is taken on from there (one step a run, and
    nothing at all on a node in service or drained by someone else). None elsewhere."""
    from shlex import quote

    node = slurm_member()
    if not (knob("agent_schedule_gate") and node
            and knob("remediate_enabled", "remediation.enabled")):
        return None
    words = remediate_words(node, enable=host.data.get("remediate_enabled") is True)
    line = " ".join(quote(w) for w in words)
    if "%" in line or "\n" in line:
        raise DeployError(f"{host.name}: agent remediate command may not contain % or newlines")
    return line


def health_env_file() -> str | None:
    """The power poller's EnvironmentFile, loaded (when present) by the scheduled health check
    so the power group can resolve the poller config's ``env:`` credentials; None when the
    poller is not installed here (the same decision as ``agent_requirement``)."""
    poller = host.data.get("pdu_monitor_enabled")
    has_devices = bool(host.data.get("nodegate_pdus") or host.data.get("nodegate_bmc"))
    if poller is False or not (poller or has_devices):
        return None
    path = str(host.data.get("pdu_monitor_env_file") or DEFAULTS["pdu_monitor_env_file"])
    if any(c in path for c in " \t\n\"'\\$`;&|<>()%"):
        raise DeployError(f"{host.name}: pdu_monitor_env_file {path!r} must be a plain path")
    return path


def node_profile(prof: dict[str, Any]) -> dict[str, Any]:
    """The profile the node's battery judges by: the resolved profile with the driver the
    roles install. ``--data nvidia_driver_version=...`` (an upgrade) moves the driver, so it
    moves the pins the gate checks (driver_version, fabricmanager_service) with it."""
    if not host.data.get("nvidia_driver_version") and not host.data.get("nvidia_driver_branch"):
        return prof
    from roles.nvidia_driver import desired

    branch, version, modules = desired()
    out = copy.deepcopy(prof)
    out.setdefault("driver", {}).update(branch=branch, version=version, kernel_modules=modules)
    return out


@deploy("nodegate agent: nodegate on the node, profile, scheduled health check",
        data_defaults=role_defaults("agent"))
def agent() -> None:
    os_ = target_os()
    prof = profile()
    if not prof:
        raise DeployError(f"{host.name}: no resolved profile (nodegate_profile_data); "
                          "the agent role runs on GPU nodes from inventory.py")
    venv = str(knob("agent_venv"))
    packages = ["python3"] + ([os_.python_venv_package] if os_.python_venv_package else [])
    ensure_packages("agent", packages, name="agent: python3 and venv")
    requirement = agent_requirement()
    venv_package(name=f"agent: {requirement} in {venv}", venv=venv,
                 python=str(knob("agent_python")), requirement=requirement,
                 find_links=knob("agent_wheelhouse_url"), index_url=knob("agent_index_url"),
                 needs=tuple(EXTRA_NEEDS[e] for e in agent_extras() if e in EXTRA_NEEDS),
                 compile_=bool(knob("agent_pip_compile")))
    files.directory(name="agent: /etc/nodegate", path="/etc/nodegate", mode="755")
    put_text(name="agent: resolved profile", dest=str(knob("agent_profile_path")),
             text=json.dumps(node_profile(prof), indent=2, sort_keys=True) + "\n")
    for path in (str(knob("agent_report_dir")), str(knob("agent_textfile_dir"))):
        files.directory(name=f"agent: {path}", path=path, mode="755")
    interval = int(knob("agent_interval_min"))
    values = {"interval": interval, "command": health_command(), "gate": gate_command(),
              "remediate": remediate_command(),
              "report_dir": knob("agent_report_dir"), "env_file": health_env_file()}
    schedule(values)


def schedule(values: dict[str, Any]) -> None:
    """The health check's schedule (``agent_schedule``: a systemd timer where systemd runs,
    else cron), its runner installed and enabled, then verified on the node: enabled, active
    and run once (roles/ops/schedule.py), or the host fails with the reason."""
    if values["gate"] and (why := slurm_name_mismatch()):
        refuse(why)  # before the schedule names the wrong node (a --limit run included)
        return
    kind = schedule_kind()
    first_run = first_run_steps([("health check", values["command"])], values["env_file"],
                                int(knob("agent_first_run_timeout_s")))
    if kind == "cron":
        package, service = cron_daemon(target_os())
        ensure_packages("agent", [package], name=f"agent: {package} (runs the schedule)")
        put_template(name="agent: cron entry (nodegate health)",
                     dest="/etc/cron.d/nodegate-health", src="agent/nodegate-health.cron.j2",
                     body=cron_body(values["command"], values["gate"], values["remediate"],
                                    values["env_file"]), **values)
        if host.get_fact(SystemdBooted):  # a timer from before stops with its file
            systemd.service(name="agent: no nodegate-health.timer", service=TIMER,
                            running=False, enabled=False)
        files.file(name="agent: no systemd timer", path="/etc/systemd/system/nodegate-health.timer",
                   present=False)
        if host.get_fact(SystemdBooted):
            systemd.service(name=f"agent: {service} enabled and running", service=service,
                            running=True, enabled=True)
        else:  # no systemd (a chroot, a container without it): its init script
            server.shell(name=f"agent: {service} running (no systemd)",
                         commands=[f"pgrep -x {service} >/dev/null || service {service} start"])
        schedule_in_effect(name=f"agent: the schedule runs ({service} enabled and active, "
                           "first run seen)", kind=kind, unit=service, first_run=first_run)
        return
    files.file(name="agent: no cron entry", path="/etc/cron.d/nodegate-health", present=False)
    svc = put_template(name="agent: nodegate-health.service",
                       dest="/etc/systemd/system/nodegate-health.service",
                       src="agent/nodegate-health.service.j2", **values)
    timer = put_template(name="agent: nodegate-health.timer",
                         dest="/etc/systemd/system/nodegate-health.timer",
                         src="agent/nodegate-health.timer.j2", **values)
    systemd.daemon_reload(name="agent: systemd reload",
                          _if=lambda: svc.did_change() or timer.did_change())
    systemd.service(name="agent: nodegate-health.timer", service=TIMER,
                    running=True, enabled=True)
    schedule_in_effect(name="agent: the schedule runs (timer enabled and active, first run "
                       "seen)", kind=kind, unit=TIMER, first_run=first_run)


if is_deploy_file(globals()):
    agent()
