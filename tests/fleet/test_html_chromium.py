"""The fleet HTML in a real headless Chromium: it renders, logs nothing, is not blank.

Chromium runs with console logging on stderr (``--enable-logging=stderr --v=0``): every
console message and uncaught exception shows as a ``CONSOLE`` line there. A control page
with a deliberate error proves that this detection works before it is trusted.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nodegate.fleet.aggregate import aggregate
from nodegate.fleet.html import write_html
from tests.fleet.png import gray_stats

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _render(page: Path, tmp_path: Path, height: int = 2400) -> tuple[str, str, Path]:
    """(DOM after scripts ran, console lines, screenshot) of one page."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    shot = tmp_path / f"{page.stem}.png"
    profile = tmp_path / f"profile-{page.stem}"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            "--hide-scrollbars", f"--window-size=1280,{height}", f"--screenshot={shot}",
            "--dump-dom", page.resolve().as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = "\n".join(line for line in proc.stderr.splitlines() if ":CONSOLE" in line)
    return proc.stdout, console, shot


def test_console_errors_are_detected(tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text("<!DOCTYPE html><html><body><p>control</p>"
                    "<script>document.body.dataset.x = '1'; notDefined();</script></body></html>")
    _dom, console, _shot = _render(page, tmp_path, height=300)
    assert "Uncaught ReferenceError: notDefined is not defined" in console


def test_fleet_report_renders_in_chromium(fleet_dir: Path, tmp_path: Path) -> None:
    page = write_html(aggregate(fleet_dir), tmp_path / "fleet.html")
    dom, console, shot = _render(page, tmp_path)
    assert console == "", console
    assert 'data-ready="1"' in dom  # the script ran to its end
    svgs = re.search(r'data-svg-count="(\d+)"', dom)
    assert svgs is not None and int(svgs.group(1)) >= 29
    assert '<span id="shown">7</span>' not in dom and '<span id="shown">6</span>' in dom
    variance, colors = gray_stats(shot)
    assert variance > 100, variance  # a blank (all-white) page has 0
    assert colors > 50, colors  # heatmap ramp, verdict badges, chart lines
