"""The remediation tests' state folder: a fresh one per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodegate.remediation.state import StateStore


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(tmp_path / "state")
