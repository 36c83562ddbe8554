"""Record one battery run in one front end, judge the same run in the other (tests only).

``tests/battery/test_front_ends.py`` compares ``nodegate validate`` with ``pytest
validation/`` on one faulty board. Both call ``nodegate.battery.run.run_battery``; what the
comparison is about is everything around that call: the arguments each front end passes and
what each makes of the run it gets back (report, exit code, pytest outcomes). So the load runs
once: the recording front end runs the battery for real and saves the ``BatteryRun`` with the
arguments it was called with; the replaying front end gets that very run back instead of
measuring again, after saving the arguments *it* passed (the test compares the two) and
refusing a call that differs.

Loaded into the front end's own process, never into the product: ``-p tests.battery.replay``
for pytest, ``python -m tests.battery.replay validate ...`` for the CLI (``nodegate``'s own
entry point, ``nodegate.cli:main``, with ``run_battery`` wrapped). Without either variable it
changes nothing.
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

#: path the recording front end writes ``{"call": ..., "run": BatteryRun}`` to (pickle)
RECORD = "NODEGATE_TEST_BATTERY_RECORD"
#: path of such a recording, given back instead of running the battery
REPLAY = "NODEGATE_TEST_BATTERY_REPLAY"
#: suffix of the JSON file where either side writes the call it made
CALL_SUFFIX = ".call.json"
#: the replaying side's call goes to RECORDING + REPLAYED + CALL_SUFFIX
REPLAYED = ".replayed"


def call_of(real: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What decides a run's results, defaults filled in: the profile (name and digest of its
    data), the level, the groups and every judging option. ``progress`` only draws;
    ``report_dir`` is where the quick phase looks for earlier reports (none in these tests:
    ``nodegate validate`` is given an empty directory, the plugin passes none), so neither is
    compared."""
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments)
    profile = call.pop("profile")
    call["groups"] = list(call["groups"])
    for unjudged in ("progress", "report_dir"):
        call.pop(unjudged, None)
    return {"profile": profile.name, "profile_digest": profile.digest(), **call}


def call_path(recording: str | Path) -> Path:
    return Path(f"{recording}{CALL_SUFFIX}")


def install() -> None:
    """Wrap ``run_battery`` per the environment: record, replay, or (neither set) nothing."""
    from nodegate.battery import run as battery_run

    record, replay = os.environ.get(RECORD), os.environ.get(REPLAY)
    if record and replay:
        raise SystemExit(f"{RECORD} and {REPLAY} both set: one front end records, the other "
                         "replays")
    real = battery_run.run_battery

    def recording(*args: Any, **kwargs: Any) -> Any:
        call = call_of(real, args, kwargs)
        ran = real(*args, **kwargs)
        Path(str(record)).write_bytes(pickle.dumps({"call": call, "run": ran}))
        call_path(str(record)).write_text(json.dumps(call, indent=1) + "\n")
        return ran

    def replaying(*args: Any, **kwargs: Any) -> Any:
        call = call_of(real, args, kwargs)
        call_path(f"{replay}{REPLAYED}").write_text(json.dumps(call, indent=1) + "\n")
        saved = pickle.loads(Path(str(replay)).read_bytes())  # this test's own file
        if saved["call"] != call:
            raise SystemExit(f"replay refused: recorded {saved['call']}, asked {call}")
        return saved["run"]

    if record:
        battery_run.run_battery = recording
    elif replay:
        battery_run.run_battery = replaying


def pytest_configure(config: Any) -> None:
    """As a pytest plugin (``-p tests.battery.replay``): wrap before any fixture runs."""
    del config
    install()


def main(argv: list[str]) -> int:
    """``python -m tests.battery.replay ARGS``: ``nodegate ARGS`` with the wrapper."""
    install()
    from nodegate.cli import main as nodegate_main

    return nodegate_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
