"""Shared fixtures: every test runs in its own working directory (studies go to ./studies).

Fixtures used by more than one test file live here or in a plugin module registered
below, so no test file imports a fixture by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SMALL_SPACE
from tuner.space import Space, load_space

#: Fixture modules: a throwaway sshd on loopback, the systemctl/journalctl stand-in.
pytest_plugins = ["tests.fixtures_launchers"]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def space(workdir: Path) -> Space:
    """The small SGLang space of :data:`tests.helpers.SMALL_SPACE`, loaded from a file in
    the test's working directory."""
    path = workdir / "small.yaml"
    path.write_text(SMALL_SPACE)
    return load_space(path)
