"""One live server for the reliability suite: tiny on the CPU with a small length cap (max_seq_len 32: a
request ends after 27 frames, so long turns continue in further requests), small admission limits and short
timers so each rule bites within a test."""

from __future__ import annotations

import asyncio

import pytest

from voxrt.protocol.config import Limits
from voxrt_live import live_server  # tests/support, on pytest's pythonpath

RELIABILITY_GATEWAY = dict(max_sessions=24, max_queue=2, queue_timeout_s=1.0, max_messages_per_s=1000.0,
                           limits=Limits(inactivity_timeout_s=3.0, start_timeout_s=2.0))
RELIABILITY_ENGINE = dict(max_seq_len=32, max_batch_size=32)


@pytest.fixture(scope="module")
def live():
    with live_server(engine_kwargs=RELIABILITY_ENGINE, **RELIABILITY_GATEWAY) as server:
        yield server


def on_server_loop(live, coro_fn, timeout_s: float = 10):
    """Runs `coro_fn()` on the server's event loop (its own thread) and returns the result."""
    return asyncio.run_coroutine_threadsafe(coro_fn(), live.state.loop).result(timeout_s)


async def _num_tasks() -> int:
    return len(asyncio.all_tasks())


def num_server_tasks(live) -> int:
    return on_server_loop(live, _num_tasks)
