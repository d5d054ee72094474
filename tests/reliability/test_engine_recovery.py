"""The engine process survives any text, and its supervisor recovers it when it freezes (tiny model, CPU, one
supervised EngineClient). `kill -9` with sessions on it: test_gateway_reliability.py."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from voxrt.engine.client import EngineClient
from voxrt.engine.errors import EngineDeadError
from voxrt.engine.messages import EngineConfig
from voxrt.engine.supervisor import SupervisorConfig

CONFIG = EngineConfig(device="cpu", max_batch_size=8, max_seq_len=128)
SUPERVISOR = SupervisorConfig(heartbeat_interval_s=0.25, heartbeat_timeout_s=10.0, restart_backoff_s=0.1)


def run(coro, timeout_s: float = 240):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def _speak(client, text: str) -> list:
    rid = await client.submit(text=text, final=True, params={"greedy": True})
    return [chunk async for chunk in client.stream(rid)]


async def _wait_ready(client, timeout_s: float) -> float:
    t0 = time.monotonic()
    while not client.is_ready:
        assert time.monotonic() - t0 < timeout_s, "the engine did not come back"
        await asyncio.sleep(0.05)
    return time.monotonic() - t0


async def _clean(client) -> None:
    stats = await client.stats(check_pools=True)
    assert stats.pool_ok and stats.num_requests == 0
    assert stats.num_pages_free == stats.num_pages_total and stats.num_slots_free == stats.num_slots_total
    assert client.num_streams == 0


def test_the_engine_survives_any_text_and_recovers_from_kill_and_freeze():
    async def scenario():
        t_start = time.monotonic()
        client = await EngineClient.start(CONFIG, supervisor=SUPERVISOR)
        start_s = time.monotonic() - t_start
        try:
            pid = client.pid
            # lone surrogates reach the engine (no gateway in front): it scrubs them and speaks on
            chunks = await _speak(client, "Hi \ud800 there \udfff.")
            assert chunks[-1].is_last and client.pid == pid and client.is_ready

            # text then cancel at once, nobody reading the stream: nothing is left behind
            for _ in range(20):
                rid = await client.submit(text="Cancelled at once. ", final=False)
                await client.append_text(rid, "More text.")
                await client.cancel(rid)
            await _clean(client)

            # a frozen engine (SIGSTOP) stops answering heartbeats: it is killed and started again
            pid = client.pid
            rid = await client.submit(text="Frozen mid-turn, this turn fails.", final=True)
            frozen = asyncio.ensure_future(_drain(client, rid))
            os.kill(pid, signal.SIGSTOP)
            assert isinstance(await asyncio.wait_for(frozen, SUPERVISOR.heartbeat_timeout_s + 10), EngineDeadError)
            await _wait_ready(client, start_s + 60)
            assert client.num_restarts == 1 and client.pid != pid
            assert (await _speak(client, "Thawed."))[-1].is_last
            await _clean(client)
        finally:
            await client.close()

    run(scenario())


async def _drain(client, rid, first_chunk: asyncio.Event | None = None):
    """Reads a request's stream to its end; returns the error it ended with (None: it completed)."""
    try:
        async for _ in client.stream(rid):
            if first_chunk is not None:
                first_chunk.set()
    except EngineDeadError as exc:
        return exc
    return None
