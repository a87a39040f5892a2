"""Shared fixtures: every test runs in its own working directory (studies go to ./studies)."""

from __future__ import annotations

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path
