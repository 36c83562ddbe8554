"""``nodegate power read`` and ``nodegate power poll``. Module-level imports: argparse only."""

from __future__ import annotations

import argparse
from typing import Any

from nodegate.bounds import arg_number


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("power", help="read PDUs/BMCs; run the power poller")
    sub = parser.add_subparsers(dest="power_command", metavar="ACTION")
    sub.required = True

    read = sub.add_parser("read", help="read PDUs (SNMP) and BMCs (Redfish) once, print a table")
    read.add_argument("--pdu", action="append", default=[], metavar="URL",
                      help="snmp://<community>@HOST:PORT (the community itself: printed "
                           "as ***), snmp://HOST?community=env:NAME (from $NAME) or "
                           "snmpv3://USER@HOST?auth_key=env:A&priv_key=env:P (repeatable)")
    read.add_argument("--model", action="append", default=[],
                      help="PDU model for each --pdu, in order (apc-rpdu2, raritan-pdu2, "
                           "servertech-sentry4, vertiv-geist); one value applies to all")
    read.add_argument("--bmc", action="append", default=[], metavar="URL",
                      help="https://USER@HOST[:PORT] (repeatable)")
    read.add_argument("--bmc-password", default="env:NODEGATE_BMC_PASSWORD",
                      help="password reference: env:NAME or file:/path (default %(default)s)")
    read.add_argument("--ca-bundle", help="CA bundle to verify BMC certificates with")
    read.add_argument("--insecure", action="store_true",
                      help="do not verify BMC TLS certificates (lab only)")
    read.add_argument("--timeout", type=arg_number(float, 0, 30, low_open=True),
                      default=2.0, help="seconds per request (default %(default)s)")
    read.add_argument("--retries", type=arg_number(int, 0, 5), default=1,
                      help="tries after a failed request, 0 to 5 (default %(default)s)")
    read.add_argument("--json", action="store_true", help="print JSON instead of a table")
    read.set_defaults(func=run_read)

    poll = sub.add_parser("poll", help="poll PDUs/BMCs forever, export Prometheus metrics")
    poll.add_argument("--config", required=True, help="poller YAML (docs/power.md)")
    poll.add_argument("--once", action="store_true", help="one round, then exit")
    poll.set_defaults(func=run_poll)

    verify = sub.add_parser("verify", help="check each configured BMC and PDU answers and is "
                                           "wired to this host (bring-up)")
    verify.add_argument("--config", required=True, help="poller YAML (docs/power.md)")
    verify.add_argument("--host", required=True, action="append",
                        help="a name of the host the BMC must name (Systems HostName); "
                             "repeatable: its inventory name, its own hostname")
    verify.add_argument("--serial", help="the host's serial (BMC Systems SerialNumber)")
    verify.add_argument("--node-file", help="node.json: the PDU outlets the site names")
    verify.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from nodegate.power.verify import run_verify as verify

    return verify(args)


def run_read(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from nodegate.errors import ConfigError
    from nodegate.power.bmc import check_refs as check_bmc_refs
    from nodegate.power.bmc import parse_bmc_url, read_bmc
    from nodegate.power.credentials import redact
    from nodegate.power.pdu import check_model, read_pdu
    from nodegate.power.readings import render_table
    from nodegate.power.snmp import check_refs as check_snmp_refs
    from nodegate.power.snmp import parse_snmp_url

    if not args.pdu and not args.bmc:
        raise ConfigError("nothing to read: give --pdu URL --model MODEL and/or --bmc URL")
    if args.pdu and len(args.model) not in (1, len(args.pdu)):
        raise ConfigError("give one --model, or one per --pdu", key="--model")
    models = args.model * len(args.pdu) if len(args.model) == 1 else args.model
    pdus = []
    for i, (url, model) in enumerate(zip(args.pdu, models, strict=False)):
        check_model(model, key="--model")
        target = parse_snmp_url(url, allow_literal_community=True, key="--pdu")
        check_snmp_refs(target, key="--pdu")
        pdus.append((f"pdu{i + 1}" if len(args.pdu) > 1 else "pdu", target.with_limits(
            args.timeout, args.retries), model))
    bmcs = [(f"bmc{i + 1}" if len(args.bmc) > 1 else "bmc",
             parse_bmc_url(url, password=args.bmc_password, ca_bundle=args.ca_bundle,
                           insecure=args.insecure, timeout_s=max(args.timeout, 2.0),
                           retries=args.retries, key="--bmc"))
            for i, url in enumerate(args.bmc)]

    for _name, bmc_target in bmcs:
        check_bmc_refs(bmc_target, key="--bmc-password")

    async def gather() -> list[Any]:
        tasks: list[Any] = [read_pdu(n, t, m) for n, t, m in pdus]
        tasks += [asyncio.to_thread(read_bmc, n, t) for n, t in bmcs]
        return list(await asyncio.gather(*tasks))

    devices = asyncio.run(gather())
    if args.json:
        print(redact(json.dumps([d.to_dict() for d in devices], indent=2)))
    else:
        print(redact(render_table(devices)))
    return 0 if all(d.up for d in devices) else 3


def run_poll(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    from pathlib import Path

    from nodegate.power.poller import load_config, run
    from nodegate.redaction import install_log_filter

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    install_log_filter()
    cfg = load_config(Path(args.config))
    return asyncio.run(run(cfg, once=args.once))
