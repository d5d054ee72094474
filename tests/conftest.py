"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from voxrt_live import live_server


@pytest.fixture(scope="module")
def live():
    """A real server (uvicorn + the tiny model's engine process on the CPU) for the tests of one module."""
    with live_server() as server:
        yield server
