"""pdu_monitor: the power poller (``nodegate power poll``) fed from the site's PDUs and BMC.

Credentials stay references: the config says ``env:NAME`` or ``file:/path``; for ``*_env``
references the value is taken from the operator's environment at deploy time and written to
the unit's EnvironmentFile (root, 0600, never diffed or logged). ``*_file`` references name a
file on the node that the site's secret distribution puts there.
"""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pyinfra.api.deploy import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.context import host
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from roles.defaults import role_defaults
from roles.ops.common import is_deploy_file, knob, refuse
from roles.ops.files import put_secret, put_template, put_text

SERVICE = "nodegate-power-poller.service"


def _ref(section: dict[str, Any], name: str, env_vars: dict[str, str | None]) -> str | None:
    """``env:VAR`` / ``file:/path`` for secret ``name`` of a site section; records env vars."""
    if section.get(f"{name}_env"):
        var = str(section[f"{name}_env"])
        env_vars[var] = os.environ.get(var)
        return f"env:{var}"
    if section.get(f"{name}_file"):
        return f"file:{section[f'{name}_file']}"
    value = str(section.get(name) or "")  # ``community: env:VAR`` (the site loader allows
    if value.startswith("env:"):  # only env:/file: references under secret keys)
        env_vars[value[4:]] = os.environ.get(value[4:])
        return value
    return value if value.startswith("file:") else None


def _plain(value: str, what: str) -> str:
    if any(c in value for c in " \n\r\t\"'\\"):
        raise DeployError(f"{host.name}: {what} {value!r} must not contain spaces or quotes")
    return value


def poller_config(env_vars: dict[str, str | None]) -> tuple[list[dict[str, Any]],
                                                            list[dict[str, Any]]]:
    """PDU and BMC entries for templates/power/power-poller.yaml.j2 from the site data."""
    pdus = []
    for index, pdu in enumerate(host.data.get("nodegate_pdus") or []):
        url = _plain(str(pdu["url"]), "PDU url")
        name = str(pdu.get("name") or f"pdu{index + 1}")
        entry: dict[str, Any] = {"name": name, "url": url, "model": pdu["model"]}
        community = _ref(pdu, "community", env_vars)
        if url.startswith("snmpv3://"):
            user = pdu.get("username") or os.environ.get(str(pdu.get("username_env") or ""))
            if not user:
                raise DeployError(f"{host.name}: PDU {name}: SNMPv3 user not set "
                                  f"(username_env {pdu.get('username_env')} is empty)")
            parts = urlsplit(url)
            query = [f"auth_key={_ref(pdu, 'auth_password', env_vars)}"]
            priv = _ref(pdu, "priv_password", env_vars)
            if priv:
                query.append(f"priv_key={priv}")
            netloc = f"{_plain(str(user), 'SNMPv3 user')}@{parts.netloc}"
            entry["url"] = urlunsplit((parts.scheme, netloc, parts.path, "&".join(query), ""))
        elif community:
            entry["community"] = community
        pdus.append(entry)
    bmcs = []
    bmc = host.data.get("nodegate_bmc")
    if bmc:
        user = bmc.get("username") or os.environ.get(str(bmc.get("username_env") or ""))
        if not user:
            raise DeployError(f"{host.name}: BMC user not set (username or username_env)")
        parts = urlsplit(_plain(str(bmc["url"]), "BMC url"))
        bmcs.append({"name": f"{host.name}-bmc",
                     "url": urlunsplit((parts.scheme, f"{_plain(str(user), 'BMC user')}@"
                                        f"{parts.netloc}", parts.path, "", "")),
                     "password": _ref(bmc, "password", env_vars),
                     "ca_bundle": bmc.get("ca_bundle"),
                     # the site's explicit opt-out of TLS (an http:// BMC): the poller refuses
                     # plain http without it
                     "insecure": bmc.get("insecure") is True})
    return pdus, bmcs


def node_wiring(config_path: str) -> dict[str, Any]:
    """/etc/nodegate/node.json for the battery's power group (src/nodegate/battery/power.py):
    the PDU outlets feeding this node as ``<pdu name>.outletN`` (the poller's device names),
    one circuit per PDU with the site's rating of it (``feeds``: the circuit_load check holds
    each feed alone to the node's draw), and the poller config the group reads them through."""
    pdus = host.data.get("nodegate_pdus") or []
    names = [str(pdu.get("name") or f"pdu{index + 1}") for index, pdu in enumerate(pdus)]
    outlets = [f"{name}.outlet{int(n)}"
               for name, pdu in zip(names, pdus, strict=True) for n in pdu.get("outlets") or []]
    feeds = [{"pdu": name, **{key: pdu[site] for key, site in
                              (("amps", "circuit_amps"), ("volts", "circuit_volts"),
                               ("phases", "phases")) if pdu.get(site) is not None}}
             for name, pdu in zip(names, pdus, strict=True)]
    return {"node": host.name, "power_config": config_path, "outlets": outlets,
            "circuits": len(pdus), "feeds": feeds}


@deploy("nodegate pdu_monitor: power poller", data_defaults=role_defaults("pdu_monitor"))
def pdu_monitor() -> None:
    enabled = knob("pdu_monitor_enabled")
    has_devices = bool(host.data.get("nodegate_pdus") or host.data.get("nodegate_bmc"))
    if enabled is False or (enabled is None and not has_devices):
        host.noop("no PDUs or BMC for this host: power poller not installed")
        return
    env_vars: dict[str, str | None] = {}
    pdus, bmcs = poller_config(env_vars)
    unset = sorted(k for k, v in env_vars.items() if v is None)
    if unset and knob("pdu_monitor_push_env_secrets"):
        refuse(f"power poller credentials not in the operator's environment: "
               f"{', '.join(unset)} (export them, or use *_file references)")
        return
    bad = sorted(k for k, v in env_vars.items() if v is not None and ("\n" in v or "\r" in v))
    if bad:
        refuse(f"power poller credentials contain a newline: {', '.join(bad)}")
        return
    values = {k: knob(k) for k in role_defaults("pdu_monitor")}
    venv = knob("agent_venv") or "/opt/nodegate/venv"
    values["pdu_monitor_nodegate_bin"] = f"{venv}/bin/nodegate"
    files.directory(name="pdu_monitor: /etc/nodegate", path="/etc/nodegate", mode="755")
    config = put_template(name="pdu_monitor: poller config (0600)", mode="600",
                          dest=str(values["pdu_monitor_config"]),
                          src="power/power-poller.yaml.j2", **values,
                          pdu_monitor_pdus=pdus, pdu_monitor_bmcs=bmcs)
    put_text(name="pdu_monitor: node power wiring (node.json)",
             dest=str(knob("pdu_monitor_node_file")), mode="644",
             text=json.dumps(node_wiring(str(values["pdu_monitor_config"])),
                             indent=2, sort_keys=True) + "\n")
    secrets = None
    if knob("pdu_monitor_push_env_secrets") and env_vars:
        secrets = put_secret(name="pdu_monitor: credentials EnvironmentFile (0600)",
                             dest=str(values["pdu_monitor_env_file"]),
                             text="".join(f"{k}={v}\n" for k, v in sorted(env_vars.items())))
    unit = put_template(name=f"pdu_monitor: {SERVICE}",
                        dest=f"/etc/systemd/system/{SERVICE}",
                        src="power/nodegate-power-poller.service.j2", **values)
    systemd.daemon_reload(name="pdu_monitor: systemd reload", _if=unit.did_change)
    systemd.service(name=f"pdu_monitor: {SERVICE} enabled and running", service=SERVICE,
                    running=True, enabled=True)
    changed = [op.did_change for op in (config, unit, secrets) if op is not None]
    systemd.service(name="pdu_monitor: restart after a change", service=SERVICE,
                    restarted=True, _if=lambda: any(c() for c in changed))
    if knob("pdu_monitor_verify"):  # at bring-up (no record yet) and when the wiring changes
        stamp = str(PurePosixPath(str(values["pdu_monitor_node_file"])).with_name(
            "power-verified.json"))
        unverified = not host.get_fact(File, path=stamp)
        server.shell(name="pdu_monitor: each BMC and PDU answers and is wired to this host "
                     "(nodegate power verify)", commands=[verify_command(values)],
                     _if=lambda: unverified or any(c() for c in changed))


def verify_command(values: dict[str, Any]) -> str:
    """``nodegate power verify`` with the poller's credentials loaded as the poller loads them
    (its EnvironmentFile, taken literally): at bring-up, and whenever the wiring changes, a
    BMC or PDU that does not answer, or names another host, fails this host with its line."""
    from shlex import quote

    from roles.ops.schedule import env_loader

    words = [str(values["pdu_monitor_nodegate_bin"]), "power", "verify",
             "--config", str(values["pdu_monitor_config"]), "--host", host.name,
             "--node-file", str(values["pdu_monitor_node_file"])]
    serial = knob("pdu_monitor_bmc_serial")
    if serial:
        words += ["--serial", str(serial)]
    line = " ".join(quote(w) for w in words) + ' --host "$(hostname)"'
    return env_loader(_plain(str(values["pdu_monitor_env_file"]), "pdu_monitor_env_file")) \
        + line


if is_deploy_file(globals()):
    pdu_monitor()
