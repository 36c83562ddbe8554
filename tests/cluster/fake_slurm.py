"""A fake ``scontrol``/``sinfo`` on PATH that answers in Slurm 22.05's formats and can lie.

The state lives in a JSON file (``$FAKE_SLURM_STATE``) so every invocation, from the test or
from a ``nodegate`` it runs, sees the same cluster. ``lie`` makes it answer badly:
``{"answer_for": "n2"}`` (every ``show node`` answers about n2), ``{"empty": true}``
(``show node`` prints nothing), ``{"empty_sinfo": true}``, ``{"garbled": true}``. ``race``
plays a person acting while nodegate is between its read and its update: after the
``after_show``-th ``show node`` has printed its (now old) answer, the fake sleeps ``sleep_s``
(a slow controller) and applies ``person`` (``{"node", "state", "reason"}``) to the state.
Every call is appended to ``calls``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

SCRIPT = r'''#!/usr/bin/env python3
import json, os, sys, time
path = os.environ["FAKE_SLURM_STATE"]
with open(path) as handle:
    st = json.load(handle)
tool = os.path.basename(sys.argv[0])
argv = sys.argv[1:]
st.setdefault("calls", []).append([tool, *argv])
lie = st.get("lie") or {}
out = ""

def line(name):
    v = st["nodes"][name]
    comment = f" Comment={v['comment']}" if v.get("comment") else ""
    reason = f" Reason={v['reason']} [root@{v.get('time') or '2026-12-05T07:00:00'}]" \
        if v.get("reason") else ""
    return (f"NodeName={name} Arch=x86_64 CoresPerSocket=1 State={v['state']} "
            f"ThreadsPerCore=1 Partitions={','.join(v.get('partitions') or ['gpu'])}  "
            f"BootTime=2026-12-04T13:27:44 ExtSensorsTemp=n/s{comment}{reason}\n")

def tick():
    st["clock"] = st.get("clock", 0) + (0 if st.get("frozen") else 1)
    return f"2026-12-05T07:{st['clock'] // 60 % 60:02d}:{st['clock'] % 60:02d}"

race = None
if tool == "scontrol" and argv[:2] == ["show", "partition"]:
    part = argv[-1]
    if any(part in (v.get("partitions") or ["gpu"]) for v in st["nodes"].values()):
        out = f"PartitionName={part} Nodes={','.join(st['nodes'])}\n"
    else:
        sys.stderr.write(f"Partition {part} not found\n")
        sys.exit(1)
elif tool == "scontrol" and argv[:1] == ["show"]:
    st["shows"] = st.get("shows", 0) + 1
    asked = argv[-1]
    if lie.get("empty"):
        out = ""
    elif lie.get("garbled"):
        out = "slurm_load_node error: ??\x00\n"
    else:
        name = lie.get("answer_for") or asked
        if asked not in st["nodes"]:
            sys.stderr.write(f"Node {asked} not found\n")
            sys.exit(1)
        out = line(name)
    r = st.get("race")
    if r and st["shows"] == r.get("after_show"):
        race = r
elif tool == "scontrol" and argv[:1] == ["update"]:
    fields = dict(a.split("=", 1) for a in argv[1:])
    v = st["nodes"][fields["NodeName"]]
    if "Comment" in fields:
        v["comment"] = fields["Comment"]
    if fields.get("State") == "DRAIN":
        v.update(state="IDLE+DRAIN", reason=fields["Reason"], time=tick())
    elif fields.get("State") == "RESUME":
        v.update(state="IDLE", reason="", time="")
elif tool == "sinfo":
    if not lie.get("empty_sinfo"):
        part = argv[argv.index("-p") + 1] if "-p" in argv else None
        for name, v in st["nodes"].items():
            if part is None or part in (v.get("partitions") or ["gpu"]):
                state = v["state"].lower()
                out += f"{name}|{state}|{v.get('time') or 'Unknown'}|{v.get('reason') or 'none'}\n"
with open(path, "w") as handle:
    json.dump(st, handle)
sys.stdout.write(out)
sys.stdout.flush()
if race:
    time.sleep(race.get("sleep_s", 0))
    with open(path) as handle:
        st = json.load(handle)
    p = race["person"]
    st["nodes"][p["node"]].update(state=p["state"], reason=p.get("reason", ""),
                                  time="2026-12-05T08:00:00")
    st["race"] = None
    with open(path, "w") as handle:
        json.dump(st, handle)
'''


class FakeSlurm:
    """The fake's folder (put it first on PATH) and its state."""

    def __init__(self, base: Path, nodes: dict[str, dict[str, Any]]) -> None:
        self.bin = base / "fakebin"
        self.bin.mkdir(parents=True, exist_ok=True)
        for tool in ("scontrol", "sinfo"):
            exe = self.bin / tool
            exe.write_text(SCRIPT.replace("/usr/bin/env python3", sys.executable, 1))
            exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        self.path = base / "fake-slurm.json"
        self.write({"nodes": {n: {"state": "IDLE", "reason": "", "comment": "", **v}
                              for n, v in nodes.items()}})

    def read(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self.path.read_text())
        return state

    def write(self, state: dict[str, Any]) -> None:
        self.path.write_text(json.dumps(state))

    def update(self, **fields: Any) -> None:
        self.write({**self.read(), **fields})

    def node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.read()["nodes"][name]
        return node

    def set(self, name: str, **fields: Any) -> None:
        state = self.read()
        state["nodes"][name].update(fields)
        self.write(state)

    def updates(self) -> list[list[str]]:
        return [c[2:] for c in self.read().get("calls", []) if c[:2] == ["scontrol", "update"]]

    def env(self, holds: Path) -> dict[str, str]:
        return {"PATH": f"{self.bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                        f"{os.environ.get('PATH', '')}",
                "FAKE_SLURM_STATE": str(self.path), "NODEGATE_HOLDS_DIR": str(holds)}
