"""Bad input found on real data: hostile numbers and every time format in kernel logs, and
nvme-cli JSON with keys missing or unreadable.

Each case runs ``nodegate health`` in this process (``tests/badinput/test_corpus.py`` runner)
and checks the documented exit code, the words the output must hold (and, where the point
is that an unrelated check stays judged, the words it must not hold), no traceback, and
nothing written beside the input: the report goes to a folder of its own.

Kernel-log lines are the real ones of ``tests/battery/data/kernel-log-formats.json`` with
their time moved: an Xid 79 three days old and an Xid 13 a minute old, so ``--xid-window 1h``
must keep the 13 (WARN, exit 0) and drop the 79 (it would FAIL, exit 1).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from nodegate.profiles import resolve_profile
from tests.badinput.test_corpus import Case, _prepare, _run

STORAGE = Path(__file__).resolve().parents[1] / "storage" / "data"
HEALTH = ("health", "--profile", "sim-h100-hgx", "--no-textfile", "--report-dir", "{r}")
LOG = (*HEALTH, "--checks", "log")
WINDOW = (*LOG, "--xid-window", "1h")
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=30393, name=Media, GPU has fallen off the bus."
XID13 = ("NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Global "
         "Exception on (GPC 9, TPC 1, SM 1): Multiple Warp Errors")


@dataclass
class RealCase(Case):
    """A Case with environment variables (``{d}``: the case's folder) and words that must
    not appear (a check that must stay judged, an event the window must drop)."""

    env: dict[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()


def _log(lines: list[str]) -> dict[str, bytes | str]:
    return {"k.log": "\n".join(lines) + "\n"}


def _stamps(fmt: str) -> tuple[str, str]:
    """(old, recent) prefixes in ``fmt``: three days and one minute before now."""
    now = datetime.now(timezone.utc)
    out = []
    for when in (now - timedelta(days=3), now - timedelta(minutes=1)):
        local = when.astimezone()
        out.append({
            "iso": when.strftime("%Y-%m-%dT%H:%M:%S,123456+00:00 "),
            "iso-decode": when.strftime("kern  :warn  : %Y-%m-%dT%H:%M:%S,123456+00:00 "),
            "rsyslog": when.strftime("%Y-%m-%dT%H:%M:%S.218036+00:00 gpu-node kernel: "),
            "short-iso": when.strftime("%Y-%m-%dT%H:%M:%S+0000 gpu-node kernel: "),
            "syslog": local.strftime("%b ") + f"{local.day:2d}" + local.strftime(
                " %H:%M:%S gpu-node kernel: "),
            "short-precise": local.strftime("%b %d %H:%M:%S.123456 gpu-node kernel: "),
            "ctime": local.strftime("[%a %b ") + f"{local.day:2d}" + local.strftime(
                " %H:%M:%S %Y] "),
        }[fmt])
    return out[0], out[1]


def _window_case(fmt: str) -> RealCase:
    old, recent = _stamps(fmt)
    return RealCase(f"kernel-log-{fmt}-old-xid-outside-window", WINDOW, 0,
                    ("xid_events", "WARN", "13"), _log([old + XID79, recent + XID13]),
                    env={"NODEGATE_KERNEL_LOG": "{d}/k.log"},
                    absent=("Node verdict: FAIL", "79,13", "13,79"))


def _hostile(name: str, line: str, words: tuple[str, ...] = ("xid_events", "unreadable",
                                                              "WARN")) -> RealCase:
    return RealCase(f"kernel-log-{name}", LOG, 0, words, _log([line]),
                    env={"NODEGATE_KERNEL_LOG": "{d}/k.log"}, absent=("internal error",))


KERNEL_LOG_CASES = [
    _hostile("xid-code-5000-digits",
             "[  100.5] NVRM: Xid (PCI:0000:18:00): " + "7" * 5000 + ", pid=1, name=x, lost"),
    _hostile("xid-code-arabic-indic-digits",
             "[  100.5] NVRM: Xid (PCI:0000:18:00): \u0661\u0663, pid=1, name=x, lost"),
    _hostile("xid-code-fullwidth-digits",
             "2026-12-06T05:20:53,123456+00:00 NVRM: Xid (PCI:0000:18:00): \uff17\uff19, lost"),
    _hostile("xid-bus-not-hex",
             "Dec  6 05:20:53 gpu-node kernel: NVRM: Xid (PCI:zzzz:18:00): 79, lost"),
    _hostile("sxid-code-5000-digits", "[  100.5] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): "
             + "1" * 5000 + ", Fatal, Link 32", ("xid_events", "nvswitch0", "unreadable")),
    _hostile("sxid-bus-colons-only",
             "[  100.5] nvidia-nvswitch1: SXid (PCI:::): 12028, Non-fatal, Link 32",
             ("xid_events", "nvswitch1", "unreadable")),
    # a time that does not read is unknown: inside the window, so the 79 still FAILs
    RealCase("kernel-log-seconds-5000-digits", WINDOW, 1, ("xid_events", "FAIL", "79"),
             _log(["[" + "9" * 5000 + ".5] " + XID79]),
             env={"NODEGATE_KERNEL_LOG": "{d}/k.log"}),
    RealCase("kernel-log-date-that-does-not-exist", WINDOW, 1, ("xid_events", "FAIL", "79"),
             _log(["Feb 30 05:20:53 gpu-node kernel: " + XID79]),
             env={"NODEGATE_KERNEL_LOG": "{d}/k.log"}),
    *[_window_case(fmt) for fmt in ("iso", "iso-decode", "rsyslog", "short-iso", "syslog",
                                    "short-precise", "ctime")],
]


def _nvme_files(smart_change: dict[str, object], drop: tuple[str, ...] = (),
                ident_drop: tuple[str, ...] = ()) -> dict[str, bytes | str]:
    """A fake ``nvme`` on PATH answering with the project's nvme-cli 2.3 captures, the SMART
    log and id-ctrl changed as given, and a profile that asks for SMART health."""
    smart = json.loads((STORAGE / "qemu-nvme-cli-2.3-smart-log.json").read_text())
    smart = {k: v for k, v in {**smart, **smart_change}.items() if k not in drop}
    ident = json.loads((STORAGE / "qemu-nvme-cli-2.3-id-ctrl.json").read_text())
    ident = {k: v for k, v in ident.items() if k not in ident_drop}
    data = resolve_profile("sim-h100-hgx").data
    data["nvme"] = {**(data.get("nvme") or {}), "smart": True}
    return {
        "bin/nvme": '#!/bin/sh\nd=$(dirname "$0")\ncase "$1" in list) cat "$d/list.json";; '
                    'id-ctrl) cat "$d/id.json";; smart-log) cat "$d/smart.json";; esac\n',
        "bin/list.json": (STORAGE / "qemu-nvme-cli-2.3-list.json").read_text(),
        "bin/id.json": json.dumps(ident), "bin/smart.json": json.dumps(smart),
        "p.json": json.dumps(data),
    }


NVME = ("health", "--profile", "{d}/p.json", "--no-textfile", "--report-dir", "{r}",
        "--checks", "host")
NVME_ENV = {"PATH": "{d}/bin" + os.pathsep + "{PATH}"}

NVME_CASES = [
    RealCase("nvme-smart-missing-critical-warning", NVME, 1,
             ("nvme_critical_warning", "critical_warning missing"),
             _nvme_files({}, drop=("critical_warning",)), env=NVME_ENV,
             absent=("nvme_firmware", "nvme_spare", "nvme_namespace_size")),
    RealCase("nvme-smart-missing-media-errors", NVME, 1, ("nvme_media_errors",),
             _nvme_files({}, drop=("media_errors",)), env=NVME_ENV,
             absent=("nvme_firmware", "nvme_critical_warning")),
    RealCase("nvme-smart-media-errors-5000-digits", NVME, 1, ("nvme_media_errors",),
             _nvme_files({"media_errors": "7" * 5000}), env=NVME_ENV,
             absent=("nvme_firmware", "internal error")),
    RealCase("nvme-smart-unsafe-shutdowns-arabic-indic", NVME, 1, ("nvme_unsafe_shutdowns",),
             _nvme_files({"unsafe_shutdowns": "\u0661\u0662"}), env=NVME_ENV,
             absent=("nvme_firmware", "nvme_media_errors")),
    RealCase("nvme-id-ctrl-missing-wctemp-and-fr", NVME, 1, ("nvme_critical_warning",),
             _nvme_files({}, drop=("critical_warning",), ident_drop=("fr", "wctemp")),
             env=NVME_ENV, absent=("nvme_firmware", "internal error")),
]

CASES = KERNEL_LOG_CASES + NVME_CASES


def test_the_cases_are_many_and_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 8


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_real_data_bad_input(case: RealCase, tmp_path: Path,
                             tmp_path_factory: pytest.TempPathFactory,
                             monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path_factory.mktemp("reports")
    argv, before = _prepare(replace(case, argv=tuple(a.replace("{r}", str(reports))
                                                     for a in case.argv)), tmp_path)
    if (tmp_path / "bin" / "nvme").exists():
        (tmp_path / "bin" / "nvme").chmod(0o755)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.replace("{d}", str(tmp_path)).replace(
            "{PATH}", os.environ["PATH"]))
    code, text = _run(argv, case, capsys, tmp_path)
    assert code == case.code, text
    assert "Traceback" not in text
    for word in case.names:
        assert word in text, (word, text)
    for word in case.absent:
        assert word not in text, (word, text)
    assert set(tmp_path.rglob("*")) == before
    assert (reports / "quick-latest.json").is_file()  # a report, every time
