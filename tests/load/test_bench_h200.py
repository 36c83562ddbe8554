"""The prepared real-GPU benchmark, rehearsed on CPU: it must run first time on a lent H200,
whose image has torch but not every package nodegate depends on (bench/h200_device.sh)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: Our figures beside a plain-torch reference (the dry run's CPU torch has an fp8 kernel)
REFERENCED = ("gemm_tflops", "gemm_tflops_fp8", "hbm_bandwidth", "h2d_bandwidth",
              "d2h_bandwidth")
#: the pattern test and the FSDP burn-in have no plain-torch reference
FIGURES = (*REFERENCED, "hbm_patterns_gbps", "fsdp_tflops", "fsdp_tokens_per_s")
#: Distributions on the device image that the bench path may import (its package list:
#: /work/.library/device/KINDS.md); the carried wheels are added from bench/h200_device.sh.
IMAGE_DISTS = {"torch", "numpy", "pyyaml", "nvidia-ml-py", "attrs", "typing-extensions",
               "jinja2", "markupsafe", "sympy", "mpmath", "networkx", "filelock", "fsspec",
               "setuptools", "packaging", "psutil", "prometheus-client", "triton"}

#: Loaded by every process of the run (coordinator, forkserver, workers) through PYTHONPATH:
#: a module outside the standard library, nodegate and the allowed distributions is refused.
GUARD = '''
import importlib.abc, os, sys
from importlib.metadata import packages_distributions
DISTS = set(os.environ["GUARD_DISTS"].split(","))
OWNERS = packages_distributions()
def allowed(top):
    if top in sys.stdlib_module_names or top == "nodegate":
        return True
    if top.startswith("_sysconfigdata"):  # the stdlib's build data (sysconfig), per platform
        return True
    return any(d.lower().replace("_", "-") in DISTS for d in OWNERS.get(top, ()))
def probing():
    # importlib.util.find_spec asks "is it there?" without importing (torch._dynamo probes
    # optional modules so): let that answer come from the real finders; only imports refuse
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == "find_spec" and "importlib.util" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if path is not None or allowed(top) or probing():
            return None
        with open(os.environ["GUARD_LOG"], "a") as log:
            log.write(name + "\\n")
        raise ModuleNotFoundError(f"{name}: not on the device image", name=name)
sys.meta_path.insert(0, Guard())
'''


def _wheels() -> dict[str, str]:
    script = (ROOT / "bench" / "h200_device.sh").read_text()
    found = re.search(r"WHEELS=\(([^)]*)\)", script)
    assert found is not None
    return dict(w.split("==") for w in found.group(1).split())


@pytest.mark.slow
def test_dry_run_on_the_device_image_packages_prints_every_figure(tmp_path: Path) -> None:
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    refused = tmp_path / "refused.txt"
    out = tmp_path / "h200.json"
    env = {**os.environ, "PYTHONPATH": f"{guard_dir}{os.pathsep}{ROOT / 'src'}",
           "GUARD_DISTS": ",".join(IMAGE_DISTS | set(_wheels())),
           "GUARD_LOG": str(refused)}
    proc = subprocess.run([sys.executable, "bench/h200_standard.py", "--dry-run", "--json",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| (\w+)\s+\|\s+([\d.]+|n/a) \|", proc.stdout, re.MULTILINE)}
    assert set(rows) == set(FIGURES), proc.stdout
    assert "n/a" not in rows.values(), proc.stdout  # each of ours has a figure
    data = json.loads(out.read_text())
    for when in ("before", "after"):
        assert all(data["references"][when][name] > 0 for name in REFERENCED)
    by_id = {r["check"] + "[" + r["entity"] + "]": r for r in data["results"]}
    # the shipped profile's thresholds reach every judged figure (CPU figures may FAIL them)
    for name in FIGURES:
        result = by_id.get(f"{name}[gpu0]") or by_id[f"{name}[node]"]
        assert result["verdict"] in ("PASS", "FAIL"), result
        assert result["threshold"], result
    # one GPU: the peer checks say why they did not run
    assert by_id["p2p_unidir[node]"]["verdict"] == "SKIP"
    assert "peer" in json.dumps(by_id["p2p_unidir[node]"]["evidence"])
    # whatever was refused was optional to torch or nodegate: the run above still passed;
    # nothing nodegate ships may be among it
    assert not [m for m in (refused.read_text().split() if refused.exists() else [])
                if m.startswith("nodegate")]


def test_device_wheels_are_jsonschema_and_what_it_needs_beyond_the_image() -> None:
    """The carried wheels are the versions this suite ran with, and the runtime requirements
    (transitively) of jsonschema and python-debian (the quick checks' Debian version ordering,
    which the device run's health step reaches) less what the image already has."""
    wheels = _wheels()
    for name, pinned in wheels.items():
        assert version(name) == pinned, f"{name}: carried {pinned}, tested {version(name)}"
    needed: set[str] = set()
    todo = ["jsonschema", "python-debian"]
    while todo:
        dist = todo.pop()
        if dist in needed:
            continue
        needed.add(dist)
        for line in requires(dist) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower().replace("_", "-"))
    assert set(wheels) == needed - IMAGE_DISTS
