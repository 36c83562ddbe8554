"""The Vagrantfile parses (``ruby -c``), and names an Ubuntu 22.04 box with two extra disks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

VAGRANTFILE = Path(__file__).resolve().parents[2] / "Vagrantfile"


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby not installed (apt-get install ruby)")
def test_vagrantfile_syntax() -> None:
    out = subprocess.run(["ruby", "-c", str(VAGRANTFILE)], capture_output=True, text=True,
                         check=False, timeout=30)
    assert out.returncode == 0 and "Syntax OK" in out.stdout, out.stderr


def test_vagrantfile_shape() -> None:
    text = VAGRANTFILE.read_text()
    assert 'config.vm.box = "generic/ubuntu2204"' in text
    assert text.count("nvme-rehearsal-") == 2
