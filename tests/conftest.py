"""Fixtures shared by every test directory."""

from __future__ import annotations

import os

import pytest
import torch

# Triton's kernels (voxrt/engine/runtime/kernels) run in its CPU interpreter where there is no GPU. The switch
# is read when a kernel is defined (at import), so it is set before any test module imports them.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from voxrt_live import live_server


@pytest.fixture(scope="module")
def live():
    """A real server (uvicorn + the tiny model's engine process on the CPU) for the tests of one module."""
    with live_server() as server:
        yield server
