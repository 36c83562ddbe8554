"""NVMe health, fio and DCGM: real tool output in, verdicts out.

The fixtures under data/ are public captures (data/README.md says where each came from) and
this project's own captures from the md VM's emulated NVMe drives (``qemu-*``). A fake
runner stands in for the node: it answers each argv with a captured document, or fails the
way the tools fail.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery import storage
from nodegate.errors import CannotRunError, ExitCode
from nodegate.judge.dcgm import judge_diag
from nodegate.judge.storage import (
    judge_devices,
    judge_fio,
    previous_unsafe_shutdowns,
)
from nodegate.probes import dcgm, fio, nvme
from nodegate.profiles import Profile
from nodegate.results import CheckResult, Verdict

DATA = Path(__file__).parent / "data"
SOURCE = "policy: test profile"


def text(name: str) -> str:
    return (DATA / name).read_text()


def doc(name: str) -> Any:
    return json.loads(text(name))


def profile(nvme_extra: dict[str, Any] | None = None,
            thresholds: dict[str, Any] | None = None,
            dcgm_levels: dict[str, int] | None = None) -> Profile:
    data: dict[str, Any] = {
        "name": "test",
        "nvme": {"devices": 2, "raid_level": 0, "mountpoint": "/raid", "filesystem": "xfs",
                 "mount_options": ["noatime"], "smart": True, **(nvme_extra or {})},
        "thresholds": {
            "nvme_media_errors_max": {"max": 0, "unit": "count", "source": SOURCE},
            "nvme_percentage_used_max": {"max": 90, "unit": "%", "source": SOURCE},
            "nvme_unsafe_shutdowns_growth_max": {"max": 0, "unit": "count", "source": SOURCE},
            **(thresholds or {}),
        },
    }
    if dcgm_levels is not None:
        data["dcgm"] = {"diag_level": dcgm_levels}
    return Profile(name="test", data=data, layers=[])


def proc(argv: list[str], out: str = "", rc: int = 0,
         err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv, rc, stdout=out, stderr=err)


class FakeNode:
    """Answers ``nvme`` commands from captured documents: ``list`` once, and per device
    path ``id-ctrl`` / ``smart-log``; a path in ``gone`` fails as nvme-cli does for a device
    that left the bus."""

    def __init__(self, listing: str, smart: dict[str, str], ident: dict[str, str],
                 gone: tuple[str, ...] = ()) -> None:
        self.listing, self.smart, self.ident, self.gone = listing, smart, ident, gone
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if argv[:2] == ["nvme", "list"]:
            return proc(argv, self.listing)
        path = argv[2]
        if path in self.gone:
            return proc(argv, rc=2, err=f"open: No such file or directory\n"
                        f"Failed to open {path}")
        table = self.smart if argv[1] == "smart-log" else self.ident
        return proc(argv, table[path])


def by(results: list[CheckResult], check: str) -> dict[str, CheckResult]:
    return {r.entity: r for r in results if r.check == check}


# --- nvme-cli parsing ----------------------------------------------------------------------


def test_list_1x_data_centre_drives_parse() -> None:
    namespaces = nvme.parse_list(doc("nvme-cli-1.x-list-pm9a3.json"))
    assert [(n.controller, n.model, n.firmware) for n in namespaces] == [
        ("nvme0", "MTFDHBA512TCK", "P1FB007"),
        ("nvme1", "MZOL23T8HCLS-00AFB", "GDA82F2Q"),
        ("nvme2", "MZOL23T8HCLS-00AFB", "GDA82F2Q")]
    assert namespaces[0].serial == "21062E6B8061"  # nvme-cli keeps the controller's padding
    assert namespaces[1].size_bytes == 3760740458496


def test_smart_log_1x_kelvin_and_missing_fields() -> None:
    smart = nvme.parse_smart_log(doc("nvme-cli-1.x-smart-log-p4510-partial.json"))
    assert smart.temperature_k == 302 and smart.temperature_c == 29
    assert (smart.available_spare, smart.spare_threshold) == (100, 10)
    assert smart.media_errors is None and smart.unsafe_shutdowns is None


def test_smart_log_2x_verbose_object_and_string_counters() -> None:
    """nvme-cli 2.x --verbose prints critical_warning as an object (nvme-print-json.c);
    128-bit counters may come as decimal strings."""
    smart = nvme.parse_smart_log({"critical_warning": {"value": 0x0c, "available_spare": 0},
                                  "temperature": 318, "avail_spare": 3, "spare_thresh": 10,
                                  "percent_used": 104, "media_errors": "7",
                                  "unsafe_shutdowns": "12"})
    assert smart.critical_warning == 0x0c and smart.media_errors == 7
    assert smart.warnings() == ["NVM subsystem reliability degraded (media or internal "
                                "errors)", "media placed in read-only mode"]


def test_smart_log_without_critical_warning_reads_the_rest() -> None:
    """The missing field fails its own check only (test_missing_fields.py)."""
    smart = nvme.parse_smart_log({"temperature": 300})
    assert (smart.critical_warning, smart.temperature_k, smart.warnings()) == (None, 300, [])


# --- judging SMART health ------------------------------------------------------------------


def _p4510_node(**kw: Any) -> FakeNode:
    return FakeNode(text("nvme-cli-1.x-list-p4510.json"),
                    {"/dev/nvme9n1": text("nvme-cli-1.x-smart-log-p4510-partial.json")},
                    {"/dev/nvme9n1": text("nvme-cli-1.x-id-ctrl-p4510-partial.json")}, **kw)


def test_partial_smart_log_judges_error_for_what_is_missing() -> None:
    results = judge_devices(nvme.read_devices(_p4510_node()), profile())
    assert by(results, "nvme_critical_warning")["nvme9"].verdict == Verdict.PASS
    assert by(results, "nvme_spare")["nvme9"].verdict == Verdict.PASS
    assert by(results, "nvme_media_errors")["nvme9"].verdict == Verdict.ERROR
    assert by(results, "nvme_unsafe_shutdowns")["nvme9"].verdict == Verdict.ERROR
    assert by(results, "nvme_firmware")["nvme9"].measured == "VDV1DP21"
    # id-ctrl's serial wins over nvme list's (they differ in that project's data)
    assert by(results, "nvme_spare")["nvme9"].evidence["serial"] == "PHLJ914500JE4P0DGN"


def healthy_smart(**over: Any) -> str:
    base = {"critical_warning": 0, "temperature": 310, "avail_spare": 100, "spare_thresh": 10,
            "percent_used": 3, "media_errors": 0, "unsafe_shutdowns": 5}
    return json.dumps({**base, **over})


def _pm9a3_node(smart1: str, smart2: str, gone: tuple[str, ...] = (),
                fw2: str = "GDA82F2Q") -> FakeNode:
    listing = text("nvme-cli-1.x-list-pm9a3.json")
    ident = {f"/dev/nvme{i}n1": json.dumps({"mn": m, "sn": s, "fr": f, "wctemp": 343})
             for i, m, s, f in ((0, "MTFDHBA512TCK", "21062E6B8061", "P1FB007"),
                                (1, "MZOL23T8HCLS-00AFB", "S5X9NG0T116005", "GDA82F2Q"),
                                (2, "MZOL23T8HCLS-00AFB", "S5X9NG0T116027", fw2))}
    return FakeNode(listing, {"/dev/nvme0n1": healthy_smart(), "/dev/nvme1n1": smart1,
                              "/dev/nvme2n1": smart2}, ident, gone=gone)


def test_each_smart_fault_fails_its_own_check_and_device() -> None:
    node = _pm9a3_node(healthy_smart(critical_warning=1, avail_spare=8),
                       healthy_smart(media_errors=3, percent_used=95, temperature=350))
    results = judge_devices(nvme.read_devices(node), profile())
    assert by(results, "nvme_critical_warning")["nvme1"].verdict == Verdict.FAIL
    assert by(results, "nvme_critical_warning")["nvme1"].evidence["warnings"] == [
        "available spare below its threshold"]
    assert by(results, "nvme_spare")["nvme1"].verdict == Verdict.FAIL
    assert by(results, "nvme_media_errors")["nvme2"].verdict == Verdict.FAIL
    assert by(results, "nvme_wear")["nvme2"].verdict == Verdict.WARN
    temp = by(results, "nvme_temperature")["nvme2"]
    assert (temp.verdict, temp.measured, temp.threshold["below"]) == (Verdict.FAIL, 77, 70)
    healthy = [r for r in results if r.entity in ("nvme0", "nvme0n1")]
    assert healthy and all(r.verdict == Verdict.PASS for r in healthy)


def test_device_gone_mid_run_is_error_on_that_device_only() -> None:
    node = _pm9a3_node(healthy_smart(), healthy_smart(), gone=("/dev/nvme2n1",))
    results = judge_devices(nvme.read_devices(node), profile())
    gone = [r for r in results if r.entity == "nvme2"]
    assert {r.verdict for r in gone} == {Verdict.ERROR}
    assert "No such file or directory" in gone[0].evidence["reason"]
    assert all(r.verdict == Verdict.PASS for r in results if r.entity == "nvme1")


def test_firmware_differs_within_a_model_or_from_the_pin() -> None:
    node = _pm9a3_node(healthy_smart(), healthy_smart(), fw2="GDA83F2Q")
    results = by(judge_devices(nvme.read_devices(node), profile()), "nvme_firmware")
    assert results["nvme1"].verdict == results["nvme2"].verdict == Verdict.FAIL
    assert results["nvme0"].verdict == Verdict.PASS  # the boot drive's own model
    pinned = by(judge_devices(nvme.read_devices(node), profile(
        {"firmware": ["GDA83F2Q", "P1FB007"]})), "nvme_firmware")
    assert [pinned[e].verdict for e in ("nvme0", "nvme1", "nvme2")] == [
        Verdict.PASS, Verdict.FAIL, Verdict.PASS]


def test_namespace_size_against_the_profile_drive() -> None:
    node = _pm9a3_node(healthy_smart(), healthy_smart())
    drive = {"model": "MZOL23T8HCLS-00AFB", "namespace_bytes": 3840755982336,
             "source": "datasheet: test"}
    sizes = by(judge_devices(nvme.read_devices(node), profile({"drive": drive})),
               "nvme_namespace_size")
    assert sizes["nvme1n1"].verdict == Verdict.FAIL  # 3760740458496: a smaller namespace
    assert sizes["nvme0n1"].verdict == Verdict.PASS  # other model: against its own kind


def test_unsafe_shutdown_growth_against_the_previous_report_by_serial() -> None:
    node = _pm9a3_node(healthy_smart(unsafe_shutdowns=7), healthy_smart(unsafe_shutdowns=5))
    first = judge_devices(nvme.read_devices(node), profile())
    assert by(first, "nvme_unsafe_shutdowns")["nvme1"].verdict == Verdict.PASS
    report = {"results": [r.to_dict() for r in first]}
    previous = previous_unsafe_shutdowns([report])
    assert previous["S5X9NG0T116005"] == 7
    previous["S5X9NG0T116005"] = 6  # one unsafe shutdown since
    again = by(judge_devices(nvme.read_devices(node), profile(), previous),
               "nvme_unsafe_shutdowns")
    assert (again["nvme1"].verdict, again["nvme1"].measured) == (Verdict.WARN, 1)
    assert again["nvme2"].verdict == Verdict.PASS


def test_nvme_cli_missing_is_exit_3_naming_the_package() -> None:
    def absent(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(CannotRunError, match="nvme-cli package") as err:
        storage.run_nvme_health(profile(), run=absent)
    assert err.value.exit_code == ExitCode.CANNOT_RUN


def test_nvme_health_off_unless_the_profile_asks() -> None:
    def never(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        raise AssertionError("nvme-cli must not be called")

    skipped = storage.run_nvme_health(profile({"smart": False}), run=never)
    assert {r.verdict.value for r in skipped} == {"SKIP"} and len(skipped) == 8
    assert all("nvme.smart is not true" in r.evidence["reason"] for r in skipped)


# --- fio ------------------------------------------------------------------------------------


def test_fio_3_1_bw_in_kib_when_bw_bytes_is_absent() -> None:
    job = fio.FioJob("seq_write", "write", "4k", 4, 1)
    run = fio.parse_fio(doc("fio-3.1-google-sample.json"), job)
    assert run.problem is None and run.bytes_per_s == 1753471 * 1024
    assert run.iops == pytest.approx(438367.892977)


def test_fio_floor_from_drive_datasheet_times_disks() -> None:
    extra = {"drive": {"model": "X", "seq_read_gbps": 6.4, "source": "datasheet: X"},
             "fio": {"efficiency": 0.5, "source": "policy: half"}}
    runs = [fio.FioRun(fio.JOBS[0], bytes_per_s=5.0e9, iops=1.0, runtime_ms=1000),
            fio.FioRun(fio.JOBS[1], bytes_per_s=1.0e9, iops=1.0, runtime_ms=1000)]
    results = judge_fio(runs, profile(extra), entity="/raid", disks=2)
    read, write = results
    assert (read.verdict, read.threshold["min"]) == (Verdict.FAIL, 6.4)
    assert "x 2 disks x 0.5" in read.threshold["source"]
    assert write.verdict == Verdict.SKIP  # no seq_write figure for the drive, no threshold


def test_fio_job_error_and_failed_run_are_error_never_a_figure() -> None:
    job = fio.JOBS[0]
    errored = {"fio version": "fio-3.33", "jobs": [{"jobname": "x", "error": 5,
                                                    "read": {"bw_bytes": 1, "runtime": 1}}]}
    assert "error 5 (Input/output error)" in str(fio.parse_fio(errored, job).problem)

    def dies(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        return proc(argv, "", rc=1, err="fio: pid=1, err=19/file:ioengines.c, "
                    "func=io_u error, error=No such device")

    run = fio.run_job(job, "/raid", runtime_s=1, size_mib=16, run=dies)
    assert run.problem is not None and "No such device" in run.problem
    result = judge_fio([run], profile(), entity="/raid", disks=2)[0]
    assert result.verdict == Verdict.ERROR and result.measured is None


def test_fio_missing_is_exit_3_naming_the_package() -> None:
    def absent(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    with pytest.raises(CannotRunError, match="fio package"):
        storage.run_fio(profile({"fio": {"runtime_s": 1}}), run=absent)


def test_fio_argv_is_direct_time_bounded_json() -> None:
    argv = fio.fio_argv(fio.JOBS[2], "/raid", runtime_s=20, size_mib=1024)
    for flag in ("--direct=1", "--time_based", "--runtime=20", "--output-format=json",
                 "--rw=randread", "--bs=4k", "--directory=/raid"):
        assert flag in argv


# --- DCGM -----------------------------------------------------------------------------------


def test_dcgm_3x_real_output_with_banner_and_nulls() -> None:
    diag = dcgm.parse_diag(nvme.parse_json_text(text("dcgm-3.1.0-nvvs-real-output.txt"),
                                                what="dcgmi"))
    assert diag.version == "3.1.0"
    results = judge_diag(diag)
    # 9 deployment tests x 8 GPUs (one comma list each) + software x 8
    assert len(results) == 9 * 8 + 8
    assert {r.verdict for r in results} == {Verdict.PASS}
    assert "gpu7:Inforom" in {r.entity for r in results}
    assert all(r.evidence["source"] == "peer-tool:dcgm" for r in results)


def test_dcgm_2x_fail_and_warn_map_from_dcgm_words() -> None:
    results = {r.entity: r for r in judge_diag(dcgm.parse_diag(doc("dcgm-2.x-gcm-fail.json")))}
    assert results["node:Persistence Mode"].verdict == Verdict.FAIL
    assert results["node:Environment Variables"].verdict == Verdict.WARN
    assert results["node:Inforom"].verdict == Verdict.PASS


def test_dcgm_4x_entities_messages_and_skips() -> None:
    results = {r.entity: r for r in judge_diag(dcgm.parse_diag(
        doc("dcgm-4.x-stress-fail-constructed.json")))}
    failed = results["gpu0:targeted_power"]
    assert failed.verdict == Verdict.FAIL and failed.evidence["error_ids"] == [42]
    assert "exceeded" in failed.evidence["messages"][0]
    assert results["gpu1:targeted_power"].verdict == Verdict.PASS
    skipped = results["gpu0:memtest"]
    assert skipped.verdict == Verdict.SKIP and "not supported" in skipped.evidence["reason"]


def test_dcgm_unknown_word_runtime_error_and_empty_are_error() -> None:
    odd = dcgm.parse_diag({"DCGM Diagnostic": {"test_categories": [{"category": "x", "tests": [
        {"name": "pcie", "results": [{"entity_id": 0, "status": "Incomplete"}]}]}]}})
    assert judge_diag(odd)[0].verdict == Verdict.ERROR
    broken = dcgm.parse_diag({"DCGM Diagnostic": {"version": "4.6.0",
                                                  "runtime_error": "host engine not running"}})
    assert judge_diag(broken)[0].verdict == Verdict.ERROR
    assert judge_diag(dcgm.parse_diag({"DCGM Diagnostic": {}}))[0].verdict == Verdict.ERROR


def test_dcgm_missing_is_skip_with_reason_and_levels_come_from_the_profile() -> None:
    prof = profile(dcgm_levels={"standard": 0, "acceptance": 3})
    [not_asked] = storage.run_dcgm(prof, "standard", which="")
    assert not_asked.verdict.value == "SKIP"
    assert "names no diagnostic at standard" in not_asked.evidence["reason"]
    skipped = storage.run_dcgm(prof, "acceptance", which="")
    assert [r.verdict for r in skipped] == [Verdict.SKIP]
    assert "dcgmi not installed" in skipped[0].evidence["reason"]
    seen: list[list[str]] = []

    def dcgmi(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        seen.append(argv)  # dcgmi exits non-zero when a test fails: still judged
        return proc(argv, text("dcgm-2.x-gcm-fail.json"), rc=226)

    results = storage.run_dcgm(prof, "acceptance", run=dcgmi, which="/usr/bin/dcgmi")
    assert seen == [["dcgmi", "diag", "-r", "3", "-j"]]
    assert Verdict.FAIL in {r.verdict for r in results}


def test_a_vanished_device_still_gives_a_report_the_next_run_reads(tmp_path: Path) -> None:
    """The run with a device gone writes its report (exit 1, ERROR on that device); the next
    run takes its unsafe shutdown baseline from it, by serial."""
    from nodegate.report import model
    from nodegate.report.exitcodes import exit_code_for

    node = _pm9a3_node(healthy_smart(unsafe_shutdowns=4), healthy_smart(), gone=("/dev/nvme2n1",))
    results = storage.run_nvme_health(profile(), report_dir=tmp_path, run=node)
    report = model.build(results, node="gpu-b01", profile="test", level="quick",
                         started_at=1.0e9, finished_at=1.0e9 + 5, backend="nvml")
    model.write(report, tmp_path / "quick-20240501T120000.000Z.json")
    loaded = model.load(tmp_path / "quick-20240501T120000.000Z.json")
    assert exit_code_for(loaded) == ExitCode.FAILED
    assert {r.verdict for r in loaded.results if r.entity == "nvme2"} == {Verdict.ERROR}
    later = _pm9a3_node(healthy_smart(unsafe_shutdowns=6), healthy_smart())
    grown = by(storage.run_nvme_health(profile(), report_dir=tmp_path, run=later),
               "nvme_unsafe_shutdowns")
    assert (grown["nvme1"].verdict, grown["nvme1"].measured) == (Verdict.WARN, 2)
    assert grown["nvme2"].verdict == Verdict.PASS  # no earlier count for its serial


def qemu_node(listing: str) -> FakeNode:
    paths = [d["DevicePath"] for d in json.loads(text(listing))["Devices"]]
    return FakeNode(text(listing), {p: text("qemu-nvme-cli-2.3-smart-log.json") for p in paths},
                    {p: text("qemu-nvme-cli-2.3-id-ctrl.json") for p in paths})


def test_nvme_cli_2_3_captures_string_counters_and_kelvin() -> None:
    """The md VM's nvme-cli 2.3 prints 128-bit counters as strings and pads id-ctrl strings;
    QEMU reports 323 K and a warning threshold (wctemp) of 343 K."""
    devices = nvme.read_devices(qemu_node("qemu-nvme-cli-2.3-list.json"))
    assert [d.controller for d in devices] == ["nvme0", "nvme1"]  # listed nvme1 first
    smart = devices[0].smart
    assert smart is not None and smart.unsafe_shutdowns == 0 and smart.temperature_c == 50
    assert (devices[0].model, devices[0].firmware, devices[0].wctemp_k) == (
        "QEMU NVMe Ctrl", "7.2.22", 343)
    results = judge_devices(devices, profile())
    assert {r.verdict for r in results} == {Verdict.PASS}
    assert by(results, "nvme_temperature")["nvme0"].threshold["below"] == 70


def test_commands_go_to_the_namespace_not_a_guessed_controller() -> None:
    """After a PCI remove and rescan on the VM, controller nvme2 carried namespace nvme1n2
    (native multipath numbers block devices by subsystem) and /dev/nvme1 did not exist."""
    node = qemu_node("qemu-nvme-cli-2.3-list-after-rescan.json")
    devices = nvme.read_devices(node)
    assert [(d.controller, d.path) for d in devices] == [("nvme0", "/dev/nvme0n1"),
                                                         ("nvme1", "/dev/nvme1n2")]
    assert ["nvme", "smart-log", "/dev/nvme1n2", "-o", "json"] in node.calls
    assert not [c for c in node.calls if "/dev/nvme1" in c]


def test_fio_3_33_capture_from_the_vm() -> None:
    run = fio.parse_fio(doc("qemu-fio-3.33-randread.json"), fio.JOBS[2])
    assert run.problem is None and run.fio_version == "fio-3.33"
    # fio's iops is total_ios over runtime; with --ramp_time its bw_bytes counts the ramp's
    # bytes too (io_bytes / total_ios is 4358 here, not 4096): kIOPS is what rand_read judges
    assert run.iops == pytest.approx(7984 / 3.120) and run.kiops == pytest.approx(2.559, 1e-3)


def test_health_without_nvme_cli_is_exit_3_naming_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``nodegate health`` on a node whose profile asks for the SMART checks but has no
    nvme-cli: one line, exit 3, the package named; no traceback."""
    from nodegate import cli
    from nodegate.profiles.loader import resolve_profile

    data = resolve_profile("sim-h100-hgx").data
    data["nvme"]["smart"] = True
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvme here
    # its own battery lock: the machine's /run/nodegate.lock may be held by another run
    monkeypatch.setenv("NODEGATE_LOCK_FILE", str(tmp_path / "lock"))
    code = cli.main(["health", "--profile", str(path), "--checks", "host", "--report-dir",
                     str(tmp_path / "out"), "--no-textfile", "--quiet"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "nvme-cli" in err and "Traceback" not in err and err.count("\n") == 1


def test_fio_plan_and_the_documented_pm1733_floors() -> None:
    """docs/storage.md's example: 8x PM1733 at 0.7 give 35.8 / 21.3 GB/s, 8120 kIOPS."""
    from nodegate.judge.storage import fio_floor

    extra = {"devices": 8, "fio": {"runtime_s": 20, "efficiency": 0.7, "source": SOURCE},
             "drive": {"model": "SAMSUNG MZWLJ3T8HBLS-00007", "seq_read_gbps": 6.4,
                       "seq_write_gbps": 3.8, "rand_read_kiops": 1450,
                       "source": "datasheet: test"}}
    prof = profile(extra)
    assert storage.planned_fio_s(prof) == 80.0
    floors = [round(fio_floor(prof, w, 8)[0] or 0, 1)
              for w in ("seq_read", "seq_write", "rand_read")]
    assert floors == [35.8, 21.3, 8120.0]
    assert storage.planned_fio_s(profile()) == 0.0


def test_fio_missing_stops_the_run_before_any_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    prof = profile({"fio": {"runtime_s": 5}})
    with pytest.raises(CannotRunError, match="fio package"):
        storage.preflight(prof, "standard")
    storage.preflight(prof, "quick")  # the quick level runs no fio
    storage.preflight(profile(), "acceptance")  # not asked for
