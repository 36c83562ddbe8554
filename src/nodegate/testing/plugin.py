"""pytest plugin of the validation battery (registered through the ``pytest11`` entry point).

Inert unless a selected test asks for the ``results`` fixture. Then one session fixture runs
the same battery as ``nodegate validate`` (``nodegate.battery.run``: quick checks, load,
power under load, under the node's battery lock) and each test asserts the results of the
check named by its ``@pytest.mark.check(NAME)`` marker, every entity at once: a failure lists
each entity that failed (``nvlink_state[gpu3.link5]: FAIL ...``).

Nothing is measured at collection: ``--collect-only`` and ``-k`` that selects no battery test
start no GPU load. A check's group and level come from ``nodegate.battery.registry`` (the
table ``nodegate validate`` reads), never from the test file, so the two front ends select the
same checks. An ERROR verdict is a pytest error; a result that no test claims fails the
session, so nothing the engine judged can be dropped on the way.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery.registry import CHECKS
from nodegate.vocabulary import ALL_GROUPS, LEVEL_RANK, LEVELS

_STATE_KEY = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nodegate", "nodegate validation battery")
    group.addoption("--nodegate-profile", help="profile name or resolved profile JSON")
    group.addoption("--nodegate-level", choices=LEVELS, default="quick")
    group.addoption("--nodegate-checks", help=f"check groups, from {','.join(ALL_GROUPS)}")
    group.addoption("--nodegate-report-dir", type=Path, help="write the JSON report here")
    group.addoption("--nodegate-xid-window", default="boot")
    group.addoption("--nodegate-duration-scale", type=float, default=1.0)
    group.addoption("--nodegate-workers", type=int, help="load workers (default: GPU count)")


def pytest_configure(config: pytest.Config) -> None:
    for name in ALL_GROUPS:
        config.addinivalue_line("markers", f"{name}: nodegate check group {name}")
    for level in LEVELS:
        config.addinivalue_line("markers", f"{level}: judged at the {level} level and above")
    config.addinivalue_line("markers", "check(name): the judged check this test asserts")
    config.stash[_STATE_KEY] = {"claimed": set()}


def _state(config: pytest.Config) -> dict[str, Any]:
    return config.stash[_STATE_KEY]


def _groups(config: pytest.Config) -> tuple[str, ...]:
    from nodegate.battery.engine import parse_groups

    return parse_groups(config.getoption("--nodegate-checks"))


def _is_battery_test(item: pytest.Item) -> bool:
    """A test whose ``results`` fixture is this plugin's: another suite's own ``results``
    fixture or parameter (the project's tests have some) is not a battery test."""
    info = getattr(item, "_fixtureinfo", None)
    defs: Any = info.name2fixturedefs.get("results") if info is not None else None
    return bool(defs) and getattr(defs[-1].func, "__module__", None) == __name__


def _checks_of(item: pytest.Item) -> list[str]:
    marker = item.get_closest_marker("check")
    return [str(a) for a in marker.args] if marker is not None else []


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every battery test names registered checks; group and level markers come from the
    registry (a test cannot place a check elsewhere than ``nodegate validate`` does)."""
    if not _is_battery_test(item):
        return
    names = _checks_of(item)
    unknown = [n for n in names if n not in CHECKS]
    if not names or unknown:
        raise pytest.UsageError(f"{item.nodeid}: a battery test needs @pytest.mark.check(NAME) "
                                f"with registered checks (unknown: {', '.join(unknown) or '-'})")
    for name in names:
        info = CHECKS[name]
        item.add_marker(info.group)
        item.add_marker(info.level)
    _state(item.config)["claimed"].update(names)


def _selected(config: pytest.Config, check: str) -> bool:
    info = CHECKS[check]
    level = config.getoption("--nodegate-level")
    return info.group in _groups(config) and LEVEL_RANK[info.level] <= LEVEL_RANK[level]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Checks outside the chosen groups or above the chosen level are deselected."""
    if not any(_is_battery_test(i) for i in items):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        names = _checks_of(item) if _is_battery_test(item) else []
        (drop if names and not any(_selected(config, n) for n in names) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def nodegate_battery(request: pytest.FixtureRequest) -> Any:
    """Run the battery once for the session, as ``nodegate validate`` would (progress goes
    to the real stderr: pytest's capture would hide a long run's progress)."""
    from nodegate.battery.engine import parse_duration
    from nodegate.battery.run import run_battery
    from nodegate.errors import NodegateError
    from nodegate.profiles.installed import select_profile
    from nodegate.progress import for_stream

    config = request.config
    state = _state(config)
    try:
        profile = select_profile(config.getoption("--nodegate-profile"))
        ran = run_battery(profile, config.getoption("--nodegate-level"), _groups(config),
                          xid_window_s=parse_duration(config.getoption("--nodegate-xid-window")),
                          duration_scale=config.getoption("--nodegate-duration-scale"),
                          workers=config.getoption("--nodegate-workers"),
                          progress=for_stream(sys.__stderr__ or sys.stderr),
                          # earlier reports (recurring Xids, counter growth) are read where
                          # this run writes, as `nodegate validate --report-dir` does
                          report_dir=config.getoption("--nodegate-report-dir", None))
    except NodegateError as exc:
        pytest.exit(f"nodegate battery could not run: {exc}", returncode=3)
    state["profile"], state["run"] = profile, ran
    return ran


@pytest.fixture
def results(request: pytest.FixtureRequest, nodegate_battery: Any) -> list[Any]:
    """This test's check results; any ERROR makes the test a pytest error, none a skip."""
    from nodegate.results import Verdict
    from nodegate.testing.asserts import CheckError, describe

    names = set(_checks_of(request.node))
    found = [r for r in nodegate_battery.results if r.check in names]
    if not found:
        pytest.skip(f"the battery judged no {', '.join(sorted(names))} on this node "
                    "(nothing of that kind present)")
    errors = [r for r in found if r.verdict == Verdict.ERROR]
    if errors:
        raise CheckError("\n".join(describe(r) for r in errors))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(_STATE_KEY, {})
    ran = state.get("run")
    if ran is None:
        return
    unclaimed = sorted({r.check for r in ran.results} - state["claimed"])
    if unclaimed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        _say(config, "nodegate: results no battery test claims (a wiring defect, the node "
                     f"is not judged complete): {', '.join(unclaimed)}")
    for note in ran.notes:
        _say(config, f"nodegate: {note}")
    report_dir = config.getoption("--nodegate-report-dir", None)
    if report_dir is None:
        return
    from nodegate import __version__
    from nodegate.report import build, write
    from nodegate.report.run_record import run_record

    level = config.getoption("--nodegate-level")
    report = build(ran.results, node=socket.gethostname(), profile=state["profile"].name,
                   level=level, started_at=ran.started_at, duration_s=ran.duration_s,
                   backend=ran.backend, boot_id=ran.boot_id, nodegate_version=__version__,
                   series=ran.series or None, matrices=ran.matrices or None,
                   labels={"runner": "pytest", "groups": ",".join(_groups(config))},
                   gpus=ran.gpus,
                   run=run_record(_groups(config), state["profile"], level,
                                  config.getoption("--nodegate-duration-scale")))
    write(report, Path(report_dir) / f"battery-{level}.json")


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text, red=True)
