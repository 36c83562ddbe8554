"""The RMA evidence bundle: its manifest and what never enters it."""

from __future__ import annotations

import gzip
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodegate.redaction import forget_secrets, remember_secret
from nodegate.remediation.bundle import kernel_context, read_manifest
from nodegate.remediation.engine import step
from nodegate.remediation.state import ActionRecord, NodeRemediation, Phase, StateStore
from tests.remediation.helpers import (
    NOW,
    FakeScheduler,
    Recorder,
    board,
    context,
    failed,
    make_report,
    serial,
)

SECRET = "Bmc-Pa55word-9f3e"
KERNEL_LOG = "\n".join([
    *(f"[  1.{i:03d}] boot line {i}" for i in range(20)),
    "[ 99.000] NVRM: Xid (PCI:0000:1b:00): 64, pid=1234, Row Remapper Error",
    f"[ 99.001] ipmi: login https://admin:{SECRET}@10.0.0.9/redfish",
    *(f"[100.{i:03d}] later line {i}" for i in range(20)),
])


@pytest.fixture
def secret() -> Iterator[str]:
    remember_secret(SECRET)
    yield SECRET
    forget_secrets()


def test_the_bundle_holds_the_manifest_and_no_secret(store: StateStore, tmp_path: Path,
                                                     secret: str) -> None:
    history = [ActionRecord("reset_gpu", ["gpu4"], {"gpu4": serial(4)}, NOW, "boot-0",
                            outcome="done", finished_at=NOW)]
    store.save(NodeRemediation("gpu-node-01", phase=Phase.DRAINED, history=history))
    leaky = failed("remap_failure", "gpu4", measured=1)
    leaky.evidence["note"] = f"BMC at https://root:{secret}@bmc.example"
    recorder = Recorder(board())
    runners = recorder.runners()
    runners.kernel_log = lambda: KERNEL_LOG
    runners.chassis = lambda: {"sys_vendor": "Dell Inc.", "product_name": "PowerEdge XE9680",
                               "product_serial": "7XYZ123"}
    runners.bmc = lambda: {"address": "10.0.0.9", "password": secret}

    def bug_report(path: Path) -> bool:
        path.write_bytes(gzip.compress(f"nvidia-bug-report\npassword={secret}\n".encode()))
        return True

    runners.bug_report = bug_report
    ctx = context(store, FakeScheduler(), recorder, [make_report(leaky)], tmp_path)
    ctx.runners = runners
    outcome = step(ctx)
    assert outcome.phase is Phase.RMA and outcome.bundle is not None

    manifest = read_manifest(outcome.bundle)
    assert manifest["schema"] == "nodegate.rma/1" and manifest["node"] == "gpu-node-01"
    assert manifest["reason"].startswith(f"nodegate: RMA gpu4 serial {serial(4)}")
    assert manifest["chassis"]["product_name"] == "PowerEdge XE9680"
    assert manifest["driver_version"] == "570.133.20"
    assert manifest["fabricmanager_version"] == "570.133.20"
    gpu4 = next(g for g in manifest["gpus"] if g["entity"] == "gpu4")
    assert gpu4["serial"] == serial(4) and gpu4["uuid"] == "GPU-00000004"
    assert gpu4["board_part_number"] and gpu4["vbios"] == "96.00.A5.00.01"
    assert len(manifest["gpus"]) == 8
    assert [r["check"] for r in manifest["failing_results"]] == ["remap_failure"]
    assert manifest["remediation_history"][0]["serials"] == {"gpu4": serial(4)}
    assert set(manifest["files"]) == {"kernel.log", "nvidia-bug-report.log.gz"}

    with tarfile.open(outcome.bundle, "r:gz") as archive:
        assert sorted(archive.getnames()) == ["kernel.log", "manifest.json",
                                              "nvidia-bug-report.log.gz"]
        texts = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    texts["nvidia-bug-report.log.gz"] = gzip.decompress(texts["nvidia-bug-report.log.gz"])
    for name, data in texts.items():
        assert secret.encode() not in data, name
    assert b"Xid (PCI:0000:1b:00): 64" in texts["kernel.log"]
    assert b"boot line 0\n" not in texts["kernel.log"]  # only the lines around the event
    assert b"password=***" in texts["nvidia-bug-report.log.gz"]


def test_kernel_context_keeps_the_lines_around_each_event_once() -> None:
    lines = kernel_context(KERNEL_LOG, around=2)
    assert lines[0] == "[  1.018] boot line 18" and lines[-1] == "[100.000] later line 0"
    assert len(lines) == len(set(lines)) == 5


def test_without_the_tool_the_manifest_says_so(store: StateStore, tmp_path: Path) -> None:
    recorder = Recorder(board())
    runners = recorder.runners()
    runners.bug_report = lambda path: False
    ctx = context(store, FakeScheduler(), recorder,
                  [make_report(failed("remap_failure", "gpu1"))], tmp_path)
    ctx.runners = runners
    outcome = step(ctx)
    assert outcome.bundle is not None
    manifest = read_manifest(outcome.bundle)
    assert "not included" in manifest["files"]["nvidia-bug-report.log.gz"]
    assert manifest["chassis"] is None and manifest["bmc"] is None


# --- what the process did not read itself ----------------------------------

#: Numeric-looking BMC passwords (main's registry skipped them: "a number") and others the
#: process never read: they live only in the node's environment and credential files.
NUMERIC = ("2718281828", "2024-06-30", "1e7_5e3")


@pytest.mark.parametrize("bmc_password", NUMERIC)
def test_the_bug_report_loses_every_node_secret(store: StateStore, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                bmc_password: str) -> None:
    config = tmp_path / "etc-nodegate"
    config.mkdir()
    (config / "power-poller.env").write_text(
        f"NODEGATE_BMC_PASSWORD={bmc_password}\nPDU_COMMUNITY='pdu-c0mm-42'\nOTHER=keep-me\n")
    (config / "bmc-password").write_text("S3cond-Secret-77\n")
    monkeypatch.setenv("NODEGATE_CONFIG_DIR", str(config))
    forget_secrets()
    store.save(NodeRemediation("gpu-node-01", phase=Phase.DRAINED, history=[
        ActionRecord("reset_gpu", ["gpu4"], {"gpu4": serial(4)}, NOW, "boot-0",
                     outcome="done", finished_at=NOW)]))
    recorder = Recorder(board())
    runners = recorder.runners()
    runners.kernel_log = lambda: KERNEL_LOG.replace(SECRET, "k3rnel-only-pw")
    dump = (f"NODEGATE_BMC_PASSWORD={bmc_password}\n"
            f"ipmitool -P {bmc_password} sensor\n"
            "snmpget -v2c -c pdu-c0mm-42 10.0.0.5 1.3.6.1.4.1.318\n"
            "community=public-ish\n"
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 rootpw=kernel-cmdline-secret quiet\n"
            "fetch http://svc:url-pass-1@repo.example/x\n"
            "second S3cond-Secret-77 and OTHER=keep-me\n")

    def bug_report(path: Path) -> bool:
        path.write_bytes(gzip.compress(dump.encode()))
        return True

    runners.bug_report = bug_report
    ctx = context(store, FakeScheduler(), recorder, [make_report(failed("remap_failure",
                                                                        "gpu4", measured=1))],
                  tmp_path)
    ctx.runners = runners
    outcome = step(ctx)
    assert outcome.bundle is not None
    with tarfile.open(outcome.bundle, "r:gz") as archive:
        texts = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}  # type: ignore[union-attr]
    report = gzip.decompress(texts["nvidia-bug-report.log.gz"]).decode()
    everything = report + texts["kernel.log"].decode() + texts["manifest.json"].decode()
    for secret in (bmc_password, "pdu-c0mm-42", "public-ish", "kernel-cmdline-secret",
                   "url-pass-1", "S3cond-Secret-77", "k3rnel-only-pw"):
        assert secret not in everything, (secret, report)
    assert "keep-me" in report  # not a credential variable: kept
    manifest = read_manifest(outcome.bundle)
    kinds = manifest["redacted"]["nvidia-bug-report.log.gz"]
    assert kinds["credential value"] >= 3
    assert kinds["snmp community"] >= 1 and kinds["url userinfo"] >= 1
    assert kinds["password-shaped value"] >= 1
    assert manifest["redacted"]["kernel.log"]["url userinfo"] == 1
