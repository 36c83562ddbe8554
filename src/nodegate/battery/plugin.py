"""pytest plugin of the validation battery (registered through the ``pytest11`` entry point).

Inert unless a test asks for the ``result`` fixture: then the plugin runs the engine once per
session (probes measure, the judge decides) and parametrizes each test with the results of
the check named by its ``@pytest.mark.check(NAME)`` marker, one per entity, so a failure
reads ``test_nvlink_state[gpu3.link5]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nodegate.battery.engine import ALL_GROUPS, LEVELS, QUICK_GROUPS

LEVEL_RANK = {level: index for index, level in enumerate(LEVELS)}
_STATE_KEY = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nodegate", "nodegate validation battery")
    group.addoption("--nodegate-profile", help="profile name or resolved profile JSON")
    group.addoption("--nodegate-level", choices=LEVELS, default="quick")
    group.addoption("--nodegate-checks", help=f"check groups, from {','.join(ALL_GROUPS)}")
    group.addoption("--nodegate-report-dir", type=Path, help="write the JSON report here")
    group.addoption("--nodegate-xid-window", default="boot")
    group.addoption("--nodegate-duration-scale", type=float, default=1.0)


def pytest_configure(config: pytest.Config) -> None:
    for name in ALL_GROUPS:
        config.addinivalue_line("markers", f"{name}: nodegate check group {name}")
    for level in LEVELS:
        config.addinivalue_line("markers", f"{level}: runs at the {level} level and above")
    config.addinivalue_line("markers", "check(name): the judged check this test asserts")
    config.stash[_STATE_KEY] = {}


def _state(config: pytest.Config) -> dict[str, Any]:
    return config.stash[_STATE_KEY]


def _profile(config: pytest.Config) -> Any:
    state = _state(config)
    if "profile" not in state:
        from nodegate.battery.session import select_profile

        state["profile"] = select_profile(config.getoption("--nodegate-profile"))
    return state["profile"]


def _groups(config: pytest.Config) -> tuple[str, ...]:
    from nodegate.battery.engine import parse_groups

    return parse_groups(config.getoption("--nodegate-checks"))


def _results(config: pytest.Config, group: str) -> list[Any]:
    """Results of one check group, computed once per session."""
    state = _state(config)
    cache = state.setdefault("results", {})
    if group in cache:
        return list(cache[group])
    if group in QUICK_GROUPS:
        from nodegate.battery.engine import QuickOptions, parse_duration, run_quick

        quick = [g for g in _groups(config) if g in QUICK_GROUPS]
        state.setdefault("started", time.time())
        outcome = run_quick(_profile(config), QuickOptions(
            groups=tuple(quick), xid_window_s=parse_duration(
                config.getoption("--nodegate-xid-window"))))
        state["boot_id"] = outcome.boot_id
        for name in quick:
            cache[name] = []
        for result in outcome.results:
            cache.setdefault(_group_of(result.check), []).append(result)
    else:
        from nodegate.battery.load import run_load_group

        state.setdefault("started", time.time())
        load = run_load_group(_profile(config), config.getoption("--nodegate-level"),
                              config.getoption("--nodegate-duration-scale"))
        state.setdefault("series", {}).update(load.series)
        state.setdefault("matrices", {}).update(load.matrices)
        state["backend"] = load.backend
        cache[group] = list(load.results)
    return list(cache.get(group, []))


def _group_of(check: str) -> str:
    from nodegate.battery.registry import group_of

    return group_of(check)


def _marker_group(definition: Any) -> str | None:
    for name in ALL_GROUPS:
        if definition.get_closest_marker(name) is not None:
            return name
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "result" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("check")
    group = _marker_group(metafunc.definition)
    if marker is None or group is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a battery test needs "
                                "@pytest.mark.check(NAME) and a group marker")
    if group not in _groups(metafunc.config) or not _level_selected(metafunc.config,
                                                                    metafunc.definition):
        metafunc.parametrize("result", [], ids=[])
        return
    names = set(marker.args)
    results = [r for r in _results(metafunc.config, group) if r.check in names]
    _state(metafunc.config).setdefault("claimed", set()).update(names)
    metafunc.parametrize("result", results, ids=[r.entity for r in results])


def _level_selected(config: pytest.Config, definition: Any) -> bool:
    chosen = LEVEL_RANK[config.getoption("--nodegate-level")]
    for level in LEVELS:
        if definition.get_closest_marker(level) is not None:
            return LEVEL_RANK[level] <= chosen
    return True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    state = config.stash.get(_STATE_KEY, {})
    report_dir = config.getoption("--nodegate-report-dir", None)
    if not state.get("results") or report_dir is None:
        return
    from nodegate import __version__
    from nodegate.report import build, write

    results = [r for group in state["results"].values() for r in group]
    report = build(results, node=_node(), profile=state["profile"].name,
                   level=config.getoption("--nodegate-level"), started_at=state["started"],
                   backend=state.get("backend", "nvml"), boot_id=state.get("boot_id"),
                   nodegate_version=__version__, series=state.get("series"),
                   matrices=state.get("matrices"), labels={"runner": "pytest"})
    write(report, Path(report_dir) / f"battery-{config.getoption('--nodegate-level')}.json")


def _node() -> str:
    import socket

    return socket.gethostname()
