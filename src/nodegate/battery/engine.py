"""Run the quick-level checks: probes measure, the judge decides, one list of results.

Which groups run, and in which order, comes from the checks' declarations; ``RUNNERS`` holds
what measures each group (one board read serves them all).

Both entry points use this: ``nodegate health`` (fast, no pytest, no torch) and the pytest
battery in ``validation/`` (which parametrizes one test per result). So the cron path and
an operator's ``pytest validation/`` can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodegate import records
from nodegate.battery.registry import groups_at, require_thresholds
from nodegate.errors import ConfigError
from nodegate.probes.nvml import DEFAULT_DEADLINE_S, BoardSnapshot, NvmlUnavailable
from nodegate.profiles import Profile
from nodegate.results import CheckResult
from nodegate.vocabulary import ALL_GROUPS, QUICK_GROUPS, Group, Level

if TYPE_CHECKING:
    from nodegate.probes.nvml import PendingBoard

#: The groups that read the board (the log and host groups for the GPUs' bus ids).
BOARD_GROUPS = frozenset({Group.GPU, Group.LOG, Group.HOST, Group.NETWORK})


@records.record
class QuickOptions:
    """What a quick run checks and where: groups, Xid window, roots, NVML deadline."""

    groups: tuple[str, ...] = QUICK_GROUPS
    xid_window_s: float | None = None  # None: since boot
    host_root: Path = Path("/")
    report_dir: Path | None = None  # earlier reports, for recurring Xids (None: the default)
    nvml_deadline_s: float = DEFAULT_DEADLINE_S  # one whole board read, in a child process
    sysfs_root: Path | None = None  # None: $NODEGATE_SYSFS_ROOT or /sys (the network group)
    #: modules the caller needs after the run (its report's), imported while the board is read
    preload: tuple[str, ...] = ()


@records.record
class QuickOutcome:
    """A quick run's results, with the board read and what could not be read."""

    results: list[CheckResult]
    boot_id: str | None
    board: BoardSnapshot | None
    notes: list[str] = field(default_factory=list)
    nvml_down: str | None = None  # why the board could not be read at all


def parse_groups(text: str | None, allowed: tuple[str, ...] = ALL_GROUPS) -> tuple[str, ...]:
    """The groups ``--checks`` names; absent means all. ``--checks ""`` names none, which is
    bad input: running everything instead would pass off a typo'd selection as a full run."""
    if text is None:
        return allowed
    groups = tuple(g.strip() for g in text.split(",") if g.strip())
    if not groups:
        raise ConfigError(f"no check group given; choose from {', '.join(allowed)} "
                          "(or leave --checks out to run them all)", key="--checks")
    unknown = [g for g in groups if g not in allowed]
    if unknown:
        raise ConfigError(
            f"unknown check group {', '.join(unknown)}; "
            f"choose from {', '.join(allowed)}", key="--checks",
        )
    return groups


def parse_duration(text: str | None, *, key: str = "--xid-window") -> float | None:
    """``90s``, ``15m``, ``6h``, ``2d`` or ``boot`` (None), for the Xid window or an age."""
    if text is None or text == "boot":
        return None
    from nodegate.bounds import parse_number

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        # a window of NaN, infinity, zero or less would read no log or all of it silently
        return parse_number(number, float, low=0, high=366 * 86400 / scale, low_open=True,
                            key=key) * scale
    except ConfigError:
        raise ConfigError(f"bad duration {text!r}: a positive window of at most 366 days "
                          "(90s, 15m, 6h, 2d) or boot", key=key) from None


def _judge_log(profile: Profile, options: QuickOptions, bus_ids: dict[str, str],
               unknown: list[str], gpus: list[str]) -> list[CheckResult]:
    """Xid and NVSwitch SXid lines of this boot; earlier reports are read only when a
    hardware event needs its recurrence checked."""
    from nodegate.judge.xid import HISTORY_REPORTS, judge_sxids, judge_xids, profile_overrides
    from nodegate.probes.kernel_log import parse_sxids, parse_xids, read_kernel_log, within_window

    log = read_kernel_log()
    window = "boot" if options.xid_window_s is None else f"{options.xid_window_s:g}s"
    if log.problem is not None:  # no log read: nothing was measured, so nothing may pass
        from nodegate.judge.kernel_log import judge_log_unreadable

        return judge_log_unreadable(gpus, source=log.source, problem=log.problem, window=window)

    read: list[list[dict[str, Any]]] = []

    def history() -> list[dict[str, Any]]:  # read once, and only when asked
        from nodegate.report.history import recent_reports
        from nodegate.report.outputs import default_report_dir

        if not read:
            read.append(recent_reports(options.report_dir or default_report_dir(),
                                       HISTORY_REPORTS))
        return read[0]

    events = within_window(parse_xids(log.lines), options.xid_window_s, log.uptime_s)
    sxids = within_window(parse_sxids(log.lines), options.xid_window_s, log.uptime_s)
    return [
        *judge_xids(events, bus_ids, boot_id=log.boot_id, source=log.source, window=window,
                    unknown_bus_gpus=unknown, overrides=profile_overrides(profile.section("xid")),
                    history=history),
        *judge_sxids(sxids, boot_id=log.boot_id, source=log.source, window=window,
                     history=history),
    ]


def _judge_growth(results: list[CheckResult], profile: Profile, options: QuickOptions,
                  previous: Previous | None = None) -> list[CheckResult]:
    """Counters (NVLink, PCIe replay, ECC SBE) rejudged by growth since the previous report
    of this boot (``nodegate.judge.counters``); ``previous``: ``_counter_previous``, when
    already read."""
    import time

    from nodegate.judge.counters import judge_growth
    from nodegate.report.order import read_boottime

    if previous is None:
        previous = _counter_previous(options)
    return judge_growth(results, previous.report, profile, now=time.time(),
                        boottime_s=read_boottime())


class Previous:
    """The report counter growth is judged against (None: there is none). A plain class: a
    dataclass costs the cron check's start-up ~0.3 ms to create."""

    __slots__ = ("report",)

    def __init__(self, report: Mapping[str, Any] | None) -> None:
        self.report = report


def _counter_previous(options: QuickOptions) -> Previous:
    """The newest earlier report of this boot that holds counters (``previous_of_boot``
    over the newest ``COUNTER_HISTORY`` reports), decoding only the reports it takes."""
    from nodegate.judge.counters import COUNTER_HISTORY, previous_of_boot
    from nodegate.probes.kernel_log import read_boot_id
    from nodegate.report.history import newest_where
    from nodegate.report.outputs import default_report_dir

    boot_id = read_boot_id()
    if boot_id is None:
        return Previous(None)
    return Previous(newest_where(
        options.report_dir or default_report_dir(), COUNTER_HISTORY,
        lambda report: previous_of_boot([report], boot_id) is not None,
        head=lambda fields: fields.get("boot_id") == boot_id))


def _judge_network(profile: Profile, options: QuickOptions, board: BoardSnapshot | None,
                   nvml_down: str | None) -> list[CheckResult]:
    """The RDMA rails from sysfs against the profile, their counters by growth; the rail map
    is left beside the reports (``nodegate.battery.network``)."""
    from nodegate.battery.network import run_network
    from nodegate.report.outputs import default_report_dir

    return _judge_growth(run_network(profile, board, sysfs_root=options.sysfs_root,
                                     report_dir=options.report_dir or default_report_dir(),
                                     nvml_down=nvml_down), profile, options)


def parse_deadline(text: str | None) -> float:
    """``--nvml-timeout``: seconds (``30``, ``30s``, ``2m``), finite and above zero."""
    if text is None:
        return DEFAULT_DEADLINE_S
    value = parse_duration(text, key="--nvml-timeout") if text != "boot" else None
    if value is None:
        raise ConfigError(f"bad NVML deadline {text!r} (seconds above 0: 30, 30s, 2m)",
                          key="--nvml-timeout")
    return value


def _start_board_read(options: QuickOptions) -> PendingBoard | None:
    """One board read for every group, in a child process with a deadline: a wedged driver
    yields an ERROR in time instead of a run holding the battery lock for ever. None when no
    group reads the board."""
    from nodegate.probes.nvml import start_board_read

    if not BOARD_GROUPS & set(options.groups):
        return None
    return start_board_read(options.nvml_deadline_s,
                            with_nvlink_counters="gpu" in options.groups)


def _board_of(pending: PendingBoard | None) -> tuple[BoardSnapshot | None,
                                                      NvmlUnavailable | None]:
    """The board read's answer: the board, or why NVML gave none."""
    if pending is None:
        return None, None
    try:
        return pending.result(), None
    except NvmlUnavailable as exc:
        return None, exc


#: Modules the groups' judges import, loaded while the child reads the board.
_JUDGE_MODULES: dict[Group, tuple[str, ...]] = {
    Group.GPU: ("nodegate.judge.gpu", "nodegate.judge.counters"),
    Group.LOG: ("nodegate.judge.xid", "nodegate.probes.kernel_log"),
}


def _meanwhile(q: _Quick) -> None:
    """What needs no board, done while the child reads it: the parent only waited there
    (~10 ms of the cron check, a second core idle). The judges' modules are imported, the
    earlier report the counters are judged against is found and decoded, and the caller's
    ``preload`` modules imported; neither depends on
    the board, and the battery lock held keeps the report folder as it is."""
    import importlib

    for group, modules in _JUDGE_MODULES.items():
        if group in q.options.groups:
            for module in modules:
                importlib.import_module(module)
    if Group.GPU in q.options.groups:
        q.previous = _counter_previous(q.options)
    for module in q.options.preload:
        importlib.import_module(module)


class _Quick:
    """What every quick group's runner reads: the profile, the options, the one board read
    (``board``, or why there is none: ``down``), and ``previous``: ``_counter_previous``,
    read while the board was (None: not read). A plain class, as ``Previous`` is."""

    __slots__ = ("board", "down", "options", "previous", "profile")

    def __init__(self, profile: Profile, options: QuickOptions) -> None:
        self.profile, self.options = profile, options
        self.board: BoardSnapshot | None = None
        self.down: NvmlUnavailable | None = None
        self.previous: Previous | None = None

    @property
    def bus_ids(self) -> dict[str, str]:
        return {g.entity: g.bus_id for g in self.board.gpus if g.bus_id} if self.board else {}


def _run_gpu(q: _Quick) -> list[CheckResult]:
    from nodegate.judge.gpu import judge_board, judge_nvml_unavailable

    if q.board is not None:
        return _judge_growth(judge_board(q.board, q.profile), q.profile, q.options,
                             q.previous)
    if q.down is not None:
        return judge_nvml_unavailable(q.down.reason, kind=q.down.kind, stage=q.down.stage,
                                      deadline_s=q.options.nvml_deadline_s)
    return []


def _run_log(q: _Quick) -> list[CheckResult]:
    gpus = q.board.gpus if q.board else []
    return _judge_log(q.profile, q.options, q.bus_ids, [g.entity for g in gpus if not g.bus_id],
                      [g.entity for g in gpus])


def _run_host(q: _Quick) -> list[CheckResult]:
    from nodegate.battery.storage import run_nvme_health
    from nodegate.judge.host import judge_host
    from nodegate.probes.host import HostProbe

    return [*judge_host(HostProbe(q.options.host_root), q.profile, list(q.bus_ids.values())),
            *run_nvme_health(q.profile, report_dir=q.options.report_dir)]


def _run_network(q: _Quick) -> list[CheckResult]:
    return _judge_network(q.profile, q.options, q.board,
                          q.down.reason if q.down is not None else None)


def _run_power(q: _Quick) -> list[CheckResult]:
    from nodegate.battery.power import run_static

    return run_static(q.profile)


#: Each group with a quick check -> what measures and judges it; which groups run, and in
#: which order, comes from the checks' declarations (``registry.groups_at``).
RUNNERS: dict[Group, Callable[[_Quick], list[CheckResult]]] = {
    Group.GPU: _run_gpu, Group.LOG: _run_log, Group.HOST: _run_host,
    Group.NETWORK: _run_network, Group.POWER: _run_power,
}


def run_quick(profile: Profile, options: QuickOptions) -> QuickOutcome:
    require_thresholds(profile, Level.QUICK.value, options.groups)
    quick = _Quick(profile, options)
    pending = _start_board_read(options)
    try:
        _meanwhile(quick)
        quick.board, quick.down = _board_of(pending)
    finally:
        if pending is not None:
            pending.close()
    board, down = quick.board, quick.down
    results: list[CheckResult] = []
    for group in groups_at(Level.QUICK):
        if group in options.groups:
            results += RUNNERS[group](quick)
    notes = []
    if Group.GPU not in options.groups and down is not None:
        notes.append(f"no NVML for GPU bus ids: {down.reason}")
    from nodegate.probes.kernel_log import read_boot_id

    return QuickOutcome(results=results, boot_id=read_boot_id(), board=board, notes=notes,
                        nvml_down=down.reason if down is not None else None)
