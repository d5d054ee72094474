"""The engine in its own process behind the asyncio EngineClient (spawned, tiny model, CPU)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voxrt.engine.client import EngineClient
from voxrt.engine.errors import (CapacityError, EngineDeadError, InvalidParamsError, UnknownModelError,
                                 UnknownRequestError, UnknownVoiceError)
from voxrt.engine.messages import EngineConfig

TEXT = "Hello from the engine process, streamed chunk by chunk."


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 240))


async def _collect(client, rid):
    return [chunk async for chunk in client.stream(rid)]


def test_engine_process_end_to_end():
    async def scenario():
        # tiny-lite: tiny's structure with 4 codebooks, ~2.5x less CPU per frame (the process protocol is the same)
        client = await EngineClient.start(EngineConfig(model="tiny-lite", device="cpu", max_batch_size=8,
                                                       max_seq_len=512))
        try:
            info = client.info
            assert info.name == "tiny-lite" and info.sample_rate == 24000 and "default" in info.voices
            # two requests at once, one streaming its text in pieces
            a = await client.submit(text=TEXT, final=True, params={"greedy": True})
            b = await client.submit(voice="alto", text="Tokens ", final=False)
            task_a = asyncio.create_task(_collect(client, a))
            task_b = asyncio.create_task(_collect(client, b))
            for piece in ["arrive ", "one ", "by ", "one."]:
                await asyncio.sleep(0.01)
                await client.append_text(b, piece)
            await client.append_text(b, "", final=True)
            chunks_a, chunks_b = await task_a, await task_b
            for chunks in (chunks_a, chunks_b):
                assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
                assert chunks[-1].is_last and not any(c.is_last for c in chunks[:-1])
                assert all(c.sample_rate == 24000 for c in chunks)
            audio = np.concatenate([np.frombuffer(c.pcm, dtype="<f4") for c in chunks_a])
            assert len(audio) == sum(c.num_frames for c in chunks_a) * info.samples_per_frame
            assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0

            # cancel mid-stream: the stream ends, nothing follows, and the pages and slot come back
            c = await client.submit(text=TEXT * 4, final=True)
            got = []
            async for chunk in client.stream(c):
                got.append(chunk)
                if len(got) == 2:
                    await client.cancel(c)
            assert len(got) == 2 and not got[-1].is_last
            await client.cancel(c)  # idempotent
            stats = await client.stats()
            assert stats.pool_ok and stats.num_requests == 0
            assert stats.num_pages_free == stats.num_pages_total and stats.num_slots_free == stats.num_slots_total

            # bad input: typed errors at submit, the engine keeps serving
            with pytest.raises(UnknownVoiceError):
                await client.submit(voice="nobody", text="x")
            with pytest.raises(InvalidParamsError):
                await client.submit(text="x", params={"temperature": -1})
            with pytest.raises(UnknownRequestError):
                await client.append_text("no-such-request", "x")
            d = await client.submit(text="Still serving.", final=True)
            assert (await _collect(client, d))[-1].is_last
        finally:
            await client.close()
        assert not client.is_alive
        with pytest.raises(EngineDeadError):
            await client.submit(text="after close")

    run(scenario())


def test_capacity_failure_reaches_the_stream_with_its_code():
    async def scenario():
        client = await EngineClient.start(EngineConfig(device="cpu", num_pages=1, page_size=4))
        try:
            rid = await client.submit(text=TEXT, final=True)
            with pytest.raises(CapacityError) as err:
                await _collect(client, rid)
            assert err.value.code == "capacity"
        finally:
            await client.close()

    run(scenario())


def test_unknown_model_fails_start_with_a_typed_error():
    async def scenario():
        with pytest.raises(UnknownModelError, match="available: .*tiny"):
            await EngineClient.start(EngineConfig(model="nope", device="cpu"))

    run(scenario())
