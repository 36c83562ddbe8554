"""Bad input around credentials: passwords past a ``/ ? #`` in URLs, credential key names the
old pattern missed, BMCs over plain http. Each case exits with its documented code, names the
file, host and key, prints no traceback, writes nothing, and never prints the secret (not
even a part of it, as a bad port once did)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.badinput.test_corpus import (
    ANSIBLE,
    POLL_HEAD,
    SITE,
    Case,
    _environment,  # noqa: F401 - the corpus's autouse environment, used here too
    _site,
    check_case,
)

SECRET = "Zq7k/Wx9m#Tr4p"
PIECES = ("Zq7k", "Wx9m", "Tr4p")
POLL = ("power", "poll", "--config", "{d}/p.yaml")


def _secret_file(d: Path) -> None:
    path = d / "pw"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)


CASES = [
    Case("secret-bmc-url-password-past-slash", ("power", "read", "--bmc",
                                                f"https://root:{SECRET}@bmc"),
         2, ("--bmc", "password")),
    Case("secret-bmc-plain-http-cli", ("power", "read", "--bmc", "http://root@bmc1",
                                       "--bmc-password", "file:{d}/pw"),
         2, ("--bmc", "bmc1", "in clear", "https"), setup=_secret_file),
    Case("secret-pdu-v3-url-password-past-slash",
         ("power", "read", "--pdu", f"snmpv3://u:{SECRET}@pdu?auth_key=env:A&priv_key=env:P",
          "--model", "apc-rpdu2"), 2, ("--pdu", "password")),
    Case("secret-poll-pdu-url-password-past-hash", POLL, 2, ("p.yaml", "pdus[0].url", "password"),
         {"p.yaml": POLL_HEAD + f"pdus:\n  - {{name: a, url: 'snmp://c:{SECRET}@pdu', "
          "model: apc-rpdu2}\n"}),
    Case("secret-poll-bmc-plain-http", POLL, 2, ("p.yaml", "bmcs[0].url", "in clear"),
         {"p.yaml": POLL_HEAD + "bmcs:\n  - {name: b, url: 'http://root@bmc', "
          "password: 'file:{d}/pw'}\n"}, setup=_secret_file),
    Case("secret-poll-community-string-key", POLL, 2, ("p.yaml", "pdus[0].community_string",
                                                       "reference"),
         {"p.yaml": POLL_HEAD + f"pdus:\n  - {{name: a, url: 'snmp://pdu', model: apc-rpdu2, "
          f"community_string: '{SECRET}'}}\n"}),
    Case("secret-site-community-string", (), 2, ("s.yaml", "host n1",
                                                 "hosts.n1.data.community_string"),
         _site(f"    data: {{community_string: '{SECRET}'}}\n"), inventory=SITE),
    Case("secret-site-ssh-private-key", (), 2, ("s.yaml", "hosts.n1.data.ssh_private_key"),
         _site(f"    data: {{ssh_private_key: '{SECRET}'}}\n"), inventory=SITE),
    Case("secret-site-key-pw-suffix", (), 2, ("s.yaml", "hosts.n1.data.bmc_pw"),
         _site(f"    data: {{bmc_pw: '{SECRET}'}}\n"), inventory=SITE),
    Case("secret-site-url-password-past-hash", (), 2, ("s.yaml", "hosts.n1.data.mirror",
                                                       "password"),
         _site(f"    data: {{mirror: 'http://u:{SECRET}@mirror/debian'}}\n"), inventory=SITE),
    Case("secret-site-pdu-community-past-slash", (), 2, ("s.yaml", "hosts.n1.pdu.url",
                                                         "community"),
         _site(f"    pdu: {{url: 'snmp://{SECRET}@pdu', model: apc-rpdu2}}\n"), inventory=SITE),
    Case("secret-site-bmc-plain-http", (), 2, ("s.yaml", "host n1", "hosts.n1.bmc.url",
                                               "in clear"),
         _site("    bmc: {url: 'http://10.0.0.9', model: idrac9, password_env: BMC_PW}\n"),
         inventory=SITE),
    Case("secret-ansible-key-pw-suffix", (), 2, ("fleet.ini", "host gpu01",
                                                 "data.nodegate_bmc_pw"),
         {"fleet.ini": f"[gpu]\ngpu01 nodegate_bmc_pw='{SECRET}'\n"}, inventory=ANSIBLE),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_secret_input_refused_without_echoing_it(case: Case, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    check_case(case, tmp_path, capsys, never=tuple(PIECES))
