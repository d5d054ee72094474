"""One engine process, several clients: `EngineClient.start(listen=...)` and `EngineClient.connect` (the stand-in
core, so no model loads)."""

from __future__ import annotations

import asyncio
import os
import secrets

from voxrt.engine.client import EngineClient
from voxrt.engine.errors import EngineDeadError
from voxrt.engine.messages import EngineConfig

CONFIG = EngineConfig(model="standin", standin_speed=50.0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_two_clients_share_one_engine_and_a_leaving_client_is_cleaned_up(tmp_path):
    async def scenario():
        path, key = str(tmp_path / "engine.sock"), secrets.token_bytes(16)
        owner = await EngineClient.start(CONFIG, listen=(path, key))
        other = await EngineClient.connect(path, key)
        try:
            assert other.info == owner.info and other.info.name == "standin"
            a = await owner.submit(text="owner's turn", final=True, params={"num_frames": 8})
            b = await other.submit(text="other's turn", final=True, params={"num_frames": 8})
            assert a != b  # request ids are unique across clients of one engine
            got_a = [c async for c in owner.stream(a)]
            got_b = [c async for c in other.stream(b)]
            assert [c.num_frames for c in got_a] == [c.num_frames for c in got_b] == [2, 4, 2]
            for chunk in got_a + got_b:  # the path's first timestamps, on the host's one monotonic clock
                assert 0 < chunk.done_ns <= chunk.received_ns
            # a client leaving with a request running: the engine cancels it, the owner goes on
            await other.submit(text="abandoned", final=True, params={"num_frames": 5000})
            await other.close()
            c = await owner.submit(text="still here", final=True, params={"num_frames": 2})
            assert [x.is_last for x in [x async for x in owner.stream(c)]] == [True]
            stats = await owner.stats()
            assert stats.num_requests == 0  # the abandoned request is gone
        finally:
            await other.close()
            await owner.close()
        assert not os.path.exists(path)  # the listener removed its socket

    run(scenario())


def test_connect_errors_are_typed(tmp_path):
    async def scenario():
        try:
            await EngineClient.connect(str(tmp_path / "nobody.sock"), b"k", timeout_s=5)
        except EngineDeadError as exc:
            return exc.message
        return None

    assert "cannot connect" in run(scenario())
